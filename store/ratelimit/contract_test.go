package ratelimit_test

import (
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/ratelimit"
	"github.com/infergate/infergate/store/ratelimit/ratelimittest"
)

// TestContract runs ratelimittest's suite against both implementations.
func TestContract(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		ratelimittest.Run(t, ratelimittest.Features{ExactClock: true, Batch: true}, func(*testing.T) ratelimittest.Harness {
			clock := ratelimit.NewFakeClock()
			l := ratelimit.NewLocal(ratelimit.LocalOptions{Now: clock.Now})
			return ratelimittest.Harness{Replica: func() ratelimit.Limiter { return l }, Sleep: clock.Advance}
		})
	})
	t.Run("redis", func(t *testing.T) {
		ratelimittest.Run(t, ratelimittest.Features{Batch: true}, func(t *testing.T) ratelimittest.Harness {
			srv := redistest.Start(t)
			return ratelimittest.Harness{
				Replica: func() ratelimit.Limiter { return ratelimit.NewTestRedis(t, srv, ratelimit.RedisOptions{}) },
				Sleep:   time.Sleep,
			}
		})
	})
	// As with a Redis Cluster client: one script call per bucket, never coalesced.
	t.Run("redis-per-bucket", func(t *testing.T) {
		ratelimittest.Run(t, ratelimittest.Features{Batch: true}, func(t *testing.T) ratelimittest.Harness {
			srv := redistest.Start(t)
			return ratelimittest.Harness{
				Replica: func() ratelimit.Limiter {
					r := ratelimit.NewTestRedis(t, srv, ratelimit.RedisOptions{})
					r.SetCoalesce(false)
					return r
				},
				Sleep: time.Sleep,
			}
		})
	})
}
