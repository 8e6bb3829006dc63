package app

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai/openaitest"
)

// BenchmarkGatewayRSS runs the real binary in front of a fake vLLM upstream and drives it at a
// steady 1,000 OpenAI requests per second (one in ten a 16-chunk stream) for
// INFERGATE_RSS_DURATION (default 60s), then leaves it idle for 10 s. The gateway is its own
// process, so its resident set is measured alone (from /proc). Run it on its own:
//
//	go test ./runtime/app -run '^$' -bench GatewayRSS -benchtime 1x
//
// Issue 5's targets: peak RSS <= 60 MB under the load, and no growth once it stops.
func BenchmarkGatewayRSS(b *testing.B) {
	duration := 60 * time.Second
	if v := os.Getenv("INFERGATE_RSS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("INFERGATE_RSS_DURATION: %v", err)
		}
		duration = d
	}
	const rate = 1000
	up := openaitest.Start(b, "up", "llama")
	up.SetStream(16, time.Millisecond)

	dir := b.TempDir()
	bin := filepath.Join(dir, "infergate")
	if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "infergate.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "upstreams:\n  - name: up\n    url: %s\n    type: vllm\n", up.URL), 0o600); err != nil {
		b.Fatal(err)
	}

	for range b.N {
		addr := freeAddrB(b)
		cmd := exec.Command(bin, "-listen", addr, "-config", cfg, "-log-level", "warn")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		base := "http://" + addr
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
		waitRoutable(b, client, base)

		chat := []byte(`{"model":"llama","messages":[{"role":"user","content":"Tell me about the weather in Paris."}],"max_tokens":64}`)
		stream := []byte(`{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		var sent, failed atomic.Int64
		var peak int64
		var samples []int64
		sample := func() int64 {
			kb := rssKB(b, cmd.Process.Pid)
			samples = append(samples, kb)
			peak = max(peak, kb)
			return kb
		}

		b.ResetTimer()
		work := make(chan []byte, rate)
		var wg sync.WaitGroup
		for range 128 {
			wg.Go(func() {
				for body := range work {
					res, err := client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
					if err != nil {
						failed.Add(1)
						continue
					}
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if err != nil || res.StatusCode != http.StatusOK {
						failed.Add(1)
					}
				}
			})
		}
		tick := time.NewTicker(time.Second / rate)
		sec := time.NewTicker(time.Second)
		start := time.Now()
		for time.Since(start) < duration {
			select {
			case <-tick.C:
				// Catch up on ticks the timer dropped, so the rate holds on a busy machine.
				for due := int64(time.Since(start).Seconds() * rate); sent.Load() < due; {
					body := chat
					if sent.Add(1)%10 == 0 {
						body = stream
					}
					select {
					case work <- body:
					default:
						failed.Add(1) // the gateway fell behind by a full second of requests
					}
				}
			case <-sec.C:
				sample()
			}
		}
		tick.Stop()
		close(work)
		wg.Wait()
		elapsed := time.Since(start)
		atLoadEnd := sample()
		time.Sleep(10 * time.Second)
		idle := sample()
		b.StopTimer()

		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.ReportMetric(float64(peak)/1024, "peak-rss-MB")
		b.ReportMetric(float64(atLoadEnd)/1024, "load-end-rss-MB")
		b.ReportMetric(float64(idle)/1024, "idle-rss-MB")
		b.ReportMetric(float64(sent.Load())/elapsed.Seconds(), "req/s")
		b.ReportMetric(float64(failed.Load()), "failed")
		if half := len(samples) / 2; half > 0 {
			// Growth under steady load: the second half's mean over the first half's.
			b.ReportMetric(mean(samples[half:len(samples)-1])/mean(samples[:half]), "rss-growth-x")
		}
	}
}

func mean(xs []int64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s int64
	for _, x := range xs {
		s += x
	}
	return float64(s) / float64(len(xs))
}

func freeAddrB(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitRoutable waits until the gateway lists the upstream's model.
func waitRoutable(b *testing.B, c *http.Client, base string) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := c.Get(base + "/v1/models"); err == nil {
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if strings.Contains(string(body), `"llama"`) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatal("the gateway never listed the upstream's model")
}

// rssKB reads the process's resident set size, in KiB, from /proc.
func rssKB(b testing.TB, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb
		}
	}
	b.Fatal("no VmRSS in /proc status")
	return 0
}
