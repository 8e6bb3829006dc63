package kserveproxy_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
)

// BenchmarkKServeProxy: ModelInfer on `simple` from c concurrent callers on one connection,
// through the front gateway and its proxy to an upstream gateway (infergate), and straight to the
// upstream (baseline), with the same client; the difference is the proxy hop. Goal: added p50
// <= 100 µs at c=1 (one more gRPC round trip on loopback is most of it).
func BenchmarkKServeProxy(b *testing.B) {
	up := startUpstream(b)
	f := startFront(b, fast(slowChecks(ep("triton", up.Addr, 0))))
	targets := []struct {
		name string
		c    inference.GRPCInferenceServiceClient
	}{{"infergate", f.client}, {"baseline", client(b, up.Addr)}}
	for _, conc := range []int{1, 16} {
		for _, tg := range targets {
			b.Run(fmt.Sprintf("c=%d/%s", conc, tg.name), func(b *testing.B) {
				ctx := context.Background()
				req := simpleRequest("simple", "")
				for range 100 {
					if _, err := tg.c.ModelInfer(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				var next atomic.Int64
				lat := make([][]time.Duration, conc)
				var wg sync.WaitGroup
				b.ResetTimer()
				t0 := time.Now()
				for w := range conc {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							s := time.Now()
							res, err := tg.c.ModelInfer(ctx, req)
							if err != nil || len(res.RawOutputContents) != 2 {
								b.Error(err)
								return
							}
							lat[w] = append(lat[w], time.Since(s))
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(t0)
				b.StopTimer()
				all := slices.Concat(lat...)
				slices.Sort(all)
				b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
			})
		}
	}
}
