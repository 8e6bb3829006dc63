package kserve_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/batcher"
	"github.com/infergate/infergate/engines/batcher/batchertest"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
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
		return batchertest.Closed(b, c, b.N, func(int) error {
			_, err := client.ModelInfer(context.Background(), req)
			return err
		})
	}
	unbatched, p99u := measure(false)
	b.ResetTimer()
	batched, p99b := measure(true)
	batchertest.Report(b, batched, unbatched, p99b, p99u)
}

var _ engines.Model = (*doubler)(nil)
