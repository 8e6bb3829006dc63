// Package slots bounds the batch requests in flight per model: in this process (Local), or
// across every worker and gateway replica that shares a Redis (Redis), so that N workers
// together send an upstream no more than the configured number of batch requests at once.
package slots

import (
	"context"
	"fmt"
	"sync"
)

// Semaphore hands out slots per key (a model name). Acquire waits for a free slot, or returns
// ctx's error when ctx ends first; the caller calls release exactly once when its request is
// over.
type Semaphore interface {
	Acquire(ctx context.Context, key string) (release func(), err error)
}

// Limits are the slots per key: Default for every key, ByKey for those named.
type Limits struct {
	Default int
	ByKey   map[string]int
}

// Of returns key's limit, at least 1 (a key with no slots would wait forever).
func (l Limits) Of(key string) int {
	if n, ok := l.ByKey[key]; ok && n > 0 {
		return n
	}
	return max(l.Default, 1)
}

// Validate reports a limit below 1.
func (l Limits) Validate() error {
	if l.Default < 0 {
		return fmt.Errorf("slots: default limit %d is negative", l.Default)
	}
	for k, n := range l.ByKey {
		if n < 1 {
			return fmt.Errorf("slots: limit for %q is %d, want at least 1", k, n)
		}
	}
	return nil
}

// Local is the in-process Semaphore: one bounded channel per key, dropped when nobody holds or
// waits for a slot of it (keys are model names from users' files).
type Local struct {
	limits Limits
	mu     sync.Mutex
	sems   map[string]*localSem
}

type localSem struct {
	ch   chan struct{}
	refs int // holders and waiters
}

var _ Semaphore = (*Local)(nil)

// NewLocal returns an in-process semaphore with the given limits.
func NewLocal(l Limits) *Local {
	return &Local{limits: l, sems: map[string]*localSem{}}
}

// Acquire implements Semaphore.
func (l *Local) Acquire(ctx context.Context, key string) (func(), error) {
	l.mu.Lock()
	s, ok := l.sems[key]
	if !ok {
		s = &localSem{ch: make(chan struct{}, l.limits.Of(key))}
		l.sems[key] = s
	}
	s.refs++
	l.mu.Unlock()
	select {
	case s.ch <- struct{}{}:
		var once sync.Once
		return func() {
			once.Do(func() {
				<-s.ch
				l.unref(key, s)
			})
		}, nil
	case <-ctx.Done():
		l.unref(key, s)
		return nil, ctx.Err()
	}
}

func (l *Local) unref(key string, s *localSem) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.refs--; s.refs == 0 {
		delete(l.sems, key)
	}
}
