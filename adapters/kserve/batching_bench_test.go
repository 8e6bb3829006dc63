package kserve_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/gateway"
	"github.com/infergate/infergate/adapters/gateway/gatewaytest"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/batcher"
	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkDynamicBatchingGRPC runs 64 concurrent grpc-go callers of one-row requests against a
// registered backend that, like an accelerator, runs one call at a time and costs 2 ms per call
// plus 20 µs per row; first without the batcher (baseline), then with it (max_batch_size 64, no
// queue delay), on separate gateways in one process. It reports the throughput ratio and the p99
// latency of each.
func BenchmarkDynamicBatchingGRPC(b *testing.B) {
	const c = 64
	measure := func(batching bool) (perSec float64, p99 time.Duration) {
		d := newDoubler("gpu", 64, &inference.ModelDynamicBatching{})
		var mu sync.Mutex
		d.cost = func(rows int64) {
			mu.Lock()
			time.Sleep(2*time.Millisecond + time.Duration(rows)*20*time.Microsecond)
			mu.Unlock()
		}
		srv := gatewaytest.Start(b, gateway.Config{}, d)
		if batching {
			srv.Registry.SetScheduler(batcher.Factory(batcher.Options{}))
		}
		conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		client := inference.NewGRPCInferenceServiceClient(conn)
		req := doublerRequest("gpu", 1, 7)
		if _, err := client.ModelInfer(context.Background(), req); err != nil { // connect before timing
			b.Fatal(err)
		}
		lat := make([]time.Duration, b.N)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range c {
			wg.Go(func() {
				for {
					k := next.Add(1) - 1
					if k >= int64(b.N) {
						return
					}
					t0 := time.Now()
					if _, err := client.ModelInfer(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
					lat[k] = time.Since(t0)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		slices.Sort(lat)
		return float64(b.N) / elapsed.Seconds(), lat[min(len(lat)-1, len(lat)*99/100)]
	}
	unbatched, p99u := measure(false)
	b.ResetTimer()
	batched, p99b := measure(true)
	b.ReportMetric(batched/unbatched, "x_throughput")
	b.ReportMetric(batched, "batched_req/s")
	b.ReportMetric(unbatched, "unbatched_req/s")
	b.ReportMetric(float64(p99b.Microseconds())/1000, "batched_p99_ms")
	b.ReportMetric(float64(p99u.Microseconds())/1000, "unbatched_p99_ms")
}

var _ engines.Model = (*doubler)(nil)
