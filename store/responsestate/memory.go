package responsestate

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Memory is the in-process Store: responses live in this process only, so a follow-up must
// reach the replica that stored its predecessor. It keeps the *Record it is given, neither
// copied nor encoded, so that Get is a map lookup under a mutex.
//
// Expiry needs no goroutine: a record past its TTL is absent to Get and Delete at once (and
// removed by them), and each Put first frees the records that have expired. The records are
// kept in a min-heap by expiry (CreatedAt plus the TTL, then the order of their Puts), which
// is both the order in which they expire and, oldest first, the order in which a Put that would
// take the total past MaxBytes evicts them.
type Memory struct {
	ttl       time.Duration
	maxRecord int
	maxBytes  int
	now       func() time.Time

	mu    sync.Mutex
	byID  map[string]*memEntry
	order memHeap
	bytes int    // the Size of every record held
	seq   uint64 // Puts so far: orders records of the same expiry
}

type memEntry struct {
	id      string // r.ID as it was put
	r       *Record
	size    int
	expires time.Time
	seq     uint64
	index   int // in order
}

// MemoryOptions configure a Memory store; a zero field is its default.
type MemoryOptions struct {
	// TTL is how long a response is kept after its CreatedAt; default DefaultTTL.
	TTL time.Duration
	// MaxRecordBytes bounds one record's Size; default DefaultMaxRecordBytes, and never more
	// than MaxBytes.
	MaxRecordBytes int
	// MaxBytes bounds the Size of all the records held; default DefaultMaxBytes. A Put that
	// would pass it first evicts the oldest records.
	MaxBytes int
	// Now is the clock expiry is measured by; default time.Now. For tests.
	Now func() time.Time
}

// NewMemory returns an empty in-process store.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxRecordBytes <= 0 {
		opts.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Memory{
		ttl:       opts.TTL,
		maxRecord: min(opts.MaxRecordBytes, opts.MaxBytes), // a larger one could never be held
		maxBytes:  opts.MaxBytes,
		now:       opts.Now,
		byID:      map[string]*memEntry{},
	}
}

var _ Store = (*Memory)(nil)

// Put implements Store. A record that has expired already replaces the stored one with
// nothing.
func (m *Memory) Put(_ context.Context, r *Record) error {
	if err := checkPut(r); err != nil {
		return err
	}
	size := r.Size()
	if size > m.maxRecord {
		return fmt.Errorf("responsestate: put %s: %d bytes, over %d: %w", r.ID, size, m.maxRecord, ErrTooLarge)
	}
	now := m.now()
	e := &memEntry{id: r.ID, r: r, size: size, expires: r.CreatedAt.Add(m.ttl)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.byID[r.ID]; old != nil {
		m.remove(old)
	}
	for len(m.order) > 0 && !now.Before(m.order[0].expires) {
		m.remove(m.order[0])
	}
	if !now.Before(e.expires) {
		return nil
	}
	for m.bytes+size > m.maxBytes {
		m.remove(m.order[0]) // not empty: size is at most maxBytes
	}
	m.seq++
	e.seq = m.seq
	m.byID[r.ID] = e
	heap.Push(&m.order, e)
	m.bytes += size
	return nil
}

// checkPut refuses what no store can keep, before any is touched.
func checkPut(r *Record) error {
	if r == nil {
		return errors.New("responsestate: put: nil record")
	}
	if r.ID == "" {
		return errors.New("responsestate: put: empty id")
	}
	return nil
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, owner, id string) (*Record, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live(owner, id, now)
	if e == nil {
		return nil, fmt.Errorf("responsestate: get %s: %w", id, ErrNotFound)
	}
	return e.r, nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, owner, id string) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live(owner, id, now)
	if e == nil {
		return fmt.Errorf("responsestate: delete %s: %w", id, ErrNotFound)
	}
	m.remove(e)
	return nil
}

// live returns owner's unexpired record id, or nil; it removes the record if it has expired.
// The caller holds mu.
func (m *Memory) live(owner, id string, now time.Time) *memEntry {
	e := m.byID[id]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		m.remove(e)
		return nil
	}
	if e.r.Owner != owner {
		return nil
	}
	return e
}

// remove drops e. The caller holds mu.
func (m *Memory) remove(e *memEntry) {
	heap.Remove(&m.order, e.index)
	delete(m.byID, e.id)
	m.bytes -= e.size
}

// memHeap is container/heap's interface over the records, earliest expiry first.
type memHeap []*memEntry

func (h memHeap) Len() int { return len(h) }

func (h memHeap) Less(i, j int) bool {
	if c := h[i].expires.Compare(h[j].expires); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}

func (h memHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *memHeap) Push(x any) {
	e := x.(*memEntry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *memHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
