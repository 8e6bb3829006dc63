package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loggedRedis is a limiter whose log lines go to the returned sink, throttled over a fake clock.
func loggedRedis(t *testing.T, srv *redistest.Server, opts RedisOptions) (*Redis, *logtest.Sink, *logtest.Clock) {
	// The fake clock is the log throttle's only: the limiter runs in real time.
	sink, clk := &logtest.Sink{}, logtest.NewClock(time.Unix(1_700_000_000, 0))
	opts.Logger = sink.JSON()
	opts.Throttle = logthrottle.New(opts.Logger, 10*time.Second, logthrottle.WithClock(clk.Now))
	return newRedis(t, srv, opts), sink, clk
}

// TestRedisDownFailClosedLogsOncePerInterval: with Redis down and the policy fail-closed, a
// flood of refused requests writes one warning, not one per request; once the interval has
// passed the next refusal writes another, counting the refusals in between; Redis coming back
// is logged once.
func TestRedisDownFailClosedLogsOncePerInterval(t *testing.T) {
	srv := redistest.Start(t)
	lim, sink, clk := loggedRedis(t, srv, RedisOptions{Timeout: failTimeout, RetryInterval: 20 * time.Millisecond, Failure: FailClosed})
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 1000}
	_, err := lim.Allow(ctx, "k", l, 1)
	require.NoError(t, err)

	srv.Kill()
	const n = 300
	for i := range n {
		_, err := lim.Allow(ctx, "k", l, 1)
		require.ErrorIs(t, err, ErrUnavailable, "request %d", i)
		if i%50 == 0 {
			time.Sleep(25 * time.Millisecond) // let some of them probe Redis again
		}
	}
	lines := sink.Records(t)
	require.Len(t, lines, 1, "%d refused requests: one line", n)
	assert.Equal(t, "WARN", lines[0]["level"])
	assert.Equal(t, warnFailed, lines[0]["msg"])
	assert.Equal(t, "fail-closed", lines[0]["policy"])
	assert.NotContains(t, lines[0]["err"], errDown.Error(), "the first line carries the failure itself")

	clk.Add(10 * time.Second)
	_, err = lim.Allow(ctx, "k", l, 1)
	require.ErrorIs(t, err, ErrUnavailable)
	lines = sink.Records(t)
	require.Len(t, lines, 2, "after the interval, the next refusal is reported again")
	assert.Equal(t, warnFailed, lines[1]["msg"])
	assert.EqualValues(t, n-1, lines[1]["repeated"], "with the count of refusals since the last line")

	srv.Restart()
	require.Eventually(t, func() bool {
		_, err := lim.Allow(ctx, "k", l, 1)
		return err == nil
	}, wait, 20*time.Millisecond)
	lines = sink.Records(t)
	require.Len(t, lines, 3)
	assert.Equal(t, "INFO", lines[2]["level"])
	assert.Equal(t, "ratelimit: redis is back; decisions go to redis again", lines[2]["msg"])
}

// TestRedisScriptRefusedIsWarnedThrottled: Redis answering the script with an error for a
// bucket (a key of another type under its name; an out-of-memory Redis alike) is an operator's
// problem worth a warning, but it repeats on every request for the bucket: one line per interval.
func TestRedisScriptRefusedIsWarnedThrottled(t *testing.T) {
	srv := redistest.Start(t)
	lim, sink, _ := loggedRedis(t, srv, RedisOptions{})
	ctx := context.Background()
	client := srv.NewClient(t)
	require.NoError(t, client.Do(ctx, client.B().Hset().Key(lim.Key("broken")).FieldValue().FieldValue("a", "b").Build()).Error())
	l := Limit{Rate: slow, Burst: 10}
	for range 50 {
		d, err := lim.Allow(ctx, "broken", l, 1)
		require.NoError(t, err, "fail-open: the fallback bucket decides")
		require.Equal(t, l, d.Limit)
		_, err = lim.Allow(ctx, "fine", l, 0)
		require.NoError(t, err)
	}
	var warns []map[string]any
	for _, m := range sink.Records(t) {
		if m["level"] == "WARN" {
			warns = append(warns, m)
		}
	}
	require.Len(t, warns, 1)
	assert.Equal(t, warnRefused, warns[0]["msg"])
	assert.Equal(t, lim.Key("broken"), warns[0]["key"])
	assert.Contains(t, warns[0]["err"], "WRONGTYPE")
	assert.Zero(t, lim.downUntil.Load(), "Redis answered: not down")
}
