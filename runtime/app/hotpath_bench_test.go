package app

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai/openaitest"
)

// BenchmarkHotPath measures the OpenAI proxy's hot path as issue 39 states its goal: the binary
// in front of a fake vLLM upstream, against calling the upstream directly and against nginx as
// a plain keep-alive reverse proxy of the same upstream (when nginx is on PATH: Debian's
// nginx-light), in interleaved rounds, every process on the same machine. Run it alone:
//
//	go test ./runtime/app -run '^$' -bench HotPath -benchtime 1x
//
// INFERGATE_HOTPATH_ROUNDS (default 3) and INFERGATE_HOTPATH_SECONDS (default 3, per arm and
// load) set its length. Each round starts every arm afresh (a process is only measured in one
// round) and measures each load in INFERGATE_HOTPATH_SLICES slices (default 6), the arms taking
// turns, so that a machine whose speed drifts (a shared host) meets every arm alike; a ratio is
// the median of the rounds' own ratios. The loads:
//   - c=64: non-streaming chat completions from 64 keep-alive connections, as fast as they go;
//   - c=1: the same from one connection, for the added median latency;
//   - stream: time to the first byte of a 16-chunk stream's body, one at a time.
//
// The arms: direct (the upstream), nginx (2 workers, keep-alive to the upstream, buffering off
// as a streaming gateway needs, no access log), infergate (the default config: metrics on,
// tracing configured but not sampling, no request log), infergate+keys (the same with an API
// key checked on every request) and infergate-nethttp (the default config on net/http's server,
// server.http1: net/http), and with INFERGATE_HOTPATH_BASELINE=BINARY a "baseline" arm: another
// build of the binary (say, the last commit's), for old against new in one run;
// INFERGATE_HOTPATH_ARMS=a,b keeps only those arms (and direct); INFERGATE_HOTPATH_ENV="K=V ..."
// sets environment variables for the infergate arm alone. With INFERGATE_HOTPATH_FLOORS=1
// also the least a proxy can do
// on net/http's server, fasthttp's and a hand-written connection loop (tools/hotpath/floor). The
// load client speaks HTTP/1.1 over raw connections with
// pre-built requests, so that it spends as little of the two cores as it can. Reported: medians
// over the rounds, the ratios the goal is stated in, and each proxy's CPU time per request at c=64
// (its processes' user and system time, from /proc): steadier than req/s on a shared machine;
// and its user-space part (the proxy's own code and runtime; the rest is the kernel's, which
// the same system calls cost every proxy alike). At c=1 and for the streams, the CPU a request
// costs a proxy that wakes for each one, and at c=1 its threads' context switches a request:
// what a lightly loaded gateway costs its machine.
func BenchmarkHotPath(b *testing.B) {
	rounds, seconds := envInt(b, "INFERGATE_HOTPATH_ROUNDS", 3), envInt(b, "INFERGATE_HOTPATH_SECONDS", 3)
	up := openaitest.Start(b, "up", "llama")
	up.SetStream(16, 0)
	dir := b.TempDir()
	bin := filepath.Join(dir, "infergate")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	upAddr := strings.TrimPrefix(up.URL, "http://")
	arms := []arm{{name: "direct", start: func() instance { return instance{addr: upAddr, stop: func() {}} }}}
	if nginx, err := exec.LookPath("nginx"); err == nil {
		arms = append(arms, arm{name: "nginx", start: func() instance { return startNginx(b, nginx, dir, upAddr) }})
	} else {
		b.Log("nginx is not on PATH (apt-get install nginx-light): no nginx arm")
	}
	gwBin := func(bin, name, extra string) arm {
		cfg := filepath.Join(dir, name+".yaml")
		conf := fmt.Sprintf("builtin_models: false\nupstreams:\n  - {name: up, url: %s, type: vllm}\n"+
			"tracing: {otlp_endpoint: 'http://127.0.0.1:1', level: [OFF]}\n%s", up.URL, extra)
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			b.Fatal(err)
		}
		var env []string
		if e := os.Getenv("INFERGATE_HOTPATH_ENV"); e != "" && name == "infergate" {
			// Runtime settings tried on the infergate arm alone (GOGC=200, GOMAXPROCS=1, ...),
			// against a baseline arm of the same binary without them.
			env = append(os.Environ(), strings.Fields(e)...)
		}
		return arm{name: name, start: func() instance {
			addr, pprofAddr := freeAddrB(b), freeAddrB(b)
			cmd := exec.Command(bin, "-listen", addr, "-config", cfg, "-log-level", "error", "-pprof-listen", pprofAddr)
			cmd.Stderr, cmd.Env = os.Stderr, env
			return startArm(b, cmd, addr, pprofAddr)
		}}
	}
	gw := func(name, extra string) arm { return gwBin(bin, name, extra) }
	keyed := gw("infergate+keys", "auth:\n  keys:\n    - {name: bench, sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08}\n")
	keyed.auth = "test" // sha256("test") above
	// The same binary with net/http's server for HTTP/1.1 (server.http1), as before the gateway
	// had its own: the change of server, measured in the same run.
	arms = append(arms, gw("infergate", ""), keyed, gw("infergate-nethttp", "server: {http1: net/http}\n"))
	if old := os.Getenv("INFERGATE_HOTPATH_BASELINE"); old != "" {
		// Another build of the binary (an older commit's), default config: a change measured
		// old against new in one run.
		arms = append(arms, gwBin(old, "baseline", ""))
	}
	if only := os.Getenv("INFERGATE_HOTPATH_ARMS"); only != "" {
		keep := strings.Split(only+",direct", ",")
		arms = slices.DeleteFunc(arms, func(a arm) bool { return !slices.Contains(keep, a.name) })
	}
	if os.Getenv("INFERGATE_HOTPATH_FLOORS") != "" {
		// The least a proxy can do on each server a Go gateway could be built on
		// (tools/hotpath/floor): what a change of server could gain, before it is made.
		floor := filepath.Join(dir, "floor")
		build := exec.Command("go", "build", "-o", floor, "./floor")
		build.Dir = filepath.Join("..", "..", "tools", "hotpath")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("building the floors: %v\n%s", err, out)
		}
		for _, server := range []string{"nethttp", "fasthttp", "loop"} {
			arms = append(arms, arm{name: "floor-" + server, start: func() instance {
				addr := freeAddrB(b)
				cmd := exec.Command(floor, "-listen", addr, "-upstream", upAddr, "-server", server)
				cmd.Stderr = os.Stderr
				return startArm(b, cmd, addr, "")
			}})
		}
	}

	chat := `{"model":"llama","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Tell me about the weather in Paris."}],"temperature":0.7,"max_tokens":64}`
	stream := `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	type result struct{ rps, p50, ttfb, cpu, user, c1cpu, c1switch, streamcpu []float64 }
	res := map[string]*result{}
	dur := time.Duration(seconds) * time.Second
	slicesPerLoad := envInt(b, "INFERGATE_HOTPATH_SLICES", 6)
	slice := dur / time.Duration(slicesPerLoad)
	for r := range rounds {
		// A fresh process per arm each round: two processes of one binary can differ by a
		// sixth in CPU a request for as long as they run (why is not known), which a run's
		// rounds would otherwise all inherit. Every arm of a round is started first, and each
		// load is then measured in slices, the arms taking turns (their order rotating): the
		// machine's speed drifts over seconds (a shared host), and arms measured one after the
		// other would each meet a different machine.
		ins := make([]instance, len(arms))
		acc := make([]sliced, len(arms))
		for i, a := range arms {
			ins[i] = a.start()
			waitChat(b, ins[i].addr, a.auth)
		}
		turns := func(f func(i int, a arm, in instance)) {
			for sl := range slicesPerLoad {
				for k := range arms {
					i := (k + sl + r) % len(arms)
					f(i, arms[i], ins[i])
				}
			}
		}
		turns(func(i int, a arm, in instance) {
			x := &acc[i]
			user0, sys0 := procCPU(b, in.pids)
			r0, w0 := procIO(b, in.pids)
			rps, done := load(b, in.addr, a.auth, chat, 64, slice)
			user1, sys1 := procCPU(b, in.pids)
			r1, w1 := procIO(b, in.pids)
			x.n64 += float64(len(done))
			x.t64 += float64(len(done)) / rps
			x.cpu64 += user1 + sys1 - user0 - sys0
			x.user64 += user1 - user0
			x.reads, x.writes = x.reads+r1-r0, x.writes+w1-w0
		})
		// At c=1 and for streams, the CPU a request costs when the proxy wakes for every one,
		// and (c=1) the context switches it makes: what a lightly loaded gateway costs.
		turns(func(i int, a arm, in instance) {
			x := &acc[i]
			u0, s0 := procCPU(b, in.pids)
			sw0 := procSwitches(b, in.pids)
			_, lat := load(b, in.addr, a.auth, chat, 1, slice)
			u1, s1 := procCPU(b, in.pids)
			sw1 := procSwitches(b, in.pids)
			x.lat = append(x.lat, lat...)
			x.c1cpu += u1 + s1 - u0 - s0
			x.c1switch += sw1 - sw0
		})
		turns(func(i int, a arm, in instance) {
			x := &acc[i]
			u0, s0 := procCPU(b, in.pids)
			ttfb := firstEvents(b, in.addr, a.auth, stream, slice)
			u1, s1 := procCPU(b, in.pids)
			x.ttfb = append(x.ttfb, ttfb...)
			x.streamcpu += u1 + s1 - u0 - s0
		})
		for i, a := range arms {
			ins[i].stop()
			x, y := res[a.name], acc[i]
			if x == nil {
				x = &result{}
				res[a.name] = x
			}
			rps := y.n64 / y.t64
			perReq := func(d time.Duration, n float64) float64 { return float64(d.Microseconds()) / n }
			cpu, user := perReq(y.cpu64, y.n64), perReq(y.user64, y.n64)
			c1cpu, c1switch := perReq(y.c1cpu, float64(len(y.lat))), y.c1switch/float64(len(y.lat))
			streamcpu := perReq(y.streamcpu, float64(len(y.ttfb)))
			if ins[i].pids != nil {
				x.cpu, x.user = append(x.cpu, cpu), append(x.user, user)
				x.c1cpu, x.c1switch, x.streamcpu = append(x.c1cpu, c1cpu), append(x.c1switch, c1switch), append(x.streamcpu, streamcpu)
			}
			x.rps, x.p50, x.ttfb = append(x.rps, rps), append(x.p50, median(y.lat)), append(x.ttfb, median(y.ttfb))
			b.Logf("round %d %-15s c=64 %8.0f req/s %6.1f µs CPU/req (user %4.1f) %4.2f reads %4.2f writes   c=1 p50 %6.1f µs (CPU %5.1f µs, %4.2f switches)   stream first byte p50 %6.1f µs (CPU %5.1f µs)",
				r+1, a.name, rps, cpu, user, y.reads/y.n64, y.writes/y.n64, median(y.lat), c1cpu, c1switch, median(y.ttfb), streamcpu)
		}
	}
	// What a request costs each proxy, from a c=64 load of its own after the rounds:
	// allocations (the binary's own counter), and, with INFERGATE_HOTPATH_STRACE=1, system
	// calls (strace -c on its processes, which slows them: counts only). With
	// INFERGATE_HOTPATH_PROFILE=DIR, the infergate arm's CPU profile during such a load is saved
	// in DIR/infergate.cpu.pprof (go tool pprof -top DIR/infergate.cpu.pprof), an execution
	// trace of a c=1 load in DIR/infergate.c1.trace (where a lone request waits), one of streams
	// one at a time in DIR/infergate.stream.trace, and the
	// allocations of a c=64 load in DIR/infergate.allocs.pprof. With INFERGATE_HOTPATH_PGO=FILE,
	// a CPU profile of the three loads in turn is saved in FILE: the binary's PGO profile.
	for _, a := range arms {
		in := a.start()
		waitChat(b, in.addr, a.auth)
		if in.pprof != "" {
			before := mallocs(b, in.addr)
			load(b, in.addr, a.auth, chat, 64, dur)
			after := mallocs(b, in.addr)
			b.ReportMetric((after.mallocs-before.mallocs)/(after.requests-before.requests), a.name+"-allocs/req")
		}
		if dir := os.Getenv("INFERGATE_HOTPATH_PROFILE"); dir != "" && a.name == "infergate" {
			profile(b, in.pprof, "profile", filepath.Join(dir, "infergate.cpu.pprof"), seconds-1, func() { load(b, in.addr, a.auth, chat, 64, dur) })
			profile(b, in.pprof, "trace", filepath.Join(dir, "infergate.c1.trace"), 1, func() { load(b, in.addr, a.auth, chat, 1, dur) })
			profile(b, in.pprof, "trace", filepath.Join(dir, "infergate.stream.trace"), 1, func() { firstEvents(b, in.addr, a.auth, stream, dur) })
			profile(b, in.pprof, "allocs", filepath.Join(dir, "infergate.allocs.pprof"), seconds-1, func() { load(b, in.addr, a.auth, chat, 64, dur) })
		}
		if file := os.Getenv("INFERGATE_HOTPATH_PGO"); file != "" && a.name == "infergate" {
			// The profile the binary is built with (runtime/default.pgo, see docs/performance.md):
			// the three loads in turn, three times, so that no one of them is all the compiler sees.
			profile(b, in.pprof, "profile", file, 9*seconds, func() {
				for range 3 {
					load(b, in.addr, a.auth, chat, 64, dur)
					firstEvents(b, in.addr, a.auth, stream, dur)
					load(b, in.addr, a.auth, chat, 1, dur)
				}
			})
		}
		if os.Getenv("INFERGATE_HOTPATH_STRACE") != "" && in.pids != nil {
			var reqs float64
			calls := straceCalls(b, in.pids, func() {
				_, lat := load(b, in.addr, a.auth, chat, 64, dur)
				reqs = float64(len(lat))
			})
			total := 0
			var top []string
			for _, k := range slices.SortedFunc(maps.Keys(calls), func(x, y string) int { return calls[y] - calls[x] }) {
				total += calls[k]
				if len(top) < 8 {
					top = append(top, fmt.Sprintf("%s %.2f", k, float64(calls[k])/reqs))
				}
			}
			b.ReportMetric(float64(total)/reqs, a.name+"-syscalls/req")
			b.Logf("%s: %.2f system calls a request: %s", a.name, float64(total)/reqs, strings.Join(top, ", "))
		}
		in.stop()
	}

	med := func(name string, f func(*result) []float64) float64 { return median(f(res[name])) }
	rps := func(x *result) []float64 { return x.rps }
	p50 := func(x *result) []float64 { return x.p50 }
	ttfb := func(x *result) []float64 { return x.ttfb }
	for _, a := range arms {
		b.ReportMetric(med(a.name, rps), a.name+"-req/s")
		if x := res[a.name]; x.cpu != nil {
			b.ReportMetric(median(x.cpu), a.name+"-cpu-us/req")
			b.ReportMetric(median(x.user), a.name+"-user-us/req")
			b.ReportMetric(median(x.c1cpu), a.name+"-c1-cpu-us/req")
			b.ReportMetric(median(x.c1switch), a.name+"-c1-switches/req")
			b.ReportMetric(median(x.streamcpu), a.name+"-stream-cpu-us/req")
		}
	}
	if res["infergate"] == nil {
		return
	}
	// Ratios are the medians of each round's own ratio: the arms of a round met the same
	// machine, rounds did not.
	ratio := func(f func(r int) float64) float64 {
		xs := make([]float64, rounds)
		for r := range xs {
			xs[r] = f(r)
		}
		return median(xs)
	}
	speed := func(name, of string) float64 {
		return ratio(func(r int) float64 { return res[name].rps[r] / res[of].rps[r] })
	}
	added := func(name string, f func(*result) []float64) float64 {
		return med(name, f) - med("direct", f)
	}
	addedRatio := func(name, of string, f func(*result) []float64) float64 {
		return ratio(func(r int) float64 {
			d := f(res["direct"])[r]
			return (f(res[name])[r] - d) / (f(res[of])[r] - d)
		})
	}
	b.ReportMetric(speed("infergate", "direct"), "c64-x-direct")
	if res["infergate+keys"] != nil {
		b.ReportMetric(speed("infergate+keys", "infergate"), "keys-x-infergate")
	}
	b.ReportMetric(added("infergate", p50), "c1-added-us")
	b.ReportMetric(added("infergate", ttfb), "ttfb-added-us")
	for _, other := range []string{"infergate-nethttp", "baseline"} {
		if res[other] == nil {
			continue
		}
		short := strings.TrimPrefix(other, "infergate-")
		b.ReportMetric(speed("infergate", other), "c64-x-"+short)
		b.ReportMetric(ratio(func(r int) float64 { return res["infergate"].cpu[r] / res[other].cpu[r] }), "cpu-x-"+short)
		b.ReportMetric(added(other, p50), short+"-c1-added-us")
		b.ReportMetric(added(other, ttfb), short+"-ttfb-added-us")
		b.ReportMetric(addedRatio("infergate", other, p50), "c1-added-x-"+short)
		b.ReportMetric(addedRatio("infergate", other, ttfb), "ttfb-added-x-"+short)
	}
	if res["nginx"] != nil {
		b.ReportMetric(speed("nginx", "direct"), "nginx-c64-x-direct")
		b.ReportMetric(speed("infergate", "nginx"), "c64-x-nginx")
		b.ReportMetric(added("nginx", p50), "nginx-c1-added-us")
		b.ReportMetric(added("nginx", ttfb), "nginx-ttfb-added-us")
		b.ReportMetric(addedRatio("infergate", "nginx", p50), "c1-added-x-nginx")
		b.ReportMetric(addedRatio("infergate", "nginx", ttfb), "ttfb-added-x-nginx")
	}
}

// sliced is what one arm's slices of a round's loads add up to.
type sliced struct {
	n64, t64                        float64 // c=64: requests, seconds
	cpu64, user64, c1cpu, streamcpu time.Duration
	reads, writes, c1switch         float64
	lat, ttfb                       []float64 // c=1 latencies, streams' first bytes (µs)
}

// arm is one way of serving the benchmark's requests; start starts a fresh instance of it.
type arm struct {
	name  string
	auth  string // the API key its requests carry
	start func() instance
}

// instance is a started arm.
type instance struct {
	addr  string
	pids  []int  // the processes serving it, for their CPU time, reads and system calls
	pprof string // the infergate binary's profiler
	stop  func()
}

// startArm starts cmd, a proxy listening on addr (its profiler on pprofAddr, if any).
func startArm(b *testing.B, cmd *exec.Cmd, addr, pprofAddr string) instance {
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop := sync.OnceFunc(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	b.Cleanup(stop)
	return instance{addr: addr, pids: []int{cmd.Process.Pid}, pprof: pprofAddr, stop: stop}
}

// startNginx runs nginx as a plain keep-alive reverse proxy of upstream; its pids are the
// master's and the workers'.
func startNginx(b *testing.B, nginx, dir, upstream string) instance {
	addr := freeAddrB(b)
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, `worker_processes 2;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream up { server %[2]s; keepalive 256; }
  server {
    listen %[3]s;
    keepalive_requests 1000000;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`, dir, upstream, addr), 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(nginx, "-c", conf, "-p", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	// SIGTERM, not a kill: the master then stops its workers, which a killed master leaves
	// running.
	stop := sync.OnceFunc(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	b.Cleanup(stop)
	waitChat(b, addr, "")
	pids := []int{cmd.Process.Pid}
	out, _ := exec.Command("pgrep", "-P", strconv.Itoa(cmd.Process.Pid)).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return instance{addr: addr, pids: pids, stop: stop}
}

// procCPU is the CPU time the processes have used, in user space and in the kernel, from /proc.
func procCPU(b *testing.B, pids []int) (user, system time.Duration) {
	var ticks [2]int64
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatal(err)
		}
		// The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		for i := range ticks {
			n, err := strconv.ParseInt(f[11+i], 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			ticks[i] += n
		}
	}
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(ticks[0]) * tick, time.Duration(ticks[1]) * tick
}

// procIO returns the read and write system calls pids made (read(2) and write(2) and their
// kind, EAGAIN included; not recvfrom or sendmsg), from /proc/PID/io: counted by the kernel, so
// unlike strace they do not slow what they count.
func procIO(b *testing.B, pids []int) (reads, writes float64) {
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
		if err != nil {
			b.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "syscr":
				reads += n
			case "syscw":
				writes += n
			}
		}
	}
	return reads, writes
}

// procSwitches returns the context switches the processes' threads made, voluntary or not,
// from /proc/PID/task/TID/status.
func procSwitches(b *testing.B, pids []int) float64 {
	var n float64
	for _, pid := range pids {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			b.Fatal(err)
		}
		for _, task := range tasks {
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
			if err != nil {
				continue // a thread that has just ended
			}
			for line := range strings.Lines(string(data)) {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "voluntary_ctxt_switches") {
					c, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
					n += c
				}
			}
		}
	}
	return n
}

type counters struct{ mallocs, requests float64 }

// mallocs reads the gateway's allocation count and its OpenAI requests from /metrics.
func mallocs(b *testing.B, addr string) counters {
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	var c counters
	s := bufio.NewScanner(res.Body)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		line := s.Text()
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch {
		case f[0] == "go_memstats_mallocs_total":
			c.mallocs = v
		case strings.HasPrefix(f[0], "infergate_openai_requests_total{"):
			c.requests += v
		}
	}
	if c.requests == 0 {
		b.Fatalf("no infergate_openai_requests_total in %s/metrics", addr)
	}
	return c
}

// profile saves a CPU profile or an execution trace (kind: profile or trace) of the binary whose
// profiler is at pprofAddr while run runs.
func profile(b *testing.B, pprofAddr, kind, file string, seconds int, run func()) {
	done := make(chan error, 1)
	go func() {
		res, err := http.Get("http://" + pprofAddr + "/debug/pprof/" + kind + "?seconds=" + strconv.Itoa(max(seconds, 1)))
		if err != nil {
			done <- err
			return
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(res.Body, 1<<10))
			done <- fmt.Errorf("profiler: %s: %s", res.Status, msg)
			return
		}
		// Written aside and renamed when whole: FILE may be runtime/default.pgo, which every
		// build of the binary reads.
		f, err := os.Create(file + ".part")
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, res.Body)
		if err = errors.Join(err, f.Close()); err == nil {
			err = os.Rename(file+".part", file)
		}
		done <- err
	}()
	run()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	switch kind {
	case "trace":
		b.Logf("execution trace: go tool trace -pprof=sched %s > sched.pprof (or go tool trace %s)", file, file)
	case "allocs":
		b.Logf("allocations at c=64: go tool pprof -sample_index=alloc_objects -top %s", file)
	default:
		b.Logf("CPU profile: go tool pprof -top %s", file)
	}
}

// straceCalls counts the system calls pids make while run runs (strace -c).
func straceCalls(b *testing.B, pids []int, run func()) map[string]int {
	out := filepath.Join(b.TempDir(), "strace.txt")
	args := []string{"-c", "-f", "-o", out}
	for _, p := range pids {
		args = append(args, "-p", strconv.Itoa(p))
	}
	cmd := exec.Command("strace", args...)
	if err := cmd.Start(); err != nil {
		b.Fatalf("strace: %v", err)
	}
	time.Sleep(time.Second) // attached
	run()
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()
	text, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(string(text), "\n") {
		f := strings.Fields(line)
		// % time, seconds, usecs/call, calls, [errors,] syscall
		if len(f) < 5 || f[len(f)-1] == "total" || f[len(f)-1] == "syscall" {
			continue
		}
		if n, err := strconv.Atoi(f[3]); err == nil {
			calls[f[len(f)-1]] += n
		}
	}
	return calls
}

// waitChat waits until a chat request through addr succeeds.
func waitChat(b *testing.B, addr, auth string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := dialH1(addr, auth, `{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
		if err == nil {
			_, err = c.do()
			c.Close()
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never answered a chat request: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// load sends the chat request from c keep-alive connections for d and returns the rate and each
// request's latency.
func load(b *testing.B, addr, auth, body string, c int, d time.Duration) (float64, []float64) {
	conns := make([]*h1Conn, c)
	for i := range conns {
		var err error
		if conns[i], err = dialH1(addr, auth, body); err != nil {
			b.Fatal(err)
		}
		defer conns[i].Close()
		if _, err := conns[i].do(); err != nil { // warm: the connection's first request
			b.Fatal(err)
		}
	}
	rate, lats, err := callLoop(c, d, func(i int) error {
		_, err := conns[i].do()
		return err
	})
	if err != nil {
		b.Fatalf("%s: %v", addr, err)
	}
	return rate, lats
}

// callLoop makes call(i) again and again from c goroutines (i their number) for d, and returns
// the rate, each call's latency (µs) and the first call's failure, which ends its goroutine.
func callLoop(c int, d time.Duration, call func(i int) error) (float64, []float64, error) {
	var stop atomic.Bool
	lats := make([][]float64, c)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error] // the first call's failure
	start := time.Now()
	for i := range c {
		wg.Go(func() {
			for !stop.Load() {
				s := time.Now()
				if err := call(i); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lats[i] = append(lats[i], float64(time.Since(s).Nanoseconds())/1e3)
			}
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		return 0, nil, *err
	}
	all := slices.Concat(lats...)
	return float64(len(all)) / elapsed.Seconds(), all, nil
}

// firstEvents streams one request at a time for d and returns each one's time to its first SSE
// event, in µs.
func firstEvents(b *testing.B, addr, auth, body string, d time.Duration) []float64 {
	conn, err := dialH1(addr, auth, body)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var out []float64
	for end := time.Now().Add(d); time.Now().Before(end); {
		first, err := conn.do()
		if err != nil {
			b.Fatalf("%s: %v", addr, err)
		}
		out = append(out, float64(first.Nanoseconds())/1e3)
	}
	return out[min(len(out)-1, 10):] // the first few warm up
}

// h1Conn is a minimal HTTP/1.1 client connection sending one pre-built POST again and again.
type h1Conn struct {
	net.Conn
	br  *bufio.Reader
	req []byte
}

func dialH1(addr, auth, body string) (*h1Conn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := "POST /v1/chat/completions HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	if auth != "" {
		h += "Authorization: Bearer " + auth + "\r\n"
	}
	return &h1Conn{Conn: nc, br: bufio.NewReaderSize(nc, 64<<10), req: []byte(h + "\r\n" + body)}, nil
}

var errStatus = errors.New("not a 200")

// do sends the request and reads the whole answer, Content-Length or chunked; it returns the
// time from sending to the first byte of the body.
func (c *h1Conn) do() (time.Duration, error) {
	start := time.Now()
	if _, err := c.Write(c.req); err != nil {
		return 0, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200")) {
		return 0, fmt.Errorf("%w: %q", errStatus, line)
	}
	length, chunked := -1, false
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		k, v, _ := bytes.Cut(line, []byte(":"))
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			length, _ = strconv.Atoi(string(v))
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		}
	}
	if _, err := c.br.Peek(1); err != nil {
		return 0, err
	}
	first := time.Since(start)
	if !chunked {
		if length < 0 {
			return 0, errors.New("neither Content-Length nor chunked")
		}
		_, err := c.br.Discard(length)
		return first, err
	}
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil {
			return 0, fmt.Errorf("chunk size %q: %w", line, err)
		}
		if _, err := c.br.Discard(int(n) + 2); err != nil {
			return 0, err
		}
		if n == 0 {
			return first, nil
		}
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
