package breaker

import (
	"sync"
	"sync/atomic"
)

// windowBuckets splits the error-rate window; the Redis scripts use the same number.
const windowBuckets = 10

// noEpoch marks a bucket that holds nothing.
const noEpoch = -1 << 62

// window counts outcomes over a rolling window of windowBuckets buckets. Adding is lock-free
// except when a bucket starts a new period (once per bucket width); a count racing with that
// reset or with reset may be lost, which only blurs the rate a little.
type window struct {
	width   int64 // bucket width, clock nanoseconds
	mu      sync.Mutex
	buckets [windowBuckets]bucket
}

type bucket struct {
	epoch    atomic.Int64 // now/width of the period the counts are for
	total    atomic.Int64
	failures atomic.Int64
}

func (w *window) init(width int64) {
	w.width = max(width, 1)
	w.reset()
}

func (w *window) add(now int64, failed bool) {
	idx := now / w.width
	b := &w.buckets[idx%windowBuckets]
	if b.epoch.Load() != idx {
		w.mu.Lock()
		if b.epoch.Load() != idx {
			b.total.Store(0)
			b.failures.Store(0)
			b.epoch.Store(idx) // after the counts: an adder that sees idx adds to zeroed counts
		}
		w.mu.Unlock()
	}
	b.total.Add(1)
	if failed {
		b.failures.Add(1)
	}
}

// sum returns the counts of the buckets within the window ending at now.
func (w *window) sum(now int64) (total, failures int64) {
	idx := now / w.width
	for i := range w.buckets {
		b := &w.buckets[i]
		if e := b.epoch.Load(); e > idx-windowBuckets && e <= idx {
			total += b.total.Load()
			failures += b.failures.Load()
		}
	}
	return total, failures
}

func (w *window) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.buckets {
		w.buckets[i].epoch.Store(noEpoch)
		w.buckets[i].total.Store(0)
		w.buckets[i].failures.Store(0)
	}
}
