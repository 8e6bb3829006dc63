// Package respcachetest is the contract every respcache.Store passes: entries found by key and
// by nearest vector within their partition only (with their words), replaced by a later Put,
// gone after their TTL and after Flush; for a store shared between processes, an entry put
// through one store is found through another within a second, including one made after the
// entry was put.
// respcache.Memory and respcache.Redis run it in their package's tests:
//
//	func TestContract(t *testing.T) {
//		respcachetest.Run(t, func(t *testing.T, ttl time.Duration) respcachetest.Harness {
//			clk := newClock()
//			return respcachetest.Harness{Store: respcache.NewMemory(respcache.MemoryOptions{TTL: ttl, Now: clk.Now}), Advance: clk.Add}
//		})
//	}
package respcachetest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/stage/respcache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Harness is one store under the contract.
type Harness struct {
	// Store is the implementation under test, empty.
	Store respcache.Store
	// Advance lets at least d pass on the store's clock: a fake clock moves at once, a store
	// on a real clock (Redis's TTLs) sleeps.
	Advance func(d time.Duration)
	// Peer, for a store shared between processes, returns another store of the same data, as
	// another replica has (nil: not shared). It may be called at any point of a case.
	Peer func() respcache.Store
}

// Factory builds a fresh Harness whose entries live ttl. Anything to release when the test ends
// is released through t.Cleanup.
type Factory func(t *testing.T, ttl time.Duration) Harness

// TTL is the entries' lifetime in the cases, short enough for a store on a real clock.
const TTL = 400 * time.Millisecond

// Converge is how long a shared store may take to show another's Put.
const Converge = time.Second

// Run runs every case of the contract against stores from f, one subtest per case.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := f(t, TTL)
			require.NotNil(t, h.Store, "the harness has no Store")
			require.NotNil(t, h.Advance, "the harness has no Advance")
			if c.shared && h.Peer == nil {
				t.Skip("the store is not shared")
			}
			c.run(t, &h)
		})
	}
}

var cases = []struct {
	name   string
	shared bool
	run    func(t *testing.T, h *Harness)
}{
	{name: "GetPut", run: getPut},
	{name: "NearestWithinPartition", run: nearestWithinPartition},
	{name: "Replace", run: replace},
	{name: "Expiry", run: expiry},
	{name: "Flush", run: flush},
	{name: "Concurrent", run: concurrent},
	{name: "PeerSeesPut", shared: true, run: peerSeesPut},
	{name: "LateStoreLoads", shared: true, run: lateStoreLoads},
	{name: "PeerSeesFlush", shared: true, run: peerSeesFlush},
}

var ctx = context.Background()

// Vec is a unit vector of dimension 8 pointing at angle a (radians) in the first two
// dimensions: the cosine of Vec(a) and Vec(b) is cos(a-b).
func Vec(a float64) []float32 {
	v := make([]float32, 8)
	v[0], v[1] = float32(math.Cos(a)), float32(math.Sin(a))
	return v
}

// put stores resp under key, with words "words of " + resp.
func put(t *testing.T, s respcache.Store, key, partition string, v []float32, resp string) {
	t.Helper()
	require.NoError(t, s.Put(ctx, respcache.Entry{Key: key, Partition: partition, Vector: v, Words: "words of " + resp,
		Response: []byte(resp)}))
}

func get(t *testing.T, s respcache.Store, key string) string {
	t.Helper()
	b, err := s.Get(ctx, key)
	require.NoError(t, err)
	return string(b)
}

func nearest(t *testing.T, s respcache.Store, partition string, v []float32, min float32) respcache.Match {
	t.Helper()
	m, err := s.Nearest(ctx, partition, v, min)
	require.NoError(t, err)
	return m
}

func getPut(t *testing.T, h *Harness) {
	s := h.Store
	assert.Empty(t, get(t, s, "k1"), "an empty store")
	put(t, s, "k1", "", nil, `{"a":1}`)
	put(t, s, "k2", "", nil, `{"a":2}`)
	assert.Equal(t, `{"a":1}`, get(t, s, "k1"))
	assert.Equal(t, `{"a":2}`, get(t, s, "k2"))
	assert.Empty(t, get(t, s, "k3"))
	assert.Equal(t, respcache.Match{}, nearest(t, s, "", Vec(0), 0.5), "entries without vectors are not searched")
}

func nearestWithinPartition(t *testing.T, h *Harness) {
	s := h.Store
	put(t, s, "a", "p1", Vec(0), "A")
	put(t, s, "b", "p1", Vec(1), "B")
	put(t, s, "c", "p2", Vec(0.1), "C")

	m := nearest(t, s, "p1", Vec(0.1), 0.9)
	assert.Equal(t, "a", m.Key)
	assert.Equal(t, "A", string(m.Response))
	assert.Equal(t, "words of A", m.Words, "the words come with the response")
	assert.InDelta(t, math.Cos(0.1), m.Similarity, 1e-5)
	m = nearest(t, s, "p1", Vec(0.9), 0.9)
	assert.Equal(t, "B", string(m.Response), "the nearest one")
	m = nearest(t, s, "p2", Vec(0), 0.9)
	assert.Equal(t, "C", string(m.Response), "only within the partition")

	m = nearest(t, s, "p1", Vec(0.5), 0.95)
	assert.Nil(t, m.Response, "below the minimum")
	assert.Empty(t, m.Words, "below the minimum")
	assert.InDelta(t, math.Cos(0.5), m.Similarity, 1e-5, "the nearest similarity, for the metrics")
	assert.Equal(t, respcache.Match{}, nearest(t, s, "p3", Vec(0), 0), "an unknown partition")
	assert.Equal(t, respcache.Match{}, nearest(t, s, "p1", []float32{1, 0, 0}, 0), "another dimension")
	assert.Equal(t, "A", get(t, s, "a"), "entries with vectors are found by key too")

	require.NoError(t, s.Put(ctx, respcache.Entry{Key: "d", Partition: "p4", Vector: Vec(0), Response: []byte("D")}))
	m = nearest(t, s, "p4", Vec(0), 0.9)
	assert.Equal(t, "D", string(m.Response))
	assert.Empty(t, m.Words, "an entry without words")
}

func replace(t *testing.T, h *Harness) {
	s := h.Store
	put(t, s, "a", "p", Vec(0), "old")
	put(t, s, "a", "p", Vec(2), "new")
	assert.Equal(t, "new", get(t, s, "a"))
	m := nearest(t, s, "p", Vec(0), 0.99)
	assert.Nil(t, m.Response, "the old vector is gone")
	m = nearest(t, s, "p", Vec(2), 0.99)
	assert.Equal(t, "new", string(m.Response))
	assert.Equal(t, "words of new", m.Words)
	put(t, s, "a", "q", Vec(0), "moved")
	assert.Equal(t, "moved", string(nearest(t, s, "q", Vec(0), 0.99).Response))
	assert.Nil(t, nearest(t, s, "p", Vec(2), 0.99).Response, "nor in its old partition")
}

func expiry(t *testing.T, h *Harness) {
	s := h.Store
	put(t, s, "a", "p", Vec(0), "A")
	h.Advance(TTL / 2)
	put(t, s, "b", "p", Vec(1), "B")
	assert.Equal(t, "A", get(t, s, "a"))
	h.Advance(TTL/2 + TTL/8)
	assert.Empty(t, get(t, s, "a"), "expired")
	assert.Nil(t, nearest(t, s, "p", Vec(0), 0.99).Response, "expired")
	assert.Equal(t, "B", get(t, s, "b"), "not yet")
	h.Advance(TTL)
	assert.Empty(t, get(t, s, "b"))
	assert.Nil(t, nearest(t, s, "p", Vec(1), 0.99).Response)
	put(t, s, "c", "p", Vec(0), "C") // the expired ones make room
	assert.Equal(t, "C", string(nearest(t, s, "p", Vec(0), 0.99).Response))
}

func flush(t *testing.T, h *Harness) {
	s := h.Store
	put(t, s, "a", "p", Vec(0), "A")
	put(t, s, "b", "", nil, "B")
	put(t, s, "c", "q", Vec(1), "C")
	n, err := s.Flush(ctx)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	for _, k := range []string{"a", "b", "c"} {
		assert.Empty(t, get(t, s, k))
	}
	assert.Nil(t, nearest(t, s, "p", Vec(0), 0).Response)
	put(t, s, "a", "p", Vec(0), "A2")
	assert.Equal(t, "A2", get(t, s, "a"), "usable after a flush")
	assert.Equal(t, "A2", string(nearest(t, s, "p", Vec(0), 0.99).Response))
}

// Puts, Gets and Nearests at once never return a torn or foreign response.
func concurrent(t *testing.T, h *Harness) {
	s := h.Store
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				key := fmt.Sprintf("k%d", i%5)
				want := "resp-" + key
				if err := s.Put(ctx, respcache.Entry{Key: key, Partition: "p", Vector: Vec(float64(i % 5)), Response: []byte(want)}); err != nil {
					t.Errorf("put: %v", err)
					return
				}
				if b, err := s.Get(ctx, fmt.Sprintf("k%d", (i+w)%5)); err != nil || b != nil && string(b) != fmt.Sprintf("resp-k%d", (i+w)%5) {
					t.Errorf("get: %q, %v", b, err)
					return
				}
				m, err := s.Nearest(ctx, "p", Vec(float64(w%5)), 0.999)
				if err != nil || m.Response != nil && string(m.Response) != "resp-"+m.Key {
					t.Errorf("nearest: %+v, %v", m, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// eventually polls f until it holds or Converge passed.
func eventually(t *testing.T, f func() bool, msg string) {
	t.Helper()
	require.Eventually(t, f, Converge, 5*time.Millisecond, msg)
}

func peerSeesPut(t *testing.T, h *Harness) {
	b := h.Peer()
	put(t, h.Store, "a", "p", Vec(0), "A")
	eventually(t, func() bool { x, err := b.Get(ctx, "a"); return err == nil && string(x) == "A" }, "Get through the peer")
	eventually(t, func() bool {
		m, err := b.Nearest(ctx, "p", Vec(0.05), 0.99)
		return err == nil && string(m.Response) == "A" && m.Words == "words of A"
	}, "Nearest through the peer, with the words")
	put(t, b, "b", "p", Vec(1), "B")
	eventually(t, func() bool {
		m, err := h.Store.Nearest(ctx, "p", Vec(1), 0.99)
		return err == nil && string(m.Response) == "B"
	}, "and back")
}

func lateStoreLoads(t *testing.T, h *Harness) {
	put(t, h.Store, "a", "p", Vec(0), "A")
	put(t, h.Store, "b", "q", Vec(1), "B")
	put(t, h.Store, "c", "", nil, "C")
	late := h.Peer()
	eventually(t, func() bool {
		m, err := late.Nearest(ctx, "p", Vec(0), 0.99)
		return err == nil && string(m.Response) == "A" && m.Words == "words of A"
	}, "the late store indexed the entries put before it")
	eventually(t, func() bool {
		m, err := late.Nearest(ctx, "q", Vec(1), 0.99)
		return err == nil && string(m.Response) == "B"
	}, "every one of them")
	assert.Equal(t, "C", get(t, late, "c"))
}

func peerSeesFlush(t *testing.T, h *Harness) {
	b := h.Peer()
	put(t, h.Store, "a", "p", Vec(0), "A")
	eventually(t, func() bool { m, _ := b.Nearest(ctx, "p", Vec(0), 0.99); return m.Response != nil }, "the peer has it")
	_, err := h.Store.Flush(ctx)
	require.NoError(t, err)
	assert.Empty(t, get(t, b, "a"))
	eventually(t, func() bool { m, _ := b.Nearest(ctx, "p", Vec(0), 0); return m.Similarity == 0 }, "the peer forgot its vector")
}
