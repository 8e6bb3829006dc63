package respcache_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/lib/embed"
	"github.com/infergate/infergate/stage/respcache"
)

// benchClient keeps a connection per concurrent request.
var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128, MaxConnsPerHost: 0}}

// postOnce sends body and reads the answer, reporting its cache header.
func postOnce(b *testing.B, url, body string, cacheControl ...string) string {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, v := range cacheControl {
		req.Header.Add("Cache-Control", v)
	}
	res, err := benchClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("status %d, %v", res.StatusCode, err)
	}
	return res.Header.Get(respcache.Header)
}

// benchBody is a chat request of a realistic size: a system prompt, a few turns, a question.
func benchBody(i int) string {
	return chatReq(fmt.Sprintf("Question %d: how do I reverse a list in Python, and why?", i),
		`"max_tokens":256`,
		`"tools":[{"type":"function","function":{"name":"search","description":"Search the documentation","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]`)
}

// BenchmarkHit compares a cached answer with the upstream's, through a real gateway on a
// loopback socket at one request at a time: the upstream answers in 50 ms (a model's compute),
// the cache from memory or from Redis. It reports the hit's p50 and p99 and how many times
// faster than the upstream a hit is.
func BenchmarkHit(b *testing.B) {
	for _, name := range []string{"memory", "redis"} {
		b.Run(name, func(b *testing.B) {
			up := newUpstream(b)
			up.set(func(u *upstreamFake) { u.latency = 50 * time.Millisecond })
			opts := respcache.Options{}
			if name == "redis" {
				srv := redistest.Start(b)
				s := respcache.NewRedis(srv.NewClient(b), respcache.RedisOptions{Logger: quiet()})
				b.Cleanup(s.Close)
				opts.Store = s
			}
			g := startGateway(b, up, opts)
			body := benchBody(0)
			// The baseline: a few upstream answers (no-cache: asked upstream; the first stored).
			const upstreamRuns = 5
			start := time.Now()
			for range upstreamRuns {
				postOnce(b, g.URL, body, "no-cache")
			}
			upstreamNs := float64(time.Since(start).Nanoseconds()) / upstreamRuns
			if h := postOnce(b, g.URL, body); h != "hit" {
				b.Fatalf("not stored: %s", h)
			}
			lat := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				if h := postOnce(b, g.URL, body); h != "hit" {
					b.Fatalf("a %s", h)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			hitNs := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(upstreamNs/1e6, "upstream-ms")
			b.ReportMetric(upstreamNs/hitNs, "x-faster")
		})
	}
}

// BenchmarkHitsParallel compares hits at 64 concurrent clients with plain proxying (no cache
// stage) to an upstream answering at once: the cache's throughput against the gateway's own
// forwarding. It reports both rates and their ratio.
func BenchmarkHitsParallel(b *testing.B) {
	const clients = 64
	run := func(url string, n int, body func(i int) string) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range clients {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					postOnce(b, url, body(int(i)))
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	up := newUpstream(b)
	plainURL := startPlainGateway(b, up)
	cached := startGateway(b, up, respcache.Options{})
	body := benchBody(1)
	postOnce(b, cached.URL, body)
	n := max(b.N, clients)
	run(plainURL, clients, func(int) string { return body }) // warm the connections
	run(cached.URL, clients, func(int) string { return body })
	b.ResetTimer()
	fwd := run(plainURL, n, func(int) string { return body })
	hits := run(cached.URL, n, func(int) string { return body })
	b.StopTimer()
	b.ReportMetric(float64(n)/fwd.Seconds(), "forward-req/s")
	b.ReportMetric(float64(n)/hits.Seconds(), "hit-req/s")
	b.ReportMetric(fwd.Seconds()/hits.Seconds(), "hit/forward")
}

// BenchmarkStage is the stage alone, in process, without HTTP: a hit's cost (key, lookup,
// answer with a fresh id) against a request that bypasses the cache to a terminal handler
// answering at once.
func BenchmarkStage(b *testing.B) {
	c, err := respcache.New(respcache.Options{Model: "m", Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	answer := []byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("word ", 200) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":50,"completion_tokens":200,"total_tokens":250}}`)
	terminal := func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{StatusCode: 200, Body: pipeline.NewBody(answer, pipeline.Usage{Status: 200})}, nil
	}
	h := pipeline.Chain(terminal, c.Interceptor())
	call := func(body string) string {
		req, err := pipeline.NewRequest("/v1/chat/completions", []byte(body))
		if err != nil {
			b.Fatal(err)
		}
		res, err := h(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res)
		res.Body.Finish(nil)
		return res.GatewayHeader.Get(respcache.Header)
	}
	body := benchBody(2)
	call(body)
	c.Wait()
	bypass := strings.Replace(body, `"temperature":0`, `"temperature":1`, 1)
	const baseRuns = 2000
	start := time.Now()
	for range baseRuns {
		call(bypass)
	}
	baseNs := float64(time.Since(start).Nanoseconds()) / baseRuns
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if h := call(body); h != "hit" {
			b.Fatal(h)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)-baseNs, "stage-ns/hit")
	b.ReportMetric(baseNs, "bypass-ns")
}

// BenchmarkMemoryFootprint fills a Memory store with 100,000 entries of 1 KB answers (keys as
// the stage makes them; no vectors, as in exact mode) and reports the heap they hold.
func BenchmarkMemoryFootprint(b *testing.B) {
	const entries = 100_000
	resp := []byte(strings.Repeat("x", 1024))
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m := respcache.NewMemory(respcache.MemoryOptions{MaxEntries: entries, MaxBytes: 1 << 30})
		for i := range entries {
			r := make([]byte, len(resp)) // each answer its own, as decoded from an upstream
			copy(r, resp)
			key := fmt.Sprintf("m|alice|%064x", i)
			if err := m.Put(context.Background(), respcache.Entry{Key: key, Response: r}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := float64(after.HeapAlloc - before.HeapAlloc)
		b.ReportMetric(held/(1<<20), "MiB/100k")
		b.ReportMetric(held/entries-1024, "overhead-B/entry")
		b.ReportMetric(float64(m.Stats().Bytes)/(1<<20), "counted-MiB")
		runtime.KeepAlive(m)
	}
}

// BenchmarkStageSemantic is a semantic hit through the stage alone, with the lexical embedder:
// the exact lookup that misses, the embedding, the search of a partition of 100 entries, the
// check of the words (wordsOf and sameWords) and the answer. Prompts of 10, 60 and 200 words
// are asked in capitals, so as a semantic hit each time.
func BenchmarkStageSemantic(b *testing.B) {
	for _, words := range []int{10, 60, 200} {
		b.Run(fmt.Sprintf("words=%d", words), func(b *testing.B) {
			s := newStage(b, respcache.Options{Mode: respcache.ModeSemantic, Embedder: embed.NewLexical(0)})
			for i := range 100 { // no-cache: stored, whatever the cache would answer
				s.ask(b, prompt(words, fmt.Sprintf("Question %d: which region had the highest revenue?", i), ""), "no-cache")
			}
			q := strings.ToUpper(prompt(words, "Question 42: which region had the highest revenue?", ""))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if h := s.ask(b, q); !strings.HasPrefix(h, "semantic; ") {
					b.Fatal(h)
				}
			}
		})
	}
}
