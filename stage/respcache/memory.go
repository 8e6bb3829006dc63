package respcache

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryOptions bound a Memory store.
type MemoryOptions struct {
	// MaxEntries and MaxBytes bound the store: a Put beyond either evicts the least recently
	// used entries. Defaults 10,000 entries and 64 MiB. Bytes count keys, responses, vectors,
	// words and a fixed overhead per entry.
	MaxEntries int
	MaxBytes   int64
	// TTL is how long an entry lives after its Put; default 1 h.
	TTL time.Duration
	// Now is the clock (tests move it by hand); default time.Now.
	Now func() time.Time
}

// Memory is the in-process Store: a map, a least-recently-used list bounded by entries and
// bytes, and a vector index per semantic partition. Entries expire TTL after their Put: an
// expired entry is never returned (checked on read) and is swept on every Put, oldest first.
// All entries live the same TTL, so insertion order is expiry order and the sweep stops at the
// first live one.
//
// Get, Nearest and Put are safe for concurrent use; Get and Put are O(1) apart from the sweep.
type Memory struct {
	opts MemoryOptions

	mu     sync.Mutex
	byKey  map[string]*mentry
	byID   map[uint64]*mentry
	lru    mlist // most recently used first
	fifo   mlist // oldest Put first: the expiry order
	bytes  int64
	nextID uint64
	vec    *vectors

	entries, size, evictions atomic.Int64 // for Stats, without the lock
}

type mentry struct {
	id             uint64
	key, partition string
	words          string
	resp           []byte
	vslot          *indexSlot // nil: not in the vector index
	size           int64
	expires        int64 // UnixNano
	lru, fifo      mlinks
}

type mlinks struct{ prev, next *mentry }

// mlist is an intrusive doubly linked list of entries through one of their link fields.
type mlist struct {
	head, tail *mentry
	links      func(*mentry) *mlinks
}

func (l *mlist) pushFront(e *mentry) {
	le := l.links(e)
	le.prev, le.next = nil, l.head
	if l.head != nil {
		l.links(l.head).prev = e
	} else {
		l.tail = e
	}
	l.head = e
}

func (l *mlist) pushBack(e *mentry) {
	le := l.links(e)
	le.prev, le.next = l.tail, nil
	if l.tail != nil {
		l.links(l.tail).next = e
	} else {
		l.head = e
	}
	l.tail = e
}

func (l *mlist) remove(e *mentry) {
	le := l.links(e)
	if le.prev != nil {
		l.links(le.prev).next = le.next
	} else {
		l.head = le.next
	}
	if le.next != nil {
		l.links(le.next).prev = le.prev
	} else {
		l.tail = le.prev
	}
	le.prev, le.next = nil, nil
}

// NewMemory returns an empty in-process store.
func NewMemory(opts MemoryOptions) *Memory {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 10_000
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
	}
	if opts.TTL <= 0 {
		opts.TTL = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m := &Memory{opts: opts, vec: newVectors()}
	m.reset()
	return m
}

func (m *Memory) reset() {
	m.byKey, m.byID = map[string]*mentry{}, map[uint64]*mentry{}
	m.lru = mlist{links: func(e *mentry) *mlinks { return &e.lru }}
	m.fifo = mlist{links: func(e *mentry) *mlinks { return &e.fifo }}
	m.bytes = 0
	m.vec.clear()
	m.entries.Store(0)
	m.size.Store(0)
}

// Get implements Store. The returned slice is the store's: the caller must not modify it.
func (m *Memory) Get(_ context.Context, key string) ([]byte, error) {
	now := m.opts.Now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byKey[key]
	if e == nil {
		return nil, nil
	}
	return m.touch(e, now), nil
}

// touch returns e's response and marks it used, or drops it when it expired. Under m.mu.
func (m *Memory) touch(e *mentry, now int64) []byte {
	if now >= e.expires {
		m.drop(e)
		return nil
	}
	if m.lru.head != e {
		m.lru.remove(e)
		m.lru.pushFront(e)
	}
	return e.resp
}

// Nearest implements Store.
func (m *Memory) Nearest(_ context.Context, partition string, v []float32, min float32) (Match, error) {
	id, sim, ok := m.vec.search(partition, v)
	if !ok {
		return Match{}, nil
	}
	now := m.opts.Now().UnixNano()
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byID[id]
	if e == nil { // removed since the search
		return Match{}, nil
	}
	match := Match{Key: e.key, Similarity: sim}
	if sim >= min {
		if match.Response = m.touch(e, now); match.Response != nil {
			match.Words = e.words
		}
	}
	return match, nil
}

// Put implements Store. It keeps e's slices: the caller must not modify them afterwards.
func (m *Memory) Put(_ context.Context, e Entry) error {
	size := e.size()
	if size > m.opts.MaxBytes {
		return ErrTooLarge
	}
	now := m.opts.Now().UnixNano()
	m.mu.Lock()
	if old := m.byKey[e.Key]; old != nil {
		m.drop(old)
	}
	m.sweep(now)
	for m.lru.tail != nil && (len(m.byKey)+1 > m.opts.MaxEntries || m.bytes+size > m.opts.MaxBytes) {
		m.drop(m.lru.tail)
		m.evictions.Add(1)
	}
	m.nextID++
	me := &mentry{id: m.nextID, key: e.Key, partition: e.Partition, words: e.Words, resp: e.Response, size: size,
		expires: now + int64(m.opts.TTL)}
	me.vslot = m.vec.reserve(e.Partition, e.Vector)
	m.byKey[e.Key] = me
	m.byID[me.id] = me
	m.lru.pushFront(me)
	m.fifo.pushBack(me)
	m.bytes += size
	m.entries.Store(int64(len(m.byKey)))
	m.size.Store(m.bytes)
	m.mu.Unlock()
	if me.vslot != nil {
		me.vslot.fill(&m.mu, me.id, e.Vector) // lookups go on meanwhile (and find the entry by its key)
	}
	return nil
}

// sweep drops the expired entries, oldest first. Under m.mu.
func (m *Memory) sweep(now int64) {
	for e := m.fifo.head; e != nil && now >= e.expires; e = m.fifo.head {
		m.drop(e)
	}
}

// drop removes e. Under m.mu.
func (m *Memory) drop(e *mentry) {
	delete(m.byKey, e.key)
	delete(m.byID, e.id)
	m.lru.remove(e)
	m.fifo.remove(e)
	if e.vslot != nil {
		m.vec.drop(e.vslot, e.id, e.partition)
	}
	m.bytes -= e.size
	m.entries.Store(int64(len(m.byKey)))
	m.size.Store(m.bytes)
}

// Flush implements Store.
func (m *Memory) Flush(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.byKey)
	m.reset()
	return n, nil
}

// Stats implements Store. Expired entries not yet swept still count.
func (m *Memory) Stats() Stats {
	return Stats{Entries: m.entries.Load(), Bytes: m.size.Load(), Evictions: m.evictions.Load()}
}
