// Package batchertest measures dynamic batching the way the batcher's benchmarks do: many
// concurrent callers in a closed loop, throughput and p99 latency, batched against unbatched.
package batchertest

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Closed makes n calls from c concurrent callers, each taking the next call index until n are
// taken, and returns the calls per second and the p99 latency. A failed call fails tb.
func Closed(tb testing.TB, c, n int, call func(i int) error) (perSec float64, p99 time.Duration) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				k := int(next.Add(1) - 1)
				if k >= n {
					return
				}
				t0 := time.Now()
				if err := call(k); err != nil {
					tb.Error(err)
					return
				}
				lat[k] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	return float64(n) / elapsed.Seconds(), lat[min(len(lat)-1, len(lat)*99/100)]
}

// Report reports batched against unbatched: the throughput ratio, each throughput and each p99.
func Report(b *testing.B, batched, unbatched float64, p99b, p99u time.Duration) {
	b.ReportMetric(batched/unbatched, "x_throughput")
	b.ReportMetric(batched, "batched_req/s")
	b.ReportMetric(unbatched, "unbatched_req/s")
	b.ReportMetric(float64(p99b.Microseconds())/1000, "batched_p99_ms")
	b.ReportMetric(float64(p99u.Microseconds())/1000, "unbatched_p99_ms")
}
