package logthrottle_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/logthrottle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a fake clock moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// sink is a JSON slog handler writing to a buffer, read back as one map per line.
type sink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *sink) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

func setup(interval time.Duration) (*logthrottle.Throttle, *sink, *clock) {
	s := &sink{}
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	log := slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return logthrottle.New(log, interval, logthrottle.WithClock(c.Now)), s, c
}

func TestFirstPassesRepeatsAreCountedOnTheNextLine(t *testing.T) {
	th, s, c := setup(10 * time.Second)
	assert.True(t, th.Warn("down", "redis down", "err", "refused"), "the first occurrence is written at once")
	for range 41 {
		c.Add(100 * time.Millisecond)
		assert.False(t, th.Warn("down", "redis down", "err", "refused"))
	}
	lines := s.lines(t)
	require.Len(t, lines, 1, "repeats within the interval are only counted")
	assert.Equal(t, "WARN", lines[0]["level"])
	assert.Equal(t, "redis down", lines[0]["msg"])
	assert.Equal(t, "refused", lines[0]["err"])
	assert.NotContains(t, lines[0], "repeated", "nothing was suppressed before the first line")

	c.Add(10 * time.Second) // well past the interval since the first line
	assert.True(t, th.Warn("down", "redis down", "err", "timeout"))
	lines = s.lines(t)
	require.Len(t, lines, 2)
	assert.Equal(t, "timeout", lines[1]["err"], "the line is the occurrence that opened the new interval")
	assert.EqualValues(t, 41, lines[1]["repeated"], "and counts those suppressed since the last line")

	// The count starts again: the next line after the next interval counts only what came after.
	assert.False(t, th.Warn("down", "redis down"))
	c.Add(10 * time.Second)
	assert.True(t, th.Warn("down", "redis down"))
	lines = s.lines(t)
	require.Len(t, lines, 3)
	assert.EqualValues(t, 1, lines[2]["repeated"])
}

func TestIntervalIsMeasuredFromTheLastLine(t *testing.T) {
	th, s, c := setup(10 * time.Second)
	th.Warn("k", "m")
	c.Add(9*time.Second + 999*time.Millisecond)
	assert.False(t, th.Warn("k", "m"), "just inside the interval")
	c.Add(time.Millisecond)
	assert.True(t, th.Warn("k", "m"), "the interval has passed")
	assert.Len(t, s.lines(t), 2)
}

func TestKeysAreIndependent(t *testing.T) {
	th, s, _ := setup(time.Minute)
	assert.True(t, th.Warn("limiter", "limiter down"))
	assert.True(t, th.Warn("breaker", "breaker down"), "another key's line is not held back")
	assert.False(t, th.Warn("limiter", "limiter down"))
	assert.Len(t, s.lines(t), 2)
}

func TestLogLevelAndDefaults(t *testing.T) {
	th, s, _ := setup(0) // zero: the default interval
	assert.True(t, th.Log(t.Context(), slog.LevelError, "k", "broken"))
	assert.Equal(t, "ERROR", s.lines(t)[0]["level"])

	c := &clock{t: time.Unix(0, 0)}
	th = logthrottle.New(nil, 0, logthrottle.WithClock(c.Now)) // nil: slog.Default()
	th.Warn("k", "m")
	c.Add(logthrottle.DefaultInterval - time.Nanosecond)
	assert.False(t, th.Warn("k", "m"), "zero interval means DefaultInterval")
}

// TestConcurrentOccurrences: many goroutines hitting one key at once write one line, and every
// occurrence is counted on the next.
func TestConcurrentOccurrences(t *testing.T) {
	th, s, c := setup(10 * time.Second)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 100 {
				th.Warn("k", "m")
			}
		})
	}
	wg.Wait()
	require.Len(t, s.lines(t), 1)
	c.Add(10 * time.Second)
	th.Warn("k", "m")
	lines := s.lines(t)
	require.Len(t, lines, 2)
	assert.EqualValues(t, 64*100-1, lines[1]["repeated"])
}
