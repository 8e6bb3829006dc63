package breaker

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/infergate/infergate/internal/redistest"
)

// BenchmarkBreakerAllow measures the hot path: Allow and Done(Success) on a closed, healthy
// endpoint. infergate is the Redis breaker (answering from its cache; its background flush
// sends the counts every FlushInterval), local the in-process one, baseline what any check
// costs at least: an atomic load and a call that does nothing.
func BenchmarkBreakerAllow(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, br Breaker) {
		tk, err := br.Allow(ctx, "vllm-a")
		if err != nil {
			b.Fatal(err)
		}
		tk.Done(Success)
		b.Run("serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tk, err := br.Allow(ctx, "vllm-a")
				if err != nil {
					b.Fatal(err)
				}
				tk.Done(Success)
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tk, err := br.Allow(ctx, "vllm-a")
					if err != nil {
						b.Fatal(err)
					}
					tk.Done(Success)
				}
			})
		})
	}
	b.Run("infergate", func(b *testing.B) {
		srv := redistest.Start(b)
		run(b, newRedisBreaker(b, srv, RedisOptions{}))
	})
	b.Run("local", func(b *testing.B) { run(b, NewLocal(Options{})) })
	b.Run("baseline", func(b *testing.B) {
		var open atomic.Bool
		b.Run("serial", func(b *testing.B) {
			for b.Loop() {
				if open.Load() {
					b.Fatal("open")
				}
				nothing(Success)
			}
		})
		b.Run("parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if open.Load() {
						b.Fatal("open")
					}
					nothing(Success)
				}
			})
		})
	})
}

//go:noinline
func nothing(Outcome) {}
