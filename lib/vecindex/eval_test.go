package vecindex

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cpu returns this process's user+system CPU time: on a shared machine it
// is steadier than wall time for single-threaded work.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestEval prints recall, latency, build time and memory for the package
// doc; it runs only with VECINDEX_EVAL=n (VECINDEX_DATA=lexical|random,
// VECINDEX_DIM for random; M, EFC, EFS override the defaults).
func TestEval(t *testing.T) {
	env := func(k string) int { v, _ := strconv.Atoi(os.Getenv(k)); return v }
	n := env("VECINDEX_EVAL")
	if n == 0 {
		t.Skip("set VECINDEX_EVAL=n to run")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var vecs [][]float32
	type qset struct {
		name string
		qs   [][]float32
	}
	var sets []qset
	if os.Getenv("VECINDEX_DATA") == "lexical" {
		texts := questions(r, n+300)
		all := lexicalVecs(texts)
		vecs = all[:n]
		var near []string
		for range 300 {
			near = append(near, reword(r, texts[r.IntN(n)]))
		}
		sets = []qset{{"reworded stored prompt", lexicalVecs(near)}, {"unseen prompt", all[n:]}}
	} else {
		dim := max(env("VECINDEX_DIM"), 1)
		if env("VECINDEX_DIM") == 0 {
			dim = 384
		}
		vecs = unitVecs(r, n, dim)
		var q2, q4 [][]float32
		for range 300 {
			q2 = append(q2, perturb(r, vecs[r.IntN(n)], 0.02))
			q4 = append(q4, perturb(r, vecs[r.IntN(n)], 0.04))
		}
		sets = []qset{{"perturbed 0.02", q2}, {"perturbed 0.04", q4}, {"uniform random", unitVecs(r, 300, dim)}}
	}
	dim := len(vecs[0])
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	idx := New(Options{Dim: dim, ExactBelow: -1, seed: 7, M: env("M"), EfConstruction: env("EFC"), EfSearch: env("EFS")})
	t0 := cpu()
	live := map[uint64][]float32{}
	for i, v := range vecs {
		idx.Add(uint64(i), v)
		live[uint64(i)] = v
	}
	build := cpu() - t0
	runtime.GC()
	runtime.ReadMemStats(&m1)
	fmt.Printf("%s n=%d dim=%d M=%d efC=%d: build %v CPU (%.0f us/add), %.0f B/entry (vector %d B)\n",
		os.Getenv("VECINDEX_DATA"), n, dim, idx.m, idx.efC, build.Round(time.Millisecond),
		float64(build.Microseconds())/float64(n), float64(m1.HeapAlloc-m0.HeapAlloc)/float64(n), dim*4)
	efs := []int{idx.efS}
	if env("EFS") == 0 {
		efs = []int{16, 32, 64}
	}
	for _, ef := range efs {
		idx.efS = ef
		for _, s := range sets {
			t0 = cpu()
			for _, q := range s.qs {
				idx.Search(q)
			}
			hn := cpu() - t0
			t0 = cpu()
			for _, q := range s.qs {
				idx.flat(q)
			}
			fl := cpu() - t0
			r95, n95 := recallAt(idx, live, s.qs, 0.95)
			fmt.Printf("  efS=%d %-24s recall@1 among the %d queries with a match >= 0.95: %.3f\n", ef, s.name, n95, r95)
			fmt.Printf("  efS=%d %-24s recall@1 %.3f, hnsw %.0f us/query, flat %.0f us/query CPU (%.1fx)\n", ef, s.name, recall(idx, live, s.qs),
				float64(hn.Microseconds())/float64(len(s.qs)), float64(fl.Microseconds())/float64(len(s.qs)), float64(fl)/float64(hn))
		}
	}
}
