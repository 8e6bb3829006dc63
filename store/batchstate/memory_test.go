package batchstate

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func memoryAt(opts ...MemoryOptions) (*Memory, *clock) {
	m := NewMemory(opts...)
	c := &clock{t: time.Unix(1700000000, 0)}
	m.now = c.now
	return m, c
}

func exists(t *testing.T, s Store, id string) bool {
	t.Helper()
	_, err := s.Get(context.Background(), id)
	if err != nil {
		require.ErrorIs(t, err, ErrNotFound)
	}
	return err == nil
}

// Without options a terminal batch stays 30 days, as in Redis; running batches stay for good.
func TestMemoryDefaultTTL(t *testing.T) {
	m, c := memoryAt()
	done := create(t, m, Completed)
	running := create(t, m, InProgress)
	c.add(30*24*time.Hour - time.Millisecond)
	assert.True(t, exists(t, m, done.ID), "kept for 30 days")
	c.add(time.Millisecond)
	assert.False(t, exists(t, m, done.ID), "gone after 30 days")
	c.add(365 * 24 * time.Hour)
	assert.True(t, exists(t, m, running.ID))
}

// The TTL runs from when the batch first became terminal: later updates do not extend it.
func TestMemoryTTLFromFirstTerminal(t *testing.T) {
	m, c := memoryAt(MemoryOptions{TTL: time.Hour})
	b := create(t, m, InProgress)
	c.add(10 * time.Hour) // running time does not count
	setStatus(t, m, b.ID, Completed)
	c.add(40 * time.Minute)
	_, err := m.Update(context.Background(), b.ID, func(x *Batch) error { x.OutputFileID = "file-1"; return nil })
	require.NoError(t, err)
	c.add(20*time.Minute - time.Millisecond)
	assert.True(t, exists(t, m, b.ID))
	c.add(time.Millisecond)
	assert.False(t, exists(t, m, b.ID))
}

// Writes free the expired batches (no goroutine does), at most once per sweepEvery; a batch that
// stopped being terminal, or an expired id created again, is not taken by the expiry it had.
func TestMemorySweep(t *testing.T) {
	const ttl = time.Hour
	m, c := memoryAt(MemoryOptions{TTL: ttl})
	ctx := context.Background()
	old := create(t, m, InProgress)
	_, err := m.Record(ctx, old.ID, results("l", 0, 3, Output))
	require.NoError(t, err)
	setStatus(t, m, old.ID, Cancelled)
	create(t, m, Failed)
	kept := create(t, m, Validating)
	back := create(t, m, Completed)
	setStatus(t, m, back.ID, Finalizing)
	held := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		assert.Len(t, m.order, len(m.batches), "order follows the map")
		return len(m.batches)
	}

	c.add(ttl)
	assert.False(t, exists(t, m, old.ID))
	assert.Equal(t, 4, held(), "reads do not sweep")
	create(t, m, Validating)
	assert.Equal(t, 3, held(), "the first write after the expiry sweeps")
	assert.True(t, exists(t, m, kept.ID))
	assert.True(t, exists(t, m, back.ID), "no longer terminal: not expiring")

	// A sweep comes sweepEvery after the last at the soonest: what expires meanwhile waits.
	create(t, m, Expired)
	c.add(sweepEvery / 2)
	gone := create(t, m, Expired)
	c.add(ttl - sweepEvery/2)
	create(t, m, Validating) // sweeps the first
	assert.Equal(t, 5, held())
	c.add(sweepEvery / 2)
	assert.False(t, exists(t, m, gone.ID))
	create(t, m, Validating)
	assert.Equal(t, 6, held(), "swept less than sweepEvery ago: gone.ID is still held")
	again := newBatch(InProgress)
	again.ID = gone.ID
	require.NoError(t, m.Create(ctx, again), "an expired id is free")
	assert.Equal(t, 6, held(), "the new batch took the expired one's place")
	c.add(sweepEvery / 2)
	create(t, m, Validating)
	assert.True(t, exists(t, m, gone.ID), "the expiry of the batch it replaced does not take it")
	assert.Equal(t, 7, held())

	setStatus(t, m, kept.ID, Completed)
	c.add(ttl)
	create(t, m, Validating)
	assert.False(t, exists(t, m, kept.ID))
	assert.Equal(t, 7, held(), "kept.ID went, one more came")
	page, _, err := m.List(ctx, "", 10)
	require.NoError(t, err)
	assert.Len(t, page, 7, "each listed once")
}
