// Package logthrottle writes a warning that can repeat on every request (Redis down, an
// upstream failing mid-response) at most once per interval per key: the first occurrence is
// logged at once, later ones within the interval are only counted, and the next line after the
// interval says how many it stands for (attribute "repeated"). An outage then costs one line per
// interval instead of one per request, and the line still says how many requests it hit.
//
// It is hand-written because log/slog has no sampling, and the well-known samplers (zap's
// zapcore.NewSamplerWithOptions) work on zap's cores, not on slog handlers. Unlike a sampler it
// drops nothing silently: every suppressed occurrence is counted on the next line of its key.
package logthrottle

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultInterval is the interval New uses when given none.
const DefaultInterval = 10 * time.Second

// Throttle logs each key at most once per interval. It is safe for concurrent use; an occurrence
// that is suppressed costs a map read and a few atomic operations, no lock.
type Throttle struct {
	log      *slog.Logger
	interval int64 // nanoseconds
	now      func() time.Time
	base     time.Time // the clock is read as the time since base, monotonic with time.Now
	mu       sync.Mutex
	keys     atomic.Pointer[map[string]*entry] // copy-on-write under mu: keys are few and fixed
}

// entry is one key's state.
type entry struct {
	next       atomic.Int64 // clock ns (since base) from which the next line may be written
	suppressed atomic.Int64 // occurrences counted since the last line
}

// Option configures a Throttle.
type Option func(*Throttle)

// WithClock replaces time.Now, for tests that move time on by hand.
func WithClock(now func() time.Time) Option {
	return func(t *Throttle) { t.now = now }
}

// New returns a Throttle writing to log (nil: slog.Default()) at most once per interval per key
// (zero or less: DefaultInterval).
func New(log *slog.Logger, interval time.Duration, opts ...Option) *Throttle {
	if log == nil {
		log = slog.Default()
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := &Throttle{log: log, interval: int64(interval), now: time.Now}
	for _, o := range opts {
		o(t)
	}
	t.base = t.now()
	t.keys.Store(&map[string]*entry{})
	return t
}

// Warn logs msg with args at level WARN, unless a line for key was written less than the
// interval ago: then the occurrence is only counted. A line written after suppressed
// occurrences carries "repeated", their count. It reports whether it wrote the line.
//
// Keys name a kind of warning (usually the message itself, or the message and a configured
// endpoint's name); they must come from a small fixed set, never from a request, since each
// key is kept for the Throttle's life.
func (t *Throttle) Warn(key, msg string, args ...any) bool {
	return t.Log(context.Background(), slog.LevelWarn, key, msg, args...)
}

// Log is Warn at any level.
func (t *Throttle) Log(ctx context.Context, level slog.Level, key, msg string, args ...any) bool {
	e := t.entry(key)
	now := int64(t.now().Sub(t.base))
	next := e.next.Load()
	if now < next || !e.next.CompareAndSwap(next, now+t.interval) {
		// Within the interval, or another goroutine is writing this key's line right now.
		e.suppressed.Add(1)
		return false
	}
	if n := e.suppressed.Swap(0); n > 0 {
		args = append(args[:len(args):len(args)], "repeated", n)
	}
	t.log.Log(ctx, level, msg, args...)
	return true
}

func (t *Throttle) entry(key string) *entry {
	if e := (*t.keys.Load())[key]; e != nil {
		return e
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.keys.Load()
	if e := old[key]; e != nil {
		return e
	}
	keys := make(map[string]*entry, len(old)+1)
	for k, v := range old {
		keys[k] = v
	}
	e := &entry{}
	keys[key] = e
	t.keys.Store(&keys)
	return e
}
