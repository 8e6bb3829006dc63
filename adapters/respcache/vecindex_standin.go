package respcache

// A stand-in for adapters/llm/vecindex (written by another helper), with its API: an exact
// search over every vector. At merge this file becomes:
//
//	type vecIndex = vecindex.Index
//
//	func newIndex(dim int) *vecIndex { return vecindex.New(vecindex.Options{Dim: dim}) }

import (
	"sync"
)

type vecIndex struct {
	dim  int
	mu   sync.RWMutex
	vecs map[uint64][]float32
}

func newIndex(dim int) *vecIndex { return &vecIndex{dim: dim, vecs: map[uint64][]float32{}} }

// Add indexes v under id (replacing id's vector); a vector of another dimension is ignored.
func (x *vecIndex) Add(id uint64, v []float32) {
	if len(v) != x.dim {
		return
	}
	x.mu.Lock()
	x.vecs[id] = v
	x.mu.Unlock()
}

func (x *vecIndex) Delete(id uint64) {
	x.mu.Lock()
	delete(x.vecs, id)
	x.mu.Unlock()
}

// Search returns the id of the vector with the highest dot product with v (cosine, the vectors
// being L2-normalised).
func (x *vecIndex) Search(v []float32) (id uint64, sim float32, ok bool) {
	if len(v) != x.dim {
		return 0, 0, false
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	for k, w := range x.vecs {
		var d float32
		for i := range w {
			d += w[i] * v[i]
		}
		if !ok || d > sim || d == sim && k < id {
			id, sim, ok = k, d, true
		}
	}
	return id, sim, ok
}

func (x *vecIndex) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.vecs)
}
