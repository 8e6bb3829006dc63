package breaker_test

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/store/breaker/breakertest"
	"github.com/stretchr/testify/require"
)

// TestContract runs breakertest's suite against both implementations.
func TestContract(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		breakertest.Run(t, func(_ *testing.T, s breaker.Settings) breakertest.Harness {
			clk := breaker.NewFakeClock()
			return breakertest.Harness{
				Breaker: breaker.NewLocal(breaker.Options{Settings: s, Now: clk.Now}),
				Advance: clk.Add,
			}
		})
	})
	t.Run("redis", func(t *testing.T) {
		breakertest.Run(t, func(t *testing.T, s breaker.Settings) breakertest.Harness {
			srv := redistest.Start(t)
			b := breaker.NewRedisBreaker(t, srv, breaker.RedisOptions{Options: breaker.Options{Settings: s}})
			return breakertest.Harness{
				Breaker: b,
				Settle: func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					require.NoError(t, b.Flush(ctx))
				},
				// Redis stamps an outcome when its batch arrives, a little after the call: wait a
				// little longer than asked.
				Advance: func(d time.Duration) { time.Sleep(d + 50*time.Millisecond) },
			}
		})
	})
}
