package registry

import (
	"context"
	"sync"
	"time"

	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
)

// MemoryStore is the in-process Store: registrations live in this gateway only. Each lease has a
// timer that removes it when it expires, so watchers hear of expiries without anyone asking.
type MemoryStore struct {
	mu       sync.Mutex
	leases   map[string]*memLease
	watchers map[*queue[Event]]struct{}
	closed   bool
}

type memLease struct {
	b       *registryv1.Backend
	ttl     time.Duration
	expires time.Time
	timer   *time.Timer
}

// NewMemoryStore returns an empty in-process store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{leases: map[string]*memLease{}, watchers: map[*queue[Event]]struct{}{}}
}

// Register implements Store.
func (s *MemoryStore) Register(_ context.Context, b *registryv1.Backend, ttl time.Duration) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := newLeaseID()
	l := &memLease{b: b, ttl: ttl, expires: time.Now().Add(ttl)}
	l.timer = time.AfterFunc(ttl, func() { s.expire(id, l) })
	s.leases[id] = l
	s.notify(Event{Type: Added, LeaseID: id, Backend: b})
	return Lease{ID: id, TTL: ttl, Expires: l.expires}, nil
}

// Update implements Store.
func (s *MemoryStore) Update(_ context.Context, leaseID string, b *registryv1.Backend, ttl time.Duration) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.live(leaseID)
	if l == nil {
		return Lease{}, ErrNotFound
	}
	l.b, l.ttl, l.expires = b, ttl, time.Now().Add(ttl)
	l.timer.Reset(ttl)
	s.notify(Event{Type: Updated, LeaseID: leaseID, Backend: b})
	return Lease{ID: leaseID, TTL: ttl, Expires: l.expires}, nil
}

// Heartbeat implements Store.
func (s *MemoryStore) Heartbeat(_ context.Context, leaseID string) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.live(leaseID)
	if l == nil {
		return Lease{}, ErrNotFound
	}
	l.expires = time.Now().Add(l.ttl)
	l.timer.Reset(l.ttl)
	return Lease{ID: leaseID, TTL: l.ttl, Expires: l.expires}, nil
}

// Deregister implements Store.
func (s *MemoryStore) Deregister(_ context.Context, leaseID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.live(leaseID)
	if l == nil {
		return ErrNotFound
	}
	s.remove(leaseID, l)
	return nil
}

// List implements Store.
func (s *MemoryStore) List(context.Context) ([]Registration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]Registration, 0, len(s.leases))
	for id, l := range s.leases {
		if now.Before(l.expires) {
			out = append(out, Registration{Lease: Lease{ID: id, TTL: l.ttl, Expires: l.expires}, Backend: l.b})
		}
	}
	return out, nil
}

// Watch implements Store.
func (s *MemoryStore) Watch(ctx context.Context, fn func(Event)) error {
	q := newQueue[Event]()
	s.mu.Lock()
	snapshot := make([]Event, 0, len(s.leases)+1)
	for id, l := range s.leases {
		snapshot = append(snapshot, Event{Type: Added, LeaseID: id, Backend: l.b})
	}
	snapshot = append(snapshot, Event{Type: Synced})
	s.watchers[q] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, q)
		s.mu.Unlock()
	}()
	for _, ev := range snapshot {
		fn(ev)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.wake:
			for _, ev := range q.drain() {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				fn(ev)
			}
		}
	}
}

// Close stops every lease's timer; the registrations stay until the store is dropped.
func (s *MemoryStore) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, l := range s.leases {
		l.timer.Stop()
	}
}

// live returns the lease if it has not expired; the caller holds mu.
func (s *MemoryStore) live(id string) *memLease {
	l := s.leases[id]
	if l == nil || !time.Now().Before(l.expires) {
		return nil
	}
	return l
}

// expire runs on l's timer. A heartbeat may have moved the expiry after the timer fired; then
// the timer is set again for what is left.
func (s *MemoryStore) expire(id string, l *memLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.leases[id] != l {
		return
	}
	if left := time.Until(l.expires); left > 0 {
		l.timer.Reset(left)
		return
	}
	s.remove(id, l)
}

// remove deletes a lease and tells the watchers; the caller holds mu.
func (s *MemoryStore) remove(id string, l *memLease) {
	l.timer.Stop()
	delete(s.leases, id)
	s.notify(Event{Type: Removed, LeaseID: id, Backend: l.b})
}

func (s *MemoryStore) notify(ev Event) {
	for q := range s.watchers {
		q.push(ev)
	}
}
