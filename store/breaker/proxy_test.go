package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func TestRedisHangingIsBoundedByTimeout(t *testing.T) {
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr) // can make Redis hang
	s := testSettings
	const timeout = 50 * time.Millisecond
	newReplica := func() *Redis {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proxy.Addr}, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		b := NewRedis(c, RedisOptions{Options: Options{Settings: s}, Timeout: timeout, RetryInterval: 50 * time.Millisecond})
		t.Cleanup(b.Close)
		return b
	}
	a, b := newReplica(), newReplica()
	ctx := context.Background()
	_, err := b.Allow(ctx, "up") // b knows the endpoint
	require.NoError(t, err)
	for range s.ConsecutiveFailures {
		tk, err := a.Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Failure)
	}
	require.Eventually(t, func() bool { return b.State("up") == Open }, 5*time.Second, time.Millisecond)
	time.Sleep(s.OpenTimeout) // the next Allow must ask Redis for a probe

	proxy.Freeze()
	bound := timeout + 500*time.Millisecond
	var slowest time.Duration
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		d := time.Since(start)
		slowest = max(slowest, d)
		require.Less(t, d, bound, "%s took %v with Redis hanging", what, d)
	}
	var tk Ticket
	timed("Allow (asks Redis for a probe)", func() { tk, err = b.Allow(ctx, "up") })
	require.NoError(t, err, "the local fallback, starting from the shared state, admits a probe")
	require.True(t, tk.Probe())
	require.True(t, b.Degraded())
	timed("Done (probe)", func() { tk.Done(Success) })
	timed("Allow of a new endpoint", func() { _, err = a.Allow(ctx, "new") })
	require.NoError(t, err)
	tk, err = a.Allow(ctx, "new")
	require.NoError(t, err)
	timed("Done + Flush", func() {
		tk.Done(Failure)
		_ = a.Flush(ctx)
	})
	t.Logf("slowest call with Redis hanging: %v (timeout %v)", slowest, timeout)

	proxy.Thaw()
	require.Eventually(t, func() bool { return !a.Degraded() && !b.Degraded() }, 10*time.Second, 5*time.Millisecond)
	// Shared again: the state in Redis (still open, half-open by now) decides on both.
	require.Eventually(t, func() bool {
		tk, err := a.Allow(ctx, "up")
		if err == nil && tk.Probe() {
			tk.Done(Failure)
		}
		return a.State("up") == Open && b.State("up") == Open
	}, 5*time.Second, time.Millisecond)
}
