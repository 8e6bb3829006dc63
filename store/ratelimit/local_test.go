package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Idle buckets go once they would be full again; busy ones stay.
func TestLocalEviction(t *testing.T) {
	clock := newFakeClock()
	l := NewLocal(LocalOptions{Now: clock.Now})
	ctx := context.Background()
	fast := Limit{Rate: 1, Burst: 10} // 1 token back in 1 s; kept 1 s more
	for i := range 1000 {
		d, err := l.Allow(ctx, "idle"+strconv.Itoa(i), fast, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	_, err := l.Allow(ctx, "busy", Limit{Rate: slow, Burst: 10}, 1)
	require.NoError(t, err)
	assert.Equal(t, 1001, l.Len())

	// Reads (cost 0) store nothing, but count toward the sweeps.
	peek := func(n int) {
		for i := range n {
			_, err := l.Allow(ctx, "peek"+strconv.Itoa(i), fast, 0)
			require.NoError(t, err)
		}
	}
	clock.Advance(1500 * time.Millisecond) // full again, but within the margin
	peek(numShards * minSweep * 4)
	assert.Equal(t, 1001, l.Len(), "kept until their expiry")
	clock.Advance(time.Second)
	peek(numShards * minSweep * 4)
	assert.Equal(t, 1, l.Len(), "only the bucket that is not yet full again is left")

	// A refund that fills a bucket drops it at once.
	require.NoError(t, l.Adjust(ctx, "busy", Limit{Rate: slow, Burst: 10}, -1))
	assert.Zero(t, l.Len())
}

func TestLocalClockJumps(t *testing.T) {
	clock := newFakeClock()
	l := NewLocal(LocalOptions{Now: clock.Now})
	ctx := context.Background()
	lim := Limit{Rate: 1, Burst: 5}
	d, err := l.Allow(ctx, "k", lim, 5)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	// Backwards: nothing refills, and the bucket is not left waiting for the old time.
	clock.Advance(-time.Hour)
	d, err = l.Allow(ctx, "k", lim, 0)
	require.NoError(t, err)
	assert.Zero(t, d.Remaining)
	d, err = l.Allow(ctx, "k", lim, 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	clock.Advance(2 * time.Second)
	d, err = l.Allow(ctx, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, 2.0, d.Remaining, "refill counts from the clock's new reading")

	// Forwards, as far as a Duration goes: full, not more.
	clock.Advance(time.Duration(1<<63 - 1))
	d, err = l.Allow(ctx, "k", lim, 0)
	require.NoError(t, err)
	assert.Equal(t, 5.0, d.Remaining)
	assert.Zero(t, d.ResetAfter)
}

// Huge rates, bursts and costs saturate instead of overflowing.
func TestLocalExtremes(t *testing.T) {
	clock := newFakeClock()
	l := NewLocal(LocalOptions{Now: clock.Now})
	ctx := context.Background()
	huge := Limit{Rate: 1.7e308, Burst: 1.7e308}
	d, err := l.Allow(ctx, "huge", huge, 1.7e308)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Zero(t, d.Remaining)
	clock.Advance(time.Hour) // elapsed * rate overflows to +Inf
	d, err = l.Allow(ctx, "huge", huge, 0)
	require.NoError(t, err)
	assert.Equal(t, huge.Burst, d.Remaining)

	tiny := Limit{Rate: 5e-324, Burst: 1e300}
	d, err = l.Allow(ctx, "tiny", tiny, 1e300)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	d, err = l.Allow(ctx, "tiny", tiny, 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, time.Duration(1<<63-1), d.RetryAfter, "saturates")
	assert.Equal(t, time.Duration(1<<63-1), d.ResetAfter, "saturates")
}

func TestLocalMetrics(t *testing.T) {
	m := NewMetrics()
	l := NewLocal(LocalOptions{Metrics: m})
	ctx := context.Background()
	lim := Limit{Rate: slow, Burst: 1}
	for _, cost := range []float64{1, 1, 2} {
		_, err := l.Allow(ctx, "k", lim, cost)
		require.NoError(t, err)
	}
	assert.Equal(t, 1.0, m.count(t, storeLocal, resultAllowed))
	assert.Equal(t, 1.0, m.count(t, storeLocal, resultDenied))
	assert.Equal(t, 1.0, m.count(t, storeLocal, resultTooLarge))
	reg := prometheus.NewRegistry()
	for _, c := range m.Collectors() {
		require.NoError(t, reg.Register(c))
	}
	// Without Redis there is no Redis to report up (or down).
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		assert.NotContains(t, f.GetName(), "redis", "a local limiter's metrics")
	}
}
