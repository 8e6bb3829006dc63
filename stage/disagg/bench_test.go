package disagg_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/vllmsim"
	"github.com/infergate/infergate/stage/disagg"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
)

// BenchmarkDisaggregatedVsAggregated replays 200 long-prompt requests (about 4,000 tokens each,
// 32 generated, 8 at a time) on four simulated engines: aggregated, and split two prefill, two
// decode. It prints time to first token and total time per request (p50, p99) and the wall time.
// The simulator charges prefill per token and decode per token but does not model a prefill
// slowing the decodes batched with it, which is what disaggregation removes on real GPUs: read
// the numbers as the protocol's overhead and the pools' queueing, not as GPU throughput. Run with
// -benchtime 1x.
func BenchmarkDisaggregatedVsAggregated(b *testing.B) {
	type row struct {
		name                               string
		ttft50, ttft99, e2e50, e2e99, wall time.Duration
	}
	var rows []row
	for b.Loop() {
		rows = rows[:0]
		for _, mode := range []string{"aggregated", "disaggregated"} {
			fabric := vllmsim.NewFabric()
			cfg := func(role string) vllmsim.Config {
				return vllmsim.Config{Model: "m", Role: role, Fabric: fabric, PrefillPerToken: 5 * time.Microsecond,
					DecodePerToken: 300 * time.Microsecond, MaxConcurrent: 4, CapacityBlocks: 64}
			}
			var eps []upstream.Endpoint
			var opts disagg.Options
			for i := range 4 {
				role := ""
				if mode == "disaggregated" {
					role = vllmsim.RoleDecode
					if i < 2 {
						role = vllmsim.RolePrefill
					}
				}
				c := cfg(role)
				if role == "" {
					c.Fabric = nil
				}
				s := vllmsim.Start(b, c)
				name := fmt.Sprint(role, i)
				eps = append(eps, upstream.Endpoint{Name: name, URL: s.URL, Type: upstream.TypeVLLM, CheckInterval: time.Hour, CheckTimeout: time.Second})
				if role == vllmsim.RolePrefill {
					opts.Prefill = append(opts.Prefill, name)
				} else {
					opts.Decode = append(opts.Decode, name)
				}
			}
			po := openai.Options{Endpoints: eps, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			if mode == "disaggregated" {
				opts.Model = "m"
				po.Stages = pipeline.ForAll(disagg.New(opts).Interceptor())
			}
			p, err := openai.New(po)
			if err != nil {
				b.Fatal(err)
			}
			p.Start(context.Background())
			var mu sync.Mutex
			var ttfts, e2es []time.Duration
			jobs := make(chan int)
			var wg sync.WaitGroup
			start := time.Now()
			for range 8 {
				wg.Go(func() {
					for i := range jobs {
						prompt := strings.Repeat(fmt.Sprintf("Document %d, paragraph of text. ", i), 500)
						req, _ := pipeline.NewRequest("/v1/completions", fmt.Appendf(nil, `{"model":"m","stream":true,"max_tokens":32,"prompt":%q}`, prompt))
						t0 := time.Now()
						res, err := p.Handle(context.Background(), req)
						if err != nil {
							b.Error(err)
							return
						}
						one := make([]byte, 1)
						_, _ = io.ReadFull(res, one)
						ttft := time.Since(t0)
						_, _ = io.Copy(io.Discard, res)
						res.Body.Finish(nil)
						mu.Lock()
						ttfts, e2es = append(ttfts, ttft), append(e2es, time.Since(t0))
						mu.Unlock()
					}
				})
			}
			for i := range 200 {
				jobs <- i
			}
			close(jobs)
			wg.Wait()
			wall := time.Since(start)
			p.Close()
			slices.Sort(ttfts)
			slices.Sort(e2es)
			q := func(d []time.Duration, f float64) time.Duration {
				return d[int(f*float64(len(d)-1))].Round(10 * time.Microsecond)
			}
			rows = append(rows, row{mode, q(ttfts, .5), q(ttfts, .99), q(e2es, .5), q(e2es, .99), wall.Round(time.Millisecond)})
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%-14s %10s %10s %10s %10s %8s\n", "mode", "TTFT p50", "TTFT p99", "e2e p50", "e2e p99", "wall")
	for _, r := range rows {
		fmt.Fprintf(&sb, "%-14s %10s %10s %10s %10s %8s\n", r.name, r.ttft50, r.ttft99, r.e2e50, r.e2e99, r.wall)
	}
	b.Log(sb.String())
}
