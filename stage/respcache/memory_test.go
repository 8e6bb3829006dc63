package respcache_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/stage/respcache"
	"github.com/infergate/infergate/stage/respcache/respcachetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is a fake clock, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestMemoryContract(t *testing.T) {
	t.Parallel()
	respcachetest.Run(t, func(_ *testing.T, ttl time.Duration) respcachetest.Harness {
		clk := newClock()
		return respcachetest.Harness{Store: respcache.NewMemory(respcache.MemoryOptions{TTL: ttl, Now: clk.Now}), Advance: clk.Add}
	})
}

var bg = context.Background()

func mustPut(t *testing.T, s respcache.Store, key string, resp string) {
	t.Helper()
	require.NoError(t, s.Put(bg, respcache.Entry{Key: key, Partition: "p", Vector: respcachetest.Vec(float64(len(key))), Response: []byte(resp)}))
}

func has(s respcache.Store, key string) bool {
	b, _ := s.Get(bg, key)
	return b != nil
}

// Beyond MaxEntries or MaxBytes, the least recently used entries go (a Get counts as a use),
// from the vector index too.
func TestMemoryEviction(t *testing.T) {
	t.Parallel()
	m := respcache.NewMemory(respcache.MemoryOptions{MaxEntries: 3})
	for _, k := range []string{"a", "bb", "ccc"} {
		mustPut(t, m, k, "x")
	}
	require.True(t, has(m, "a")) // a is now the most recently used
	mustPut(t, m, "dddd", "x")
	assert.False(t, has(m, "bb"), "the least recently used went")
	assert.True(t, has(m, "a"))
	assert.True(t, has(m, "ccc"))
	assert.True(t, has(m, "dddd"))
	match, err := m.Nearest(bg, "p", respcachetest.Vec(2), 0.999)
	require.NoError(t, err)
	assert.Nil(t, match.Response, "its vector went with it")
	st := m.Stats()
	assert.EqualValues(t, 3, st.Entries)
	assert.EqualValues(t, 1, st.Evictions)

	// Bytes: each entry below costs its 1000-byte response plus bookkeeping.
	resp := string(make([]byte, 1000))
	one := respcache.Entry{Key: "k0", Partition: "p", Vector: respcachetest.Vec(0), Response: []byte(resp)}
	size := int64(len(one.Key)+len(one.Partition)+4*len(one.Vector)+len(resp)) + 160
	m = respcache.NewMemory(respcache.MemoryOptions{MaxBytes: 3 * size})
	for i := range 5 {
		mustPut(t, m, fmt.Sprintf("k%d", i), resp)
	}
	assert.EqualValues(t, 3, m.Stats().Entries)
	assert.EqualValues(t, 3*size, m.Stats().Bytes)
	assert.False(t, has(m, "k0"))
	assert.False(t, has(m, "k1"))
	assert.True(t, has(m, "k4"))
	assert.ErrorIs(t, m.Put(bg, respcache.Entry{Key: "big", Response: make([]byte, 4*size)}), respcache.ErrTooLarge)
	assert.True(t, has(m, "k2"), "a refused entry evicts nothing")

	_, err = m.Flush(bg)
	require.NoError(t, err)
	assert.Equal(t, respcache.Stats{Evictions: 2}, m.Stats())
}

// Expired entries are swept by the next Put, oldest first, so a store nobody reads still shrinks.
func TestMemorySweep(t *testing.T) {
	t.Parallel()
	clk := newClock()
	m := respcache.NewMemory(respcache.MemoryOptions{TTL: time.Minute, Now: clk.Now})
	for i := range 10 {
		mustPut(t, m, fmt.Sprintf("k%d", i), "x")
		clk.Add(time.Second)
	}
	clk.Add(time.Minute - 5*time.Second) // k0..k5 expired
	mustPut(t, m, "new", "x")
	assert.EqualValues(t, 5, m.Stats().Entries, "k6..k9 and new")
	assert.Zero(t, m.Stats().Evictions, "expiry is no eviction")
}

// Vectors are inserted outside the store's lock; entries evicted, replaced or expired while
// theirs is being inserted must not leave it behind in the index (a search would find a vector
// with no entry, and miss the entry that should match). Puts into a small store from many
// goroutines, with searches alongside, end with the index holding exactly the entries' vectors.
func TestMemoryIndexInStepWithEntries(t *testing.T) {
	t.Parallel()
	m := respcache.NewMemory(respcache.MemoryOptions{MaxEntries: 40})
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 300 {
				v := []float32{float32(r.NormFloat64()), float32(r.NormFloat64()), float32(r.NormFloat64()), 1}
				part := fmt.Sprint("p", i%4)
				key := fmt.Sprint("k", r.IntN(120)) // some keys are put again: replacements
				if err := m.Put(ctx, respcache.Entry{Key: key, Partition: part, Vector: normalized(v), Response: []byte("x")}); err != nil {
					t.Error(err)
					return
				}
				if _, err := m.Nearest(ctx, part, normalized(v), 0.5); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	vectors, counted, entries := m.IndexCounts()
	assert.Equal(t, entries, vectors, "vectors in the index")
	assert.Equal(t, entries, counted, "vectors counted in")
	assert.LessOrEqual(t, entries, 40)
}

func normalized(v []float32) []float32 {
	var s float64
	for _, f := range v {
		s += float64(f) * float64(f)
	}
	n := float32(math.Sqrt(s))
	for i := range v {
		v[i] /= n
	}
	return v
}
