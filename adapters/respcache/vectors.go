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

// add indexes v under id in partition and reports whether it did. The map's lock is held only
// to find the partition and count the vector in: an insert into a large index takes a
// millisecond or more, which searches in other partitions must not wait for.
func (s *vectors) add(id uint64, partition string, v []float32) bool {
	if len(v) == 0 {
		return false
	}
	s.mu.Lock()
	p := s.parts[partition]
	if p == nil {
		p = &partIndex{idx: newIndex(len(v)), dim: len(v)}
		s.parts[partition] = p
	}
	if len(v) != p.dim {
		s.mu.Unlock()
		return false
	}
	p.n++ // counted before it is in: a remove meanwhile does not drop the partition under it
	s.mu.Unlock()
	p.idx.Add(id, v)
	return true
}

// remove drops id, which add indexed in partition.
func (s *vectors) remove(id uint64, partition string) {
	s.mu.Lock()
	p := s.parts[partition]
	if p == nil {
		s.mu.Unlock()
		return
	}
	if p.n--; p.n <= 0 {
		delete(s.parts, partition)
	}
	s.mu.Unlock()
	p.idx.Delete(id)
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
