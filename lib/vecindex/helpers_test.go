package vecindex

import (
	"math"
	"math/rand/v2"
)

// unitVecs returns n random unit vectors of length dim (uniform on the
// sphere: the hardest case for a graph index, no cluster structure).
func unitVecs(r *rand.Rand, n, dim int) [][]float32 {
	out := make([][]float32, n)
	for i := range out {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32(r.NormFloat64())
		}
		normalize(v)
		out[i] = v
	}
	return out
}

// perturb returns v plus Gaussian noise of scale eps per element,
// renormalised: a near-duplicate query.
func perturb(r *rand.Rand, v []float32, eps float64) []float32 {
	w := make([]float32, len(v))
	for i := range v {
		w[i] = v[i] + float32(eps*r.NormFloat64())
	}
	normalize(w)
	return w
}

func normalize(v []float32) {
	var s float64
	for _, f := range v {
		s += float64(f) * float64(f)
	}
	if s == 0 {
		return
	}
	k := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= k
	}
}

// exact is the reference answer: a scan over the live vectors (dot itself
// is checked against a plain loop in TestDot).
func exact(ids []uint64, vecs [][]float32, q []float32) (uint64, float32) {
	var bid uint64
	best := float32(math.Inf(-1))
	for i, v := range vecs {
		if s := dot(q, v); s > best {
			best, bid = s, ids[i]
		}
	}
	return bid, best
}

// recallAt is recall over the queries whose exact best similarity is at
// least min (the ones a cache with that threshold would hit), and how many
// there were.
func recallAt(idx *Index, live map[uint64][]float32, qs [][]float32, min float32) (float64, int) {
	ids := make([]uint64, 0, len(live))
	vecs := make([][]float32, 0, len(live))
	for id, v := range live {
		ids = append(ids, id)
		vecs = append(vecs, v)
	}
	hit, n := 0, 0
	for _, q := range qs {
		want, ws := exact(ids, vecs, q)
		if ws < min {
			continue
		}
		n++
		got, gs, ok := idx.Search(q)
		if ok && (got == want || math.Abs(float64(gs-ws)) < 1e-6) {
			hit++
		}
	}
	if n == 0 {
		return 1, 0
	}
	return float64(hit) / float64(n), n
}

// recall is the share of queries for which idx returns the exact best, or
// one exactly as similar (ties).
func recall(idx *Index, live map[uint64][]float32, qs [][]float32) float64 {
	ids := make([]uint64, 0, len(live))
	vecs := make([][]float32, 0, len(live))
	for id, v := range live {
		ids = append(ids, id)
		vecs = append(vecs, v)
	}
	hit := 0
	for _, q := range qs {
		want, ws := exact(ids, vecs, q)
		got, gs, ok := idx.Search(q)
		if ok && (got == want || math.Abs(float64(gs-ws)) < 1e-6) {
			hit++
		}
	}
	return float64(hit) / float64(len(qs))
}
