package vecindex

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// benchSet is an index built once per (data, size) and reused by every
// b.N round, with its queries.
type benchSet struct {
	idx   *Index
	live  map[uint64][]float32
	qs    [][]float32
	build time.Duration
}

var (
	benchMu   sync.Mutex
	benchSets = map[string]*benchSet{}
)

// getBenchSet builds (once) an index of n vectors from data "lexical"
// (lexical embeddings of synthetic prompts, dim 512; queries are reworded
// stored prompts) or "randomD" (random unit vectors of dim D; queries are
// stored vectors plus noise, cosine about 0.93 to their source). The graph
// is always built (ExactBelow off) so both search paths can be timed.
func getBenchSet(data string, n int) *benchSet {
	benchMu.Lock()
	defer benchMu.Unlock()
	key := fmt.Sprint(data, n)
	if s := benchSets[key]; s != nil {
		return s
	}
	r := rand.New(rand.NewPCG(uint64(n), 42))
	var vecs, qs [][]float32
	if data == "lexical" {
		texts := questions(r, n)
		vecs = lexicalVecs(texts)
		var near []string
		for range 256 {
			near = append(near, reword(r, texts[r.IntN(n)]))
		}
		qs = lexicalVecs(near)
	} else {
		var dim int
		fmt.Sscanf(data, "random%d", &dim)
		vecs = unitVecs(r, n, dim)
		for range 256 {
			qs = append(qs, perturb(r, vecs[r.IntN(n)], 0.02))
		}
	}
	s := &benchSet{idx: New(Options{Dim: len(vecs[0]), ExactBelow: -1, seed: 9}), live: map[uint64][]float32{}, qs: qs}
	t0 := time.Now()
	for i, v := range vecs {
		s.idx.Add(uint64(i), v)
		s.live[uint64(i)] = v
	}
	s.build = time.Since(t0)
	benchSets[key] = s
	return s
}

// BenchmarkSearch times a graph search against the exact flat scan (the
// baseline) over the same index and queries, and reports the flat scan's
// cost relative to the graph's (x-flat-cost > 1: the graph is faster),
// recall@1 against the flat scan, and build time per Add. The size where
// x-flat-cost crosses 1 is DefaultExactBelow. 100,000 entries take minutes
// to build here; -bench 'Search/.*/n=[0-9]{3,4}$' skips them.
func BenchmarkSearch(b *testing.B) {
	for _, data := range []string{"lexical", "random384", "random768"} {
		for _, n := range []int{500, 1000, 2000, 4000, 8000, 100000} {
			b.Run(fmt.Sprintf("%s/n=%d", data, n), func(b *testing.B) {
				s := getBenchSet(data, n)
				b.ResetTimer()
				t0 := time.Now()
				for i := range b.N {
					s.idx.Search(s.qs[i%len(s.qs)])
				}
				graph := time.Since(t0)
				b.StopTimer()
				t0 = time.Now()
				for i := range b.N {
					s.idx.flat(s.qs[i%len(s.qs)])
				}
				flat := time.Since(t0)
				b.ReportMetric(float64(flat)/float64(graph), "x-flat-cost")
				b.ReportMetric(recall(s.idx, s.live, s.qs), "recall@1")
				b.ReportMetric(float64(s.build.Microseconds())/float64(n), "build-us/add")
			})
		}
	}
}
