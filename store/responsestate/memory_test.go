package responsestate_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/store/responsestate"
	"github.com/infergate/infergate/store/responsestate/responsestatetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMemoryContract runs responsestatetest's suite against Memory; every replica is the same
// store.
func TestMemoryContract(t *testing.T) {
	responsestatetest.Run(t, func(_ *testing.T, opts responsestatetest.Options) func() responsestate.Store {
		s := responsestate.NewMemory(responsestate.MemoryOptions{TTL: opts.TTL, MaxRecordBytes: opts.MaxRecordBytes})
		return func() responsestate.Store { return s }
	})
}

// clock is a settable time for a Memory store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// record is a record of owner "o" made at, whose Size is exactly size.
func record(id string, at time.Time, size int) *responsestate.Record {
	r := &responsestate.Record{ID: id, Owner: "o", Model: "m", CreatedAt: at}
	r.Response = json.RawMessage(`"` + strings.Repeat("x", size-r.Size()-2) + `"`)
	return r
}

func held(t *testing.T, s responsestate.Store, ids ...string) []string {
	t.Helper()
	var out []string
	for _, id := range ids {
		_, err := s.Get(context.Background(), "o", id)
		if err == nil {
			out = append(out, id)
		} else {
			require.ErrorIs(t, err, responsestate.ErrNotFound)
		}
	}
	return out
}

// A Put that would take the total past MaxBytes evicts the oldest records (by CreatedAt) until
// the new one fits; a Put that replaces a record counts the new size instead of the old.
func TestMemoryMaxBytesEvictsOldest(t *testing.T) {
	c := &clock{t: time.Unix(1700000000, 0)}
	s := responsestate.NewMemory(responsestate.MemoryOptions{MaxBytes: 3000, Now: c.now})
	ctx := context.Background()
	t0 := c.now()
	all := []string{"a", "b", "c", "d", "e", "f"}
	for i, id := range all[:3] {
		require.NoError(t, s.Put(ctx, record(id, t0.Add(time.Duration(i)*time.Second), 1000)))
	}
	assert.Equal(t, all[:3], held(t, s, all...))
	for range 5 { // replacing b: its old size is no longer counted
		require.NoError(t, s.Put(ctx, record("b", t0.Add(time.Second), 1000)))
	}
	assert.Equal(t, all[:3], held(t, s, all...), "replacing frees what it replaces")

	require.NoError(t, s.Put(ctx, record("d", t0.Add(3*time.Second), 1000)))
	assert.Equal(t, []string{"b", "c", "d"}, held(t, s, all...), "the oldest went")

	require.NoError(t, s.Put(ctx, record("e", t0.Add(4*time.Second), 2000)))
	assert.Equal(t, []string{"d", "e"}, held(t, s, all...), "as many of the oldest as it takes")

	// Oldest by CreatedAt, not by Put: a record made earlier but put later goes first.
	require.NoError(t, s.Put(ctx, record("f", t0.Add(-time.Second), 500)))
	assert.Equal(t, []string{"e", "f"}, held(t, s, all...))
	require.NoError(t, s.Put(ctx, record("a", t0.Add(5*time.Second), 1000)))
	assert.Equal(t, []string{"a", "e"}, held(t, s, all...), "f, put after e, went first")

	require.ErrorIs(t, s.Put(ctx, record("big", t0, 3001)), responsestate.ErrTooLarge,
		"a record over MaxBytes could never be held")
	assert.Equal(t, []string{"a", "e"}, held(t, s, all...), "and evicts nothing")
	require.NoError(t, s.Put(ctx, record("full", t0.Add(6*time.Second), 3000)))
	assert.Equal(t, []string{"full"}, held(t, s, append(all, "full")...))
}

// Records past their TTL go before live ones, and free their bytes at the next Put even when
// nobody asks for them.
func TestMemoryExpiry(t *testing.T) {
	c := &clock{t: time.Unix(1700000000, 0)}
	s := responsestate.NewMemory(responsestate.MemoryOptions{TTL: time.Hour, MaxBytes: 3000, Now: c.now})
	ctx := context.Background()
	t0 := c.now()
	require.NoError(t, s.Put(ctx, record("a", t0, 1000)))
	require.NoError(t, s.Put(ctx, record("b", t0.Add(30*time.Minute), 1000)))
	c.add(time.Hour - time.Millisecond)
	assert.Equal(t, []string{"a", "b"}, held(t, s, "a", "b"), "kept for the TTL from CreatedAt")
	c.add(time.Millisecond)
	require.NoError(t, s.Put(ctx, record("c", c.now(), 2000)))
	assert.Equal(t, []string{"b", "c"}, held(t, s, "a", "b", "c"), "the expired one made room")
	c.add(30 * time.Minute)
	assert.Equal(t, []string{"c"}, held(t, s, "a", "b", "c"))

	d := responsestate.NewMemory(responsestate.MemoryOptions{Now: c.now})
	require.NoError(t, d.Put(ctx, record("x", c.now(), 100)))
	c.add(responsestate.DefaultTTL - time.Millisecond)
	assert.Equal(t, []string{"x"}, held(t, d, "x"), "default TTL: 30 days")
	c.add(time.Millisecond)
	assert.Empty(t, held(t, d, "x"))
}

// Memory keeps the record it is given: Get returns that very pointer.
func TestMemoryKeepsTheRecord(t *testing.T) {
	s := responsestate.NewMemory(responsestate.MemoryOptions{})
	r := record("a", time.Now(), 100)
	require.NoError(t, s.Put(context.Background(), r))
	got, err := s.Get(context.Background(), "o", "a")
	require.NoError(t, err)
	assert.Same(t, r, got)
}
