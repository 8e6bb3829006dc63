package logthrottle_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func setup(interval time.Duration) (*logthrottle.Throttle, *logtest.Sink, *logtest.Clock) {
	s := &logtest.Sink{}
	c := logtest.NewClock(time.Unix(1_700_000_000, 0))
	log := s.JSON()
	return logthrottle.New(log, interval, logthrottle.WithClock(c.Now)), s, c
}

func TestFirstPassesRepeatsAreCountedOnTheNextLine(t *testing.T) {
	th, s, c := setup(10 * time.Second)
	assert.True(t, th.Warn("down", "redis down", "err", "refused"), "the first occurrence is written at once")
	for range 41 {
		c.Add(100 * time.Millisecond)
		assert.False(t, th.Warn("down", "redis down", "err", "refused"))
	}
	lines := s.Records(t)
	require.Len(t, lines, 1, "repeats within the interval are only counted")
	assert.Equal(t, "WARN", lines[0]["level"])
	assert.Equal(t, "redis down", lines[0]["msg"])
	assert.Equal(t, "refused", lines[0]["err"])
	assert.NotContains(t, lines[0], "repeated", "nothing was suppressed before the first line")

	c.Add(10 * time.Second) // well past the interval since the first line
	assert.True(t, th.Warn("down", "redis down", "err", "timeout"))
	lines = s.Records(t)
	require.Len(t, lines, 2)
	assert.Equal(t, "timeout", lines[1]["err"], "the line is the occurrence that opened the new interval")
	assert.EqualValues(t, 41, lines[1]["repeated"], "and counts those suppressed since the last line")

	// The count starts again: the next line after the next interval counts only what came after.
	assert.False(t, th.Warn("down", "redis down"))
	c.Add(10 * time.Second)
	assert.True(t, th.Warn("down", "redis down"))
	lines = s.Records(t)
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
	assert.Len(t, s.Records(t), 2)
}

func TestKeysAreIndependent(t *testing.T) {
	th, s, _ := setup(time.Minute)
	assert.True(t, th.Warn("limiter", "limiter down"))
	assert.True(t, th.Warn("breaker", "breaker down"), "another key's line is not held back")
	assert.False(t, th.Warn("limiter", "limiter down"))
	assert.Len(t, s.Records(t), 2)
}

func TestLogLevelAndDefaults(t *testing.T) {
	th, s, _ := setup(0) // zero: the default interval
	assert.True(t, th.Log(t.Context(), slog.LevelError, "k", "broken"))
	assert.Equal(t, "ERROR", s.Records(t)[0]["level"])

	c := logtest.NewClock(time.Unix(0, 0))
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
	require.Len(t, s.Records(t), 1)
	c.Add(10 * time.Second)
	th.Warn("k", "m")
	lines := s.Records(t)
	require.Len(t, lines, 2)
	assert.EqualValues(t, 64*100-1, lines[1]["repeated"])
}
