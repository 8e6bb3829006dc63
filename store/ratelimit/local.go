package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// Local is the in-process Limiter: buckets in a sharded map, each shard under its own mutex.
// A bucket is dropped once it would be full again (it then reads the same as a missing one), by
// a sweep each shard runs after as many operations as it holds buckets (at least 64), so memory
// follows the keys in use and no goroutine is needed.
type Local struct {
	clock   func() time.Time
	base    time.Time
	seed    maphash.Seed
	metrics *Metrics
	shards  [numShards]shard
}

// numShards is a power of two, large enough that 64 callers rarely meet on one mutex.
const numShards = 64

// minSweep is the fewest operations between two sweeps of a shard.
const minSweep = 64

type shard struct {
	mu        sync.Mutex
	buckets   map[string]entry
	ops       int
	nextSweep int
	_         [64]byte // keep shards on separate cache lines
}

type entry struct {
	bucket
	expires float64 // µs; after it the bucket is full and can go
}

// LocalOptions configures a Local limiter.
type LocalOptions struct {
	// Now is the clock, for tests; default time.Now. Local measures time from the first reading,
	// with the monotonic clock when Now provides it (time.Now does), so wall clock changes do not
	// affect it. An injected clock may jump either way: see the package documentation.
	Now func() time.Time
	// Metrics, if set, counts decisions (store "local").
	Metrics *Metrics
}

// NewLocal returns an in-process limiter.
func NewLocal(opts LocalOptions) *Local {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Local{clock: opts.Now, seed: maphash.MakeSeed(), metrics: opts.Metrics}
	l.base = l.clock()
	for i := range l.shards {
		l.shards[i].buckets = make(map[string]entry)
		l.shards[i].nextSweep = minSweep
	}
	return l
}

// Allow implements Limiter. It never blocks on anything but a shard's mutex, and ignores ctx.
func (l *Local) Allow(_ context.Context, key string, lim Limit, cost float64) (Decision, error) {
	if err := validateCost(lim, cost); err != nil {
		return Decision{}, err
	}
	d := l.take(key, lim, cost)
	l.metrics.decision(storeLocal, d)
	return d, nil
}

// Adjust implements Limiter.
func (l *Local) Adjust(_ context.Context, key string, lim Limit, delta float64) error {
	if err := validateDelta(lim, delta); err != nil {
		return err
	}
	l.adjust(key, lim, delta)
	return nil
}

// Len returns the number of buckets held (not full); idle ones count until a sweep drops them.
func (l *Local) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.buckets)
		s.mu.Unlock()
	}
	return n
}

// now reads the clock in whole µs since l.base, the resolution of Redis TIME. Callers hold the
// shard's mutex, so the updates of one bucket see non-decreasing readings of a real clock.
func (l *Local) now() float64 {
	return float64(l.clock().Sub(l.base).Microseconds())
}

func (l *Local) shard(key string) *shard {
	return &l.shards[maphash.String(l.seed, key)&(numShards-1)]
}

// take is Allow without validation or metrics (Redis's fallback calls it).
func (l *Local) take(key string, lim Limit, cost float64) Decision {
	s := l.shard(key)
	s.mu.Lock()
	now := l.now()
	e, ok := s.buckets[key]
	if !ok {
		e.bucket = bucket{tokens: lim.Burst, ts: now}
	}
	tokens, allowed, changed := take(e.bucket, now, lim, cost)
	if changed {
		s.put(key, tokens, now, lim)
	}
	s.tick(now)
	s.mu.Unlock()
	return decision(lim, cost, tokens, allowed)
}

func (l *Local) adjust(key string, lim Limit, delta float64) {
	s := l.shard(key)
	s.mu.Lock()
	now := l.now()
	e, ok := s.buckets[key]
	if !ok {
		e.bucket = bucket{tokens: lim.Burst, ts: now}
	}
	s.put(key, adjust(e.bucket, now, lim, delta), now, lim)
	s.tick(now)
	s.mu.Unlock()
}

// put stores a bucket that changed at now; a full one is dropped, as Redis drops its key.
func (s *shard) put(key string, tokens, now float64, lim Limit) {
	if tokens >= lim.Burst {
		delete(s.buckets, key)
		return
	}
	s.buckets[key] = entry{bucket: bucket{tokens: tokens, ts: now}, expires: now + ttlMillis(tokens, lim)*1e3}
}

// tick counts an operation and sweeps the shard when it is due: each sweep costs as many steps
// as the operations since the last one, so the cost per operation stays constant.
func (s *shard) tick(now float64) {
	s.ops++
	if s.ops < s.nextSweep {
		return
	}
	for k, e := range s.buckets {
		if e.expires <= now {
			delete(s.buckets, k)
		}
	}
	s.ops = 0
	s.nextSweep = max(len(s.buckets), minSweep)
}

// AllowAll implements BatchLimiter.
func (l *Local) AllowAll(ctx context.Context, reqs []Request) []Result {
	out := make([]Result, len(reqs))
	for i, q := range reqs {
		out[i].Decision, out[i].Err = l.Allow(ctx, q.Key, q.Limit, q.Cost)
	}
	return out
}
