package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/h1client"
	"github.com/infergate/infergate/surface/openai/openaitest"
)

// Benchmarks run infergate and the fake upstream alone (baseline) as sibling sub-benchmarks
// through the same client, so ratios read straight from the output (BenchmarkProxyFloor's
// baseline is a minimal gateway instead). Targets (issue 5): added p50
// <= 100 µs at c=1, infergate >= 0.5x baseline req/s at c=64; streams: added time to first chunk
// <= 200 µs, added per-chunk time <= 20 µs.

type benchTarget struct{ name, url string }

func benchTargets(b *testing.B, up *openaitest.Upstream) []benchTarget {
	e := start(b, openaitest.SlowChecks(up.Endpoint(0)))
	return []benchTarget{{"infergate", e.URL}, {"baseline", up.URL}}
}

var benchChat = []byte(`{"model":"llama","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Tell me about the weather in Paris."}],"temperature":0.7,"top_k":40,"max_tokens":64}`)

// BenchmarkProxyChat: one non-streaming chat completion per op, from c concurrent clients.
func BenchmarkProxyChat(b *testing.B) {
	up := openaitest.Start(b, "bench", "llama")
	targets := benchTargets(b, up)
	for _, c := range []int{1, 64} {
		for _, tg := range targets {
			b.Run("c="+itoa(c)+"/"+tg.name, func(b *testing.B) { benchChats(b, tg.url, c) })
		}
	}
}

// BenchmarkProxyFloor: infergate against the least a gateway on net/http can do (baseline): a
// handler that reads the body, sends it to the upstream on the proxy's own upstream client and
// copies the answer back, with no routing, headers, metrics or protocol router. Its ratio is how
// much of the way to that floor infergate has gone; the floor's own ratio to the upstream called
// directly (BenchmarkProxyChat's baseline) bounds what BenchmarkProxyChat/c=64 can reach.
func BenchmarkProxyFloor(b *testing.B) {
	up := openaitest.Start(b, "bench", "llama")
	send := upstreamClient(strings.TrimPrefix(up.URL, "http://"))
	target, err := url.Parse(up.URL + "/v1/chat/completions")
	if err != nil {
		b.Fatal(err)
	}
	floor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		req := &http.Request{Method: http.MethodPost, URL: target, Host: target.Host,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body))}
		res, err := send(r.Context(), req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		maps.Copy(w.Header(), res.Header)
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	}))
	b.Cleanup(floor.Close)
	infergate := start(b, openaitest.SlowChecks(up.Endpoint(0)))
	for _, tg := range []benchTarget{{"infergate", infergate.URL}, {"baseline", floor.URL}} {
		b.Run(tg.name, func(b *testing.B) { benchChats(b, tg.url, 64) })
	}
}

// benchChats runs b.N chat completions against url from c concurrent clients. cpu-us is the CPU
// time the whole process (client, gateway and fake upstream) spent per op: on a machine shared
// with other work req/s swings from run to run, while the CPU an op costs, whose ratio between
// the arms bounds their req/s ratio once the cores are saturated, stays put.
func benchChats(b *testing.B, url string, c int) {
	client := openaitest.BenchClient()
	defer client.CloseIdleConnections()
	var warm bytes.Buffer
	for range 100 {
		openaitest.ChatOnce(b, client, url, benchChat, &warm)
	}
	b.ReportAllocs()
	var next atomic.Int64
	lat := make([][]time.Duration, c)
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	t0 := time.Now()
	for w := range c {
		wg.Go(func() {
			var buf bytes.Buffer
			for next.Add(1) <= int64(b.N) {
				s := time.Now()
				openaitest.ChatOnce(b, client, url, benchChat, &buf)
				lat[w] = append(lat[w], time.Since(s))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us")
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
}

// BenchmarkProxyStream: one 64-chunk SSE chat stream per op, the upstream pausing 1 ms between
// chunks as a model would (with no pause, the rest of the stream competes with the first chunk for
// the 2 cores and time to first chunk measures contention, not the gateway; timers here are
// ~1 ms coarse anyway). ttfc-us is the time from sending the request to reading the first event;
// chunk-us the mean time per later chunk, the 1 ms pause included in both arms; chunk-oneway-us
// the mean time from the upstream's write of a content chunk to the client's read of it (the
// chunks carry their write time): what a hop adds to every token, which chunk-us shows only
// through the upstream's timer (in one process, the timer's lateness moves with what the rest
// of the process does, by more than the hop costs).
func BenchmarkProxyStream(b *testing.B) {
	const chunks = 64
	up := openaitest.Start(b, "bench", "llama")
	up.SetStream(chunks, time.Millisecond)
	up.StampChunks(true)
	body := []byte(`{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	for _, tg := range benchTargets(b, up) {
		b.Run(tg.name, func(b *testing.B) {
			client := openaitest.BenchClient()
			defer client.CloseIdleConnections()
			var ttfc, rest, oneway time.Duration
			stamped := 0
			r := bufio.NewReaderSize(nil, 32<<10)
			one := func() (time.Duration, time.Duration) {
				s := time.Now()
				res, err := client.Post(tg.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				r.Reset(res.Body)
				var first time.Duration
				events := 0
				for {
					line, err := r.ReadSlice('\n')
					if bytes.HasPrefix(line, []byte("data: ")) {
						now := time.Now() // before the stamp is decoded
						if events == 0 {
							first = now.Sub(s)
						}
						events++
						if at, ok := openaitest.ChunkStamp(line); ok {
							oneway += now.Sub(at)
							stamped++
						}
					}
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				res.Body.Close()
				if events != chunks+2 { // content chunks, the finish chunk and [DONE]
					b.Fatalf("got %d events", events)
				}
				return first, time.Since(s) - first
			}
			for range 20 {
				one()
			}
			oneway, stamped = 0, 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				f, rr := one()
				ttfc += f
				rest += rr
			}
			b.ReportMetric(float64(ttfc.Microseconds())/float64(b.N), "ttfc-us")
			b.ReportMetric(float64(rest.Nanoseconds())/1e3/float64(b.N)/float64(chunks+1), "chunk-us")
			if stamped != b.N*chunks {
				b.Fatalf("%d chunks carried their write time, not %d", stamped, b.N*chunks)
			}
			b.ReportMetric(float64(oneway.Nanoseconds())/1e3/float64(stamped), "chunk-oneway-us")
		})
	}
}

func itoa(n int) string {
	if n == 1 {
		return "1"
	}
	return "64"
}

// upstreamClient is how the pool sends a request to a cleartext upstream at addr (host:port), for
// the floor: h1client where it is supported, else net/http's Transport.
func upstreamClient(addr string) func(context.Context, *http.Request) (*http.Response, error) {
	if !h1client.Supported {
		return func(ctx context.Context, req *http.Request) (*http.Response, error) {
			return http.DefaultTransport.RoundTrip(req.WithContext(ctx))
		}
	}
	return h1client.New(addr, http.DefaultTransport).RoundTrip
}
