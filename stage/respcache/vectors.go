package respcache

import (
	"math"
	"sync"
)

// vectors is a vector index per semantic partition, for Memory and for Redis's local mirror:
// a search only ever looks inside one partition (same model, owner, system prompt, earlier
// turns, tools and parameters), so an answer is never matched across those. A partition's index
// is made by its first vector, whose length fixes the dimension; vectors of another length are
// not indexed (an embedder that changed). An emptied partition is dropped.
type vectors struct {
	mu    sync.RWMutex
	parts map[string]*partIndex
}

type partIndex struct {
	idx *vecIndex
	dim int
	n   int // vectors in idx; the partition is dropped at 0
}

func newVectors() *vectors { return &vectors{parts: map[string]*partIndex{}} }

// indexSlot is an entry's place in its partition's index. The store takes it under its own
// lock (reserve) and fills it after releasing that lock (fill: an insert takes a millisecond
// or more in a large index, which the store's other lookups must not wait for); an entry
// dropped meanwhile has its vector deleted then. adding and dropped are guarded by the store's
// lock.
type indexSlot struct {
	p               *partIndex
	adding, dropped bool
}

// reserve counts a vector for partition in (making the partition's index with its first) and
// returns its slot, or nil when v cannot be indexed there (empty, or another dimension). Under
// the store's lock.
func (s *vectors) reserve(partition string, v []float32) *indexSlot {
	if len(v) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[partition]
	if p == nil {
		p = &partIndex{idx: newIndex(len(v)), dim: len(v)}
		s.parts[partition] = p
	}
	if len(v) != p.dim {
		return nil
	}
	p.n++ // counted before it is in: a drop meanwhile does not remove the partition under it
	return &indexSlot{p: p, adding: true}
}

// fill puts v into the slot's index under id, outside the store's lock mu, then ends the
// insert under mu: the vector of an entry dropped meanwhile is deleted.
func (sl *indexSlot) fill(mu sync.Locker, id uint64, v []float32) {
	sl.p.idx.Add(id, v)
	mu.Lock()
	defer mu.Unlock()
	sl.adding = false
	if sl.dropped {
		sl.p.idx.Delete(id)
	}
}

// drop removes id's vector (its slot sl, in partition), or has fill remove it if the insert
// has not ended. Under the store's lock.
func (s *vectors) drop(sl *indexSlot, id uint64, partition string) {
	s.mu.Lock()
	if sl.p.n--; sl.p.n <= 0 && s.parts[partition] == sl.p {
		delete(s.parts, partition)
	}
	s.mu.Unlock()
	if sl.adding {
		sl.dropped = true
		return
	}
	sl.p.idx.Delete(id)
}

// search returns the id of partition's vector nearest to v.
func (s *vectors) search(partition string, v []float32) (id uint64, sim float32, ok bool) {
	s.mu.RLock()
	p := s.parts[partition]
	s.mu.RUnlock()
	if p == nil || len(v) != p.dim {
		return 0, 0, false
	}
	return p.idx.Search(v)
}

func (s *vectors) clear() {
	s.mu.Lock()
	s.parts = map[string]*partIndex{}
	s.mu.Unlock()
}

// normalize scales v to unit length in place (a zero vector stays zero) and returns it, or nil
// when v holds a NaN or an infinity, which no similarity could be computed for.
func normalize(v []float32) []float32 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if math.IsNaN(ss) || math.IsInf(ss, 0) {
		return nil
	}
	if ss == 0 {
		return v
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
	return v
}
