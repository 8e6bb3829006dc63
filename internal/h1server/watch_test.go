package h1server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestWatchSweep: a request is due once it has run for watchAfter, not before; one that ended
// is not; a sweep with nothing to look at ends after quietTicks, and the next request starts
// another.
func TestWatchSweep(t *testing.T) {
	l := &watchList{running: true} // steps are taken by hand here
	due := func(now time.Time) []*watch {
		d, end := l.step(now, nil)
		assert.False(t, end)
		var out []*watch
		for _, x := range d {
			out = append(out, x.w)
		}
		return out
	}
	w1, w2, w3 := &watch{}, &watch{}, &watch{}
	l.add(w1, 1)
	l.add(w2, 7)
	l.add(w3, 1)
	base := w1.at
	w2.at, w3.at = base.Add(time.Millisecond), base.Add(2*time.Millisecond) // in order, as listed
	assert.Empty(t, due(base.Add(watchAfter-time.Microsecond)), "younger than watchAfter")
	assert.Equal(t, []*watch{w1}, due(base.Add(watchAfter)))
	l.remove(w3) // it ended before its time
	d, _ := l.step(base.Add(time.Hour), nil)
	assert.Equal(t, []dueWatch{{w2, 7}}, d, "the request's number goes with it")
	assert.Nil(t, l.head)
	assert.Nil(t, l.tail)

	for i := range quietTicks - 2 { // the last step was the first quiet one
		_, end := l.step(base, nil)
		assert.False(t, end, "tick %d", i)
	}
	_, end := l.step(base, nil)
	assert.True(t, end, "quiet for quietTicks")
	assert.False(t, l.running)

	w4 := &watch{}
	l.add(w4, 1) // starts a sweep goroutine again
	l.mu.Lock()
	assert.True(t, l.running)
	l.mu.Unlock()
	l.remove(w4)
}

// TestWatchFire: the sweep's fire marks the request it looked at, not one that started on the
// connection since, nor one that has ended.
func TestWatchFire(t *testing.T) {
	w := &watch{on: true, seq: 2, body: &requestBody{}}
	w.fire(1)
	assert.False(t, w.fired, "an earlier request's look")
	w.fire(2)
	assert.True(t, w.fired)
	w.fired, w.on = false, false
	w.fire(2)
	assert.False(t, w.fired, "the request has ended")
}
