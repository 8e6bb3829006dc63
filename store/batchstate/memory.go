package batchstate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is the in-process Store: batches live in this process only. It keeps batches the way
// Redis does (JSON, a version, counts apart, and a terminal batch only for its TTL), so both
// behave alike.
//
// Expiry needs no goroutine of its own: a batch past its TTL is absent to every method at once,
// and writes free the memory of expired batches, at most once per sweepEvery (removing ids from
// order costs a pass over all of them).
type Memory struct {
	ttl time.Duration
	now func() time.Time // time.Now; tests step it

	mu        sync.Mutex
	batches   map[string]*memBatch
	order     []string   // every id, ascending (oldest first)
	expiring  []memTimer // by expiry time, as they were set (a clock stepping back only delays a sweep)
	nextSweep time.Time
}

type memBatch struct {
	data    []byte // encodeBatch's form
	status  Status
	version uint64
	counts  Counts
	results map[string]string // custom_id -> resultValue
	expires time.Time         // zero while not terminal
}

// memTimer is when a batch expires. A batch that stops being terminal, or is replaced after it
// expired, leaves a timer that no longer matches it; the sweep skips such timers.
type memTimer struct {
	b  *memBatch
	id string
	at time.Time
}

// MemoryOptions configure a Memory store.
type MemoryOptions struct {
	// TTL is how long a terminal batch and its results are kept after it became terminal;
	// default 30 days, as in Redis.
	TTL time.Duration
}

// NewMemory returns an empty in-process store configured by opts: at most one; none, the
// defaults (the variadic form keeps NewMemory() as it was).
func NewMemory(opts ...MemoryOptions) *Memory {
	var o MemoryOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.TTL <= 0 {
		o.TTL = 30 * 24 * time.Hour
	}
	return &Memory{ttl: o.TTL, now: time.Now, batches: map[string]*memBatch{}}
}

var _ Store = (*Memory)(nil)

// get returns the batch with this id, nil if there is none or it expired. The caller holds mu.
func (m *Memory) get(id string, now time.Time) *memBatch {
	e := m.batches[id]
	if e == nil || e.expired(now) {
		return nil
	}
	return e
}

func (e *memBatch) expired(now time.Time) bool {
	return !e.expires.IsZero() && !now.Before(e.expires)
}

// setStatus records the batch's status and, as Redis does, starts its TTL when it first becomes
// terminal (later updates keep it) and ends it if it stops being terminal. The caller holds mu.
func (m *Memory) setStatus(id string, e *memBatch, st Status, now time.Time) {
	e.status = st
	switch {
	case !st.Terminal():
		e.expires = time.Time{}
	case e.expires.IsZero():
		e.expires = now.Add(m.ttl)
		m.expiring = append(m.expiring, memTimer{b: e, id: id, at: e.expires})
	}
}

// sweep forgets the batches whose TTL has passed. The caller holds mu.
func (m *Memory) sweep(now time.Time) {
	if now.Before(m.nextSweep) || len(m.expiring) == 0 || now.Before(m.expiring[0].at) {
		return
	}
	m.nextSweep = now.Add(min(m.ttl, sweepEvery))
	gone := map[string]bool{}
	for len(m.expiring) > 0 && !now.Before(m.expiring[0].at) {
		t := m.expiring[0]
		m.expiring[0] = memTimer{} // lets the batch go
		m.expiring = m.expiring[1:]
		if m.batches[t.id] == t.b && t.b.expires.Equal(t.at) {
			delete(m.batches, t.id)
			gone[t.id] = true
		}
	}
	if len(gone) > 0 {
		m.order = slices.DeleteFunc(m.order, func(id string) bool { return gone[id] })
	}
}

// sweepEvery bounds how often writes sweep (a short TTL sweeps as often as it expires).
const sweepEvery = time.Minute

// Create implements Store. An id whose batch expired is free again, as in Redis.
func (m *Memory) Create(ctx context.Context, b *Batch) error {
	if err := checkNew(b); err != nil {
		return err
	}
	data, err := encodeBatch(b)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.sweep(now)
	old := m.batches[b.ID]
	if old != nil && !old.expired(now) {
		return fmt.Errorf("batchstate: create %s: %w", b.ID, ErrExists)
	}
	e := &memBatch{data: data, version: 1, counts: Counts{Total: b.Counts.Total}}
	m.setStatus(b.ID, e, b.Status, now)
	m.batches[b.ID] = e
	if old == nil {
		i, _ := slices.BinarySearch(m.order, b.ID)
		m.order = slices.Insert(m.order, i, b.ID)
	}
	return nil
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, id string) (*Batch, error) {
	m.mu.Lock()
	e := m.get(id, m.now())
	if e == nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("batchstate: get %s: %w", id, ErrNotFound)
	}
	data, counts := e.data, e.counts
	m.mu.Unlock()
	return decodeBatch(id, data, counts)
}

// List implements Store. Expired batches the sweep has not removed yet are skipped.
func (m *Memory) List(ctx context.Context, after string, limit int) ([]*Batch, bool, error) {
	type item struct {
		id     string
		data   []byte
		counts Counts
	}
	limit = max(limit, 0)
	m.mu.Lock()
	now := m.now()
	end := len(m.order)
	if after != "" {
		end, _ = slices.BinarySearch(m.order, after) // m.order[:end] sort before after
	}
	var items []item
	more := false
	for i := end - 1; i >= 0; i-- {
		id := m.order[i]
		e := m.get(id, now)
		if e == nil {
			continue
		}
		if len(items) == limit {
			more = true
			break
		}
		items = append(items, item{id, e.data, e.counts})
	}
	m.mu.Unlock()

	out := make([]*Batch, len(items))
	for i, it := range items {
		b, err := decodeBatch(it.id, it.data, it.counts)
		if err != nil {
			return nil, false, err
		}
		out[i] = b
	}
	return out, more, nil
}

// Update implements Store. fn runs without the store's lock (it may call the store), so the
// write is a compare-and-set on the batch's version, as in Redis.
func (m *Memory) Update(ctx context.Context, id string, fn func(*Batch) error) (*Batch, error) {
	for attempt := 1; ; attempt++ {
		m.mu.Lock()
		e := m.get(id, m.now())
		if e == nil {
			m.mu.Unlock()
			return nil, fmt.Errorf("batchstate: update %s: %w", id, ErrNotFound)
		}
		data, version, counts := e.data, e.version, e.counts
		m.mu.Unlock()

		next, changed, err := apply(id, data, counts, fn)
		if err != nil || !changed {
			return next, err
		}
		enc, err := encodeBatch(next)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		now := m.now()
		if m.get(id, now) != e { // expired (and perhaps replaced) while fn ran
			m.mu.Unlock()
			return nil, fmt.Errorf("batchstate: update %s: %w", id, ErrNotFound)
		}
		if e.version == version {
			e.data, e.version = enc, version+1
			m.setStatus(id, e, next.Status, now)
			e.counts.Total = next.Counts.Total
			next.Counts = e.counts
			m.sweep(now)
			m.mu.Unlock()
			return next, nil
		}
		m.mu.Unlock()
		if attempt >= maxUpdateTries {
			return nil, fmt.Errorf("batchstate: update %s: still changing after %d tries", id, attempt)
		}
		if _, err := backoff(ctx, attempt); err != nil {
			return nil, fmt.Errorf("batchstate: update %s: %w", id, err)
		}
	}
}

// Record implements Store.
func (m *Memory) Record(ctx context.Context, id string, results []Result) (Counts, error) {
	if err := checkResults(id, results); err != nil {
		return Counts{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.get(id, m.now())
	if e == nil {
		return Counts{}, fmt.Errorf("batchstate: record %s: %w", id, ErrNotFound)
	}
	if !e.status.Accepting() {
		return e.counts, nil
	}
	if e.results == nil {
		e.results = make(map[string]string, len(results))
	}
	for _, r := range results {
		if _, ok := e.results[r.CustomID]; ok {
			continue
		}
		e.results[r.CustomID] = resultValue(r)
		switch r.Kind {
		case Output:
			e.counts.Completed++
		case Error:
			e.counts.Failed++
		case Skipped:
			e.counts.Skipped++
		}
	}
	return e.counts, nil
}

// Recorded implements Store.
func (m *Memory) Recorded(ctx context.Context, id string, customIDs []string) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.get(id, m.now())
	if e == nil {
		return nil, fmt.Errorf("batchstate: recorded %s: %w", id, ErrNotFound)
	}
	out := make([]bool, len(customIDs))
	for i, c := range customIDs {
		_, out[i] = e.results[c]
	}
	return out, nil
}

// Results implements Store. It calls fn without the store's lock, on the results recorded
// when it was called.
func (m *Memory) Results(ctx context.Context, id string, fn func(Result) error) error {
	m.mu.Lock()
	e := m.get(id, m.now())
	if e == nil {
		m.mu.Unlock()
		return fmt.Errorf("batchstate: results %s: %w", id, ErrNotFound)
	}
	ids := make([]string, 0, len(e.results))
	vals := make([]string, 0, len(e.results))
	for c, v := range e.results {
		ids = append(ids, c)
		vals = append(vals, v)
	}
	m.mu.Unlock()

	var line []byte
	for i, c := range ids {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("batchstate: results %s: %w", id, err)
		}
		v := vals[i]
		line = append(line[:0], v[1:]...) // a copy: fn must not reach the stored bytes
		if err := fn(Result{CustomID: c, Kind: ResultKind(v[0]), Line: line}); err != nil {
			return err
		}
	}
	return nil
}

// DropResults implements Store.
func (m *Memory) DropResults(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.get(id, m.now())
	if e == nil {
		return fmt.Errorf("batchstate: drop results %s: %w", id, ErrNotFound)
	}
	e.results = nil
	return nil
}

// Active implements Store. The ids are in ascending order (oldest first).
func (m *Memory) Active(ctx context.Context) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, id := range m.order {
		if !m.batches[id].status.Terminal() { // expiring batches are terminal
			out = append(out, id)
		}
	}
	return out, nil
}
