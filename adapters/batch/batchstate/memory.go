package batchstate

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Memory is the in-process Store: batches live in this process only. It keeps batches the way
// Redis does (JSON, a version, counts apart), so both behave alike. It forgets nothing by
// itself: terminal batches stay until the process ends (their results go with DropResults).
type Memory struct {
	mu      sync.Mutex
	batches map[string]*memBatch
	order   []string // every id, ascending (oldest first)
}

type memBatch struct {
	data    []byte // encodeBatch's form
	status  Status
	version uint64
	counts  Counts
	results map[string]string // custom_id -> resultValue
}

// NewMemory returns an empty in-process store.
func NewMemory() *Memory {
	return &Memory{batches: map[string]*memBatch{}}
}

var _ Store = (*Memory)(nil)

// Create implements Store.
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
	if _, ok := m.batches[b.ID]; ok {
		return fmt.Errorf("batchstate: create %s: %w", b.ID, ErrExists)
	}
	m.batches[b.ID] = &memBatch{data: data, status: b.Status, version: 1, counts: Counts{Total: b.Counts.Total}}
	i, _ := slices.BinarySearch(m.order, b.ID)
	m.order = slices.Insert(m.order, i, b.ID)
	return nil
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, id string) (*Batch, error) {
	m.mu.Lock()
	e := m.batches[id]
	if e == nil {
		m.mu.Unlock()
		return nil, fmt.Errorf("batchstate: get %s: %w", id, ErrNotFound)
	}
	data, counts := e.data, e.counts
	m.mu.Unlock()
	return decodeBatch(id, data, counts)
}

// List implements Store.
func (m *Memory) List(ctx context.Context, after string, limit int) ([]*Batch, bool, error) {
	type item struct {
		id     string
		data   []byte
		counts Counts
	}
	m.mu.Lock()
	end := len(m.order)
	if after != "" {
		end, _ = slices.BinarySearch(m.order, after) // m.order[:end] sort before after
	}
	n := min(max(limit, 0), end)
	items := make([]item, n)
	for i := range n {
		id := m.order[end-1-i]
		e := m.batches[id]
		items[i] = item{id, e.data, e.counts}
	}
	m.mu.Unlock()

	out := make([]*Batch, n)
	for i, it := range items {
		b, err := decodeBatch(it.id, it.data, it.counts)
		if err != nil {
			return nil, false, err
		}
		out[i] = b
	}
	return out, end > n, nil
}

// Update implements Store. fn runs without the store's lock (it may call the store), so the
// write is a compare-and-set on the batch's version, as in Redis.
func (m *Memory) Update(ctx context.Context, id string, fn func(*Batch) error) (*Batch, error) {
	for attempt := 1; ; attempt++ {
		m.mu.Lock()
		e := m.batches[id]
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
		if e.version == version {
			e.data, e.status, e.version = enc, next.Status, version+1
			e.counts.Total = next.Counts.Total
			next.Counts = e.counts
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
	e := m.batches[id]
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
	e := m.batches[id]
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
	e := m.batches[id]
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
	e := m.batches[id]
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
		if !m.batches[id].status.Terminal() {
			out = append(out, id)
		}
	}
	return out, nil
}
