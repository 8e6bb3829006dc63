package vecindex

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"
)

func TestEmpty(t *testing.T) {
	t.Parallel()
	idx := New(Options{Dim: 4})
	if _, _, ok := idx.Search([]float32{1, 0, 0, 0}); ok {
		t.Fatal("Search on an empty index found something")
	}
	idx.Delete(7) // absent: no effect
	if idx.Len() != 0 {
		t.Fatal("Len of an empty index is not 0")
	}
}

func TestDimAndNonFinite(t *testing.T) {
	t.Parallel()
	idx := New(Options{})
	idx.Add(1, []float32{1, 0, 0})                   // adopts dim 3
	idx.Add(2, []float32{0, 1})                      // wrong length: ignored
	idx.Add(3, []float32{float32(math.NaN()), 0, 0}) // ignored
	idx.Add(4, []float32{float32(math.Inf(1)), 0, 0})
	if idx.Len() != 1 {
		t.Fatalf("Len = %d, want 1", idx.Len())
	}
	if _, _, ok := idx.Search([]float32{0, 1}); ok {
		t.Fatal("a query of the wrong length found something")
	}
	if id, sim, ok := idx.Search([]float32{0, 1, 0}); !ok || id != 1 || sim != 0 {
		t.Fatalf("Search = %d %v %v, want 1 0 true", id, sim, ok)
	}
}

// modes runs a test on the flat scan and on the graph.
var modes = []struct {
	name  string
	exact int
}{{"flat", 1 << 30}, {"hnsw", -1}}

func TestReplaceAndDelete(t *testing.T) {
	t.Parallel()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 6))
			idx := New(Options{Dim: 32, ExactBelow: m.exact, seed: 1})
			vs := unitVecs(r, 300, 32)
			for i, v := range vs {
				idx.Add(uint64(i), v)
			}
			// Replace id 7 with a fresh vector: the old one no longer finds it.
			nv := unitVecs(r, 1, 32)[0]
			idx.Add(7, nv)
			if idx.Len() != 300 {
				t.Fatalf("Len after replace = %d, want 300", idx.Len())
			}
			if id, sim, _ := idx.Search(nv); id != 7 || sim < 0.999 {
				t.Fatalf("new vector of 7: got %d (%v)", id, sim)
			}
			if id, sim, _ := idx.Search(vs[7]); id == 7 {
				t.Fatalf("old vector of 7 still finds 7 (sim %v)", sim)
			}
			// Delete every even id; none may ever come back, even for its
			// own vector.
			for i := 0; i < 300; i += 2 {
				idx.Delete(uint64(i))
			}
			if idx.Len() != 150 {
				t.Fatalf("Len after deletes = %d, want 150", idx.Len())
			}
			for i, v := range vs {
				id, _, ok := idx.Search(v)
				if !ok || id%2 == 0 {
					t.Fatalf("query %d: got %d %v, a deleted id", i, id, ok)
				}
				if i%2 == 1 && i != 7 && id != uint64(i) {
					t.Fatalf("query for live %d found %d", i, id)
				}
			}
			// Delete everything, then start again.
			for i := 1; i < 300; i += 2 {
				idx.Delete(uint64(i))
			}
			if _, _, ok := idx.Search(vs[1]); ok || idx.Len() != 0 {
				t.Fatalf("after deleting all: Len %d, found %v", idx.Len(), ok)
			}
			idx.Add(1000, vs[3])
			if id, _, ok := idx.Search(vs[3]); !ok || id != 1000 {
				t.Fatalf("after refill: got %d %v", id, ok)
			}
		})
	}
}

// TestRecall checks recall@1 against exact search on the graph alone
// (ExactBelow off) for near-duplicate queries, the cache's case, after
// building and after churn (deletes and adds reusing slots, as TTL and
// eviction do).
func TestRecall(t *testing.T) {
	t.Parallel()
	n, dim, nq := 3000, 96, 400
	if testing.Short() { // -race makes this slow
		n, dim, nq = 500, 64, 200
	}
	r := rand.New(rand.NewPCG(8, 9))
	idx := New(Options{Dim: dim, ExactBelow: -1, seed: 3})
	live := map[uint64][]float32{}
	next := uint64(0)
	add := func() {
		v := unitVecs(r, 1, dim)[0]
		idx.Add(next, v)
		live[next] = v
		next++
	}
	for range n {
		add()
	}
	queries := func() [][]float32 {
		var qs [][]float32
		for id, v := range live {
			if len(qs) == nq {
				break
			}
			_ = id
			qs = append(qs, perturb(r, v, 0.04)) // cosine ~0.93 to its source
		}
		return qs
	}
	if rc := recall(idx, live, queries()); rc < 0.95 {
		t.Errorf("recall@1 after build = %.3f, want >= 0.95", rc)
	}
	// Churn: replace the whole population twice over.
	for range 2 * n {
		for id := range live {
			idx.Delete(id)
			delete(live, id)
			break
		}
		add()
	}
	if idx.Len() != len(live) {
		t.Fatalf("Len = %d, want %d", idx.Len(), len(live))
	}
	if rc := recall(idx, live, queries()); rc < 0.95 {
		t.Errorf("recall@1 after churn = %.3f, want >= 0.95", rc)
	}
}

// TestCompact shrinks the index so that tombstones outnumber live entries
// and the graph is rebuilt.
func TestCompact(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(10, 11))
	idx := New(Options{Dim: 16, ExactBelow: -1, seed: 2})
	vs := unitVecs(r, 1000, 16)
	for i, v := range vs {
		idx.Add(uint64(i), v)
	}
	for i := 0; i < 900; i++ {
		idx.Delete(uint64(i))
	}
	idx.bg.Wait()
	idx.mu.RLock()
	slots := len(idx.ids)
	idx.mu.RUnlock()
	if slots >= 1000 {
		t.Fatalf("no compaction: %d slots for %d live", slots, idx.Len())
	}
	for i := 900; i < 1000; i++ {
		if id, _, _ := idx.Search(vs[i]); id != uint64(i) {
			t.Fatalf("after compaction: query %d found %d", i, id)
		}
	}
}

// TestConcurrent runs searches, adds and deletes at once (run with -race).
// Each writer owns an id range, so it can check that an id it deleted is
// not returned afterwards.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	const dim = 24
	idx := New(Options{Dim: dim, ExactBelow: 64, seed: 4})
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			base := uint64(w) << 32
			for i := range 400 {
				v := unitVecs(r, 1, dim)[0]
				id := base + uint64(i)
				idx.Add(id, v)
				if i%3 == 0 {
					idx.Delete(id)
					if got, _, ok := idx.Search(v); ok && got == id {
						errs <- "a deleted id was returned"
						return
					}
				}
			}
		})
	}
	for s := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(s), 2))
			for range 1500 {
				idx.Search(unitVecs(r, 1, dim)[0])
				_ = idx.Len()
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	if got := idx.Len(); got != 3*400-3*134 {
		t.Fatalf("Len = %d, want %d", got, 3*400-3*134)
	}
}

// TestRecallLexical checks recall@1 on the vectors the cache stores by
// default: lexical embeddings of synthetic prompts, queried with reworded
// copies of stored prompts (case, punctuation, one typo) and with unseen
// prompts. The 100,000-entry run is slow (a minute or more) and skips
// under -short.
func TestRecallLexical(t *testing.T) {
	t.Parallel()
	small := 3000
	if testing.Short() { // -race makes this slow
		small = 1000
	}
	for _, n := range []int{small, 100000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			if n > small && os.Getenv("INFERGATE_LONG_TESTS") != "1" {
				t.Skip("100,000 entries take minutes to build: INFERGATE_LONG_TESTS=1 runs it")
			}
			r := rand.New(rand.NewPCG(uint64(n), 12))
			texts := questions(r, n+200)
			vecs := lexicalVecs(texts)
			idx := New(Options{Dim: len(vecs[0]), ExactBelow: -1, seed: 5})
			live := map[uint64][]float32{}
			for i, v := range vecs[:n] {
				idx.Add(uint64(i), v)
				live[uint64(i)] = v
			}
			var near []string
			for range 200 {
				near = append(near, reword(r, texts[r.IntN(n)]))
			}
			for name, qs := range map[string][][]float32{"reworded": lexicalVecs(near), "unseen": vecs[n:]} {
				if rc := recall(idx, live, qs); rc < 0.95 {
					t.Errorf("%s prompts: recall@1 %.3f, want >= 0.95", name, rc)
				}
			}
		})
	}
}

// TestRebuildInBackground: a compaction builds the new graph while the old
// one keeps answering; searches, adds and deletes made meanwhile are not
// held up, and the adds and deletes hold in the graph that takes over.
func TestRebuildInBackground(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(20, 21))
	idx := New(Options{Dim: 16, ExactBelow: -1, seed: 3})
	vs := unitVecs(r, 1300, 16)
	for i, v := range vs[:1000] {
		idx.Add(uint64(i), v)
	}
	built, release := make(chan struct{}), make(chan struct{})
	idx.beforeSwap = func() { close(built); <-release }
	for i := 0; i < 600; i++ {
		idx.Delete(uint64(i)) // the 501st delete starts the rebuild
	}
	select { // the new graph is built and waits to be swapped in
	case <-built:
	case <-time.After(time.Minute):
		t.Fatal("no rebuild in the background")
	}
	// Meanwhile, under no lock of the rebuild's: search, add, replace, delete.
	for i := 600; i < 1000; i++ {
		if id, _, ok := idx.Search(vs[i]); !ok || id != uint64(i) {
			t.Fatalf("during the rebuild: query %d found %d, %v", i, id, ok)
		}
	}
	for i := 1000; i < 1300; i++ {
		idx.Add(uint64(i), vs[i])
	}
	idx.Add(700, vs[5]) // replaced
	for i := 800; i < 900; i++ {
		idx.Delete(uint64(i))
	}
	close(release)
	idx.bg.Wait()

	idx.mu.RLock()
	slots, pending := len(idx.ids), idx.pending
	idx.mu.RUnlock()
	// The old graph's 1,000 slots become the 499 the rebuild kept and the 300
	// added meanwhile less the 99 slots deleted meanwhile that they reused
	// (98 if the graph's entry slot was among them: it is not reused).
	if pending != nil || slots < 700 || slots > 701 {
		t.Fatalf("after the rebuild: %d slots for %d live, log %v", slots, idx.Len(), pending)
	}
	if got := idx.Len(); got != 1300-600-100 {
		t.Fatalf("Len = %d, want %d", got, 1300-600-100)
	}
	for i := 600; i < 1300; i++ {
		id, _, ok := idx.Search(vs[i])
		switch {
		case i == 700:
			if ok && id == 700 {
				t.Fatal("700's old vector still finds it")
			}
		case i >= 800 && i < 900:
			if ok && id == uint64(i) {
				t.Fatalf("%d, deleted during the rebuild, is back", i)
			}
		case !ok || id != uint64(i):
			t.Fatalf("after the rebuild: query %d found %d, %v", i, id, ok)
		}
	}
	if id, _, _ := idx.Search(vs[5]); id != 700 {
		t.Fatalf("700's new vector finds %d", id)
	}
}

// TestInsertPlansUnderReadLock: while an insert looks for its neighbours,
// searches go on; a plan the graph outgrew meanwhile (here: emptied and
// refilled, which renumbers its slots) is dropped for a search under the
// write lock, and either way the vector is found afterwards.
func TestInsertPlansUnderReadLock(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(30, 31))
	idx := New(Options{Dim: 16, ExactBelow: -1, seed: 5})
	vs := unitVecs(r, 402, 16)
	for i, v := range vs[:400] {
		idx.Add(uint64(i), v)
	}
	planning, searched := make(chan struct{}), make(chan struct{})
	idx.duringPlan = func() { close(planning); <-searched }
	done := make(chan struct{})
	go func() { defer close(done); idx.Add(400, vs[400]) }()
	select {
	case <-planning:
	case <-time.After(time.Minute):
		t.Fatal("no plan")
	}
	if id, _, ok := idx.Search(vs[7]); !ok || id != 7 {
		t.Fatalf("search during a plan: %d, %v", id, ok)
	}
	close(searched)
	<-done
	if id, _, ok := idx.Search(vs[400]); !ok || id != 400 {
		t.Fatalf("the planned insert: %d, %v", id, ok)
	}

	// Renumbered between plan and insert: every entry deleted (a reset), one added.
	idx.duringPlan = nil
	idx.afterPlan = func() {
		idx.afterPlan = nil
		for i := range 401 {
			idx.Delete(uint64(i))
		}
		idx.Add(1000, vs[0])
	}
	idx.Add(401, vs[401])
	if idx.replans != 1 {
		t.Fatalf("%d plans dropped, want 1: the one made before the renumbering", idx.replans)
	}
	if n := idx.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
	for _, c := range []struct {
		v  []float32
		id uint64
	}{{vs[401], 401}, {vs[0], 1000}} {
		if id, _, ok := idx.Search(c.v); !ok || id != c.id {
			t.Fatalf("after a renumbering: found %d, %v, want %d", id, ok, c.id)
		}
	}
}
