package breaker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/stretchr/testify/require"
)

// TestRedisFlappingLogsOncePerInterval: a Redis that goes away and comes back again and again
// within the log interval costs one "unreachable" line and one "reachable again" line, not a
// pair per outage; after the interval a still-failing Redis is reported again, with the count
// of failed calls since the last line.
func TestRedisFlappingLogsOncePerInterval(t *testing.T) {
	srv := redistest.Start(t)
	sink := &logtest.Sink{}
	log := sink.JSON()
	clk := newFakeClock() // the throttle's clock only: the breaker runs in real time
	b := newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: testSettings},
		Timeout: 50 * time.Millisecond, SyncInterval: 20 * time.Millisecond, RetryInterval: 20 * time.Millisecond,
		Logger: log, Throttle: logthrottle.New(log, time.Minute, logthrottle.WithClock(clk.Now))})
	tk, err := b.Allow(context.Background(), "up")
	require.NoError(t, err)
	tk.Done(Success)

	for range 3 {
		srv.Kill()
		require.Eventually(t, b.Degraded, 10*time.Second, 5*time.Millisecond)
		srv.Restart()
		require.Eventually(t, func() bool { return !b.Degraded() }, 10*time.Second, 5*time.Millisecond)
	}
	require.Len(t, records(t, sink, "breaker: Redis unreachable"), 1, "three outages within the interval: one warning")
	require.Len(t, records(t, sink, "breaker: Redis reachable again"), 1, "and one line for their end")
	require.LessOrEqual(t, len(records(t, sink, "breaker: change subscription lost")), 1)

	// A long outage: the failed retries are counted, and reported once the interval has passed.
	srv.Kill()
	require.Eventually(t, b.Degraded, 10*time.Second, 5*time.Millisecond)
	clk.Add(time.Minute)
	require.Eventually(t, func() bool { return len(records(t, sink, "breaker: Redis unreachable")) == 2 }, 10*time.Second, 5*time.Millisecond,
		"a retry after the interval reports the outage again")
	last := records(t, sink, "breaker: Redis unreachable")[1]
	require.Equal(t, "WARN", last["level"])
	require.Positive(t, last["repeated"], "with the failures suppressed since the last line")
	srv.Restart()
	require.Eventually(t, func() bool { return len(records(t, sink, "breaker: Redis reachable again")) == 2 }, 10*time.Second, 5*time.Millisecond,
		"a reported outage's end is reported")
}

// records are the records logged whose message starts with prefix.
func records(t *testing.T, sink *logtest.Sink, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range sink.Records(t) {
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}
