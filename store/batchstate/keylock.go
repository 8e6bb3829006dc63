package batchstate

import (
	"context"
	"sync"
)

// keyLock serializes work on one key within this process, so Updates of one batch from one
// replica take turns instead of failing each other's compare-and-set: only other replicas'
// writes can then conflict, and retries stay few however many goroutines update a batch.
type keyLock struct {
	mu sync.Mutex
	m  map[string]*keyLockEntry
}

type keyLockEntry struct {
	ch   chan struct{} // holds a token while the key is locked
	refs int           // holders and waiters; the entry goes when none is left
}

// lock waits until key is free or ctx ends; unlock frees it.
func (k *keyLock) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLockEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyLockEntry{ch: make(chan struct{}, 1)}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case e.ch <- struct{}{}:
		return func() {
			<-e.ch
			release()
		}, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
