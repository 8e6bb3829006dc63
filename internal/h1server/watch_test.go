package h1server

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWatchSweep: a request is due at the second tick after it was listed (it has then run for
// more than watchAfter), not at the first; one that ended is not; a sweep with nothing to look
// at ends after quietTicks, and the next request starts another.
func TestWatchSweep(t *testing.T) {
	l := &watchList{running: true} // steps are taken by hand here
	due := func() []*watch {
		d, end := l.step(nil)
		assert.False(t, end)
		var out []*watch
		for _, x := range d {
			out = append(out, x.w)
		}
		return out
	}
	w1, w2, w3 := &watch{}, &watch{}, &watch{}
	l.add(w1, 1)
	assert.Empty(t, due(), "listed just before the tick: young")
	l.add(w2, 7)
	l.add(w3, 1)
	assert.Equal(t, []*watch{w1}, due())
	l.remove(w3) // it ended before its time
	d, _ := l.step(nil)
	assert.Equal(t, []dueWatch{{w2, 7}}, d, "the request's number goes with it")
	assert.Nil(t, l.head)
	assert.Nil(t, l.tail)

	for i := range quietTicks - 2 { // the third step was the first quiet one
		_, end := l.step(nil)
		assert.False(t, end, "tick %d", i)
	}
	_, end := l.step(nil)
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
