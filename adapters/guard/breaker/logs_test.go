package breaker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/logthrottle"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/stretchr/testify/require"
)

// logSink is a JSON slog handler's output, read back line by line.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// lines returns the records whose message starts with prefix.
func (s *logSink) lines(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(s.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// TestRedisFlappingLogsOncePerInterval: a Redis that goes away and comes back again and again
// within the log interval costs one "unreachable" line and one "reachable again" line, not a
// pair per outage; after the interval a still-failing Redis is reported again, with the count
// of failed calls since the last line.
func TestRedisFlappingLogsOncePerInterval(t *testing.T) {
	srv := redistest.Start(t)
	sink := &logSink{}
	log := slog.New(slog.NewJSONHandler(sink, nil))
	clk := newFakeClock() // the throttle's clock only: the breaker runs in real time
	b := newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: contractSettings},
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
	require.Len(t, sink.lines(t, "breaker: Redis unreachable"), 1, "three outages within the interval: one warning")
	require.Len(t, sink.lines(t, "breaker: Redis reachable again"), 1, "and one line for their end")
	require.LessOrEqual(t, len(sink.lines(t, "breaker: change subscription lost")), 1)

	// A long outage: the failed retries are counted, and reported once the interval has passed.
	srv.Kill()
	require.Eventually(t, b.Degraded, 10*time.Second, 5*time.Millisecond)
	clk.Add(time.Minute)
	require.Eventually(t, func() bool { return len(sink.lines(t, "breaker: Redis unreachable")) == 2 }, 10*time.Second, 5*time.Millisecond,
		"a retry after the interval reports the outage again")
	last := sink.lines(t, "breaker: Redis unreachable")[1]
	require.Equal(t, "WARN", last["level"])
	require.Positive(t, last["repeated"], "with the failures suppressed since the last line")
	srv.Restart()
	require.Eventually(t, func() bool { return len(sink.lines(t, "breaker: Redis reachable again")) == 2 }, 10*time.Second, 5*time.Millisecond,
		"a reported outage's end is reported")
}
