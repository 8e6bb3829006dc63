package upstream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/logtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		n        int
		want     time.Duration
	}{
		{time.Second, -1, time.Second},
		{time.Second, 0, time.Second},
		{time.Second, 1, time.Second},
		{time.Second, 2, 2 * time.Second},
		{time.Second, 3, 4 * time.Second},
		{time.Second, 4, 8 * time.Second},
		{time.Second, 9, 8 * time.Second},                   // at most 8x
		{20 * time.Second, 9, 60 * time.Second},             // at most 60 s
		{90 * time.Second, 3, 90 * time.Second},             // unless the interval is longer
		{10 * time.Millisecond, 100, 80 * time.Millisecond}, // no overflow
	} {
		assert.Equal(t, tc.want, Backoff(tc.interval, tc.n), "Backoff(%v, %d)", tc.interval, tc.n)
	}
}

// fakeClock is a clock whose timers the test fires: each timer the loop starts is handed to the
// test on timers, and fires only when the test says so.
type fakeClock struct {
	*logtest.Clock
	timers chan *fakeTimer
}

type fakeTimer struct {
	d       time.Duration
	c       chan time.Time
	stopped atomic.Bool
}

func (f *fakeClock) now() time.Time { return f.Now() }

func (f *fakeClock) timer(d time.Duration) (<-chan time.Time, func() bool) {
	t := &fakeTimer{d: d, c: make(chan time.Time, 1)}
	f.timers <- t
	return t.c, func() bool { return !t.stopped.Swap(true) }
}

// TestHealthLoopPacing: checks every interval while healthy, with backoff while not; a kick
// brings the next check forward to half the backoff's next step; discovery is due once per
// discovery interval of a healthy endpoint. The loop is stepped by hand: no real time passes.
func TestHealthLoopPacing(t *testing.T) {
	const interval, discovery = time.Second, 10 * time.Second
	clk := &fakeClock{Clock: logtest.NewClock(time.Unix(1000, 0)), timers: make(chan *fakeTimer)}
	kick := make(chan struct{}, 1)
	probes := make(chan bool)  // discoverDue of each probe
	answers := make(chan bool) // the probe's answer: healthy
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		healthLoop(ctx, clk, interval, discovery, kick, func(_ context.Context, due bool) bool {
			probes <- due
			return <-answers
		})
	}()
	next := func(want time.Duration, msg string) *fakeTimer {
		t.Helper()
		tm := <-clk.timers
		require.Equal(t, want, tm.d, msg)
		return tm
	}
	probe := func(tm *fakeTimer, healthy bool) (due bool) {
		t.Helper()
		tm.c <- time.Time{}
		due = <-probes
		answers <- healthy
		return due
	}

	tm := next(interval, "a healthy endpoint is checked every interval")
	assert.False(t, probe(tm, false), "discovery is not due before its interval")
	tm = next(Backoff(interval, 1), "after one failure")
	probe(tm, false)
	tm = next(Backoff(interval, 2), "after two failures: backing off")
	probe(tm, false)
	tm = next(Backoff(interval, 3), "after three")
	probe(tm, false)
	tm = next(Backoff(interval, 4), "after four: 8x")

	kick <- struct{}{}
	early := next(Backoff(interval, 5)/2, "a kick brings the check forward to half the next step")
	assert.True(t, tm.stopped.Load(), "the regular timer is stopped")
	clk.Add(discovery)
	assert.True(t, probe(early, true), "discovery is due after its interval")
	tm = next(interval, "recovered: every interval again")
	assert.False(t, probe(tm, true), "discovery just ran")

	tm = next(interval, "")
	kick <- struct{}{}
	early = next(Backoff(interval, 1)/2, "a kick to a healthy endpoint: half an interval")
	assert.True(t, tm.stopped.Load())
	probe(early, true)

	tm = next(interval, "")
	kick <- struct{}{}
	early = next(Backoff(interval, 1)/2, "")
	cancel()
	<-done
	assert.True(t, early.stopped.Load(), "the loop stops its timer when ctx ends")
}
