package sessions

import (
	"container/list"
	"context"
	"encoding/json"
	"sync"
	"time"
)

// MemoryOptions configure a Memory store.
type MemoryOptions struct {
	// MaxSessions bounds the sessions held; creating one more evicts the least recently used.
	// Default 10000.
	MaxSessions int
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Metrics, when set, gets the active sessions gauge.
	Metrics *Metrics
}

// Memory is the in-process Store: sessions live as long as the process, or until they expire
// or are evicted. An expired session is removed when it is next touched, or when it reaches
// the least recently used end while sessions are created, so it needs no goroutine; the
// active gauge counts the sessions held, expired ones until then.
type Memory struct {
	opts MemoryOptions

	mu  sync.Mutex
	m   map[string]*mentry
	lru list.List // of *mentry, most recently used first
}

type mentry struct {
	s         *Session
	token     string // the lock's; "" when unlocked
	lockUntil time.Time
	elem      *list.Element
}

// NewMemory returns an empty Memory store.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 10000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Memory{opts: opts, m: map[string]*mentry{}}
}

// Len is the number of sessions held (expired ones until they are swept).
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// Create implements Store.
func (m *Memory) Create(_ context.Context, s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Now()
	// Sweep expired sessions from the cold end: turns refresh a session's expiry as they use
	// it, so the least recently used are the first to expire.
	for i := 0; i < 16 && m.lru.Len() > 0; i++ {
		e := m.lru.Back().Value.(*mentry)
		if now.Before(e.s.Expires) {
			break
		}
		m.remove(e)
	}
	if old, ok := m.m[s.ID]; ok {
		m.remove(old)
	}
	for len(m.m) >= m.opts.MaxSessions {
		m.remove(m.lru.Back().Value.(*mentry))
	}
	e := &mentry{s: s.clone()}
	e.elem = m.lru.PushFront(e)
	m.m[s.ID] = e
	if m.opts.Metrics != nil {
		m.opts.Metrics.active.WithLabelValues(s.Model).Inc()
	}
	return nil
}

func (m *Memory) remove(e *mentry) {
	m.lru.Remove(e.elem)
	delete(m.m, e.s.ID)
	if m.opts.Metrics != nil {
		m.opts.Metrics.active.WithLabelValues(e.s.Model).Dec()
	}
}

// lookup returns owner's live session id, removing it if expired. Call with mu held.
func (m *Memory) lookup(owner, id string, now time.Time) *mentry {
	e := m.m[id]
	switch {
	case e == nil:
		return nil
	case !now.Before(e.s.Expires):
		m.remove(e)
		return nil
	case e.s.Owner != owner:
		return nil
	}
	m.lru.MoveToFront(e.elem)
	return e
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, owner, id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.lookup(owner, id, m.opts.Now())
	if e == nil {
		return nil, ErrNotFound
	}
	return e.s.clone(), nil
}

// Lock implements Store.
func (m *Memory) Lock(_ context.Context, owner, id string, lease time.Duration) (*Session, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Now()
	e := m.lookup(owner, id, now)
	switch {
	case e == nil:
		return nil, "", ErrNotFound
	case e.token != "" && now.Before(e.lockUntil):
		return nil, "", ErrBusy
	}
	e.token, e.lockUntil = newToken(), now.Add(lease)
	return e.s.clone(), e.token, nil
}

// held returns id's entry if token holds its lock. Call with mu held.
func (m *Memory) held(id, token string, now time.Time) (*mentry, error) {
	e := m.m[id]
	switch {
	case e == nil:
		return nil, ErrNotFound
	case e.token != token || !now.Before(e.lockUntil):
		return nil, ErrLockLost
	}
	return e, nil
}

// Renew implements Store.
func (m *Memory) Renew(_ context.Context, id, token string, lease time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opts.Now()
	e, err := m.held(id, token, now)
	if err != nil {
		return ErrLockLost
	}
	e.lockUntil = now.Add(lease)
	return nil
}

// Commit implements Store.
func (m *Memory) Commit(_ context.Context, id, token string, s *Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.held(id, token, m.opts.Now())
	if err != nil {
		return err
	}
	c := e.s.clone()
	c.Endpoint, c.Messages, c.Expires = s.Endpoint, append([]json.RawMessage(nil), s.Messages...), s.Expires
	e.s, e.token = c, ""
	m.lru.MoveToFront(e.elem)
	return nil
}

// Unlock implements Store.
func (m *Memory) Unlock(_ context.Context, id, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.m[id]; e != nil && e.token == token {
		e.token = ""
	}
	return nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, owner, id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.lookup(owner, id, m.opts.Now())
	if e == nil {
		return "", ErrNotFound
	}
	m.remove(e)
	return e.s.Model, nil
}
