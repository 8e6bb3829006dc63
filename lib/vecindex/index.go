package vecindex

import (
	"math"
	"math/rand/v2"
	"sync"
)

// Options configure an Index. Zero values take the defaults.
type Options struct {
	// Dim is the vectors' length. 0 adopts the length of the first vector
	// added. A vector of another length is ignored by Add and finds nothing
	// in Search, so a misconfigured embedder degrades to cache misses rather
	// than a panic.
	Dim int
	// M is the number of links a node gets per graph layer (2*M on layer 0).
	// Default 16.
	M int
	// EfConstruction is the candidate list length when inserting. Default 100.
	EfConstruction int
	// EfSearch is the candidate list length when searching. Default 64.
	EfSearch int
	// ExactBelow is the number of entries below which Search scans every
	// vector instead of walking the graph (a flat scan is exact and, at small
	// sizes, faster). Default DefaultExactBelow; negative means never.
	ExactBelow int

	// seed fixes the level generator (tests only); 0 draws one.
	seed uint64
}

// DefaultExactBelow is the default Options.ExactBelow, measured as the size
// where a flat scan at dim 384 costs about what a graph search does (see the
// package doc).
const DefaultExactBelow = 2048

// maxLevel caps node levels: with M=16 a level above 15 has probability 16^-16.
const maxLevel = 15

// Index is an approximate nearest-neighbour index of L2-normalised float32
// vectors keyed by uint64 ids: an HNSW graph over contiguous vector storage.
// It is safe for concurrent use: searches share a read lock, Add searches
// under it too and writes under the write lock, Delete takes the write lock.
type Index struct {
	mu sync.RWMutex

	dim, m, m0, efC, efS, exactBelow int
	ml                               float64
	rng                              *rand.Rand

	vecs    []float32  // slot i at vecs[i*dim:(i+1)*dim]
	ids     []uint64   // id of each slot
	alive   []bool     // false for a deleted slot (a tombstone that still routes)
	levels  []uint8    // top layer of each slot
	links0  []uint32   // layer 0: slot i at links0[i*(m0+1):], [count, links...]
	upper   [][]uint32 // layers 1..level of each slot: (level)*(m+1) words, nil for level 0
	far     []uint32   // layer 0: slot i's random long-range links at far[i*nFar:], noLink if none
	slot    map[uint64]uint32
	free    []uint32 // tombstoned slots ready for reuse
	entry   int      // entry slot, -1 when the graph is empty
	top     int      // level of the entry slot
	live    int
	levelMu sync.Mutex // randomLevel under the read lock (concurrent plans)
	gen     int        // changes when slots are renumbered (reset, a rebuild's swap): plans made before are void

	ins     scratch // used by inserts, under the write lock
	scratch sync.Pool

	// A compaction builds the new graph in the background (rebuild.go): meanwhile
	// pending logs each Add and Delete for it to replay (nil: none running).
	pending    *[]op
	noRebuild  bool           // a graph being built: never compacts (its replay may delete)
	bg         sync.WaitGroup // the running rebuild
	opts       Options        // what New was given, defaults applied: for a rebuild's graph
	beforeSwap func()
	// tests: called while an insert plans (under the read lock), and after
	afterPlan, duringPlan func()
	replans               int // plans not used // tests: called by a rebuild before it takes the write lock
}

// New returns an empty Index.
func New(o Options) *Index {
	if o.M <= 0 {
		o.M = 16
	}
	if o.EfConstruction <= 0 {
		o.EfConstruction = 100
	}
	if o.EfConstruction < o.M {
		o.EfConstruction = o.M
	}
	if o.EfSearch <= 0 {
		o.EfSearch = 64
	}
	if o.ExactBelow == 0 {
		o.ExactBelow = DefaultExactBelow
	}
	if o.seed == 0 {
		o.seed = rand.Uint64()
	}
	x := &Index{
		dim: max(o.Dim, 0), m: o.M, m0: 2 * o.M, efC: o.EfConstruction, efS: o.EfSearch,
		exactBelow: o.ExactBelow,
		ml:         1 / math.Log(float64(o.M)),
		rng:        rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15)),
		slot:       make(map[uint64]uint32),
		entry:      -1,
	}
	x.scratch.New = func() any { return new(scratch) }
	x.opts = o
	return x
}

// Len returns the number of live entries.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.live
}

// Add stores v under id, replacing any vector id had. v is copied; it should
// be L2-normalised (similarity is the plain dot product). A vector of the
// wrong length or with a NaN or Inf is ignored.
func (x *Index) Add(id uint64, v []float32) {
	for _, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return
		}
	}
	// The neighbours first, under the read lock (plan.go).
	x.mu.RLock()
	var p *plan
	if x.dim > 0 && len(v) == x.dim {
		p = x.planInsert(v)
	}
	x.mu.RUnlock()
	if x.afterPlan != nil {
		x.afterPlan()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.dim == 0 {
		x.dim = len(v)
	}
	if len(v) != x.dim || x.dim == 0 {
		return
	}
	if s, ok := x.slot[id]; ok {
		// Replacing: retire the old slot (usually reused just below).
		x.kill(id, s)
	}
	var s uint32
	if n := len(x.free); n > 0 {
		s = x.free[n-1]
		x.free = x.free[:n-1]
		copy(x.vec(s), v)
	} else {
		l := 0
		if p != nil {
			l = p.level
		} else {
			l = x.randomLevel()
		}
		s = x.newSlot(v, l)
	}
	x.ids[s] = id
	x.alive[s] = true
	x.slot[id] = s
	x.live++
	if p != nil && p.gen == x.gen && int(x.levels[s]) <= p.level {
		x.apply(s, p)
	} else {
		if p != nil {
			x.replans++
		}
		x.insert(s) // the graph was renumbered, or the slot reused has more layers than planned
	}
	if x.pending != nil {
		*x.pending = append(*x.pending, op{id: id, vec: x.vec(s)[:x.dim:x.dim]})
	}
}

// newSlot appends storage for one more node of level l.
func (x *Index) newSlot(v []float32, l int) uint32 {
	s := uint32(len(x.ids))
	x.vecs = append(x.vecs, v...)
	x.ids = append(x.ids, 0)
	x.alive = append(x.alive, false)
	x.levels = append(x.levels, uint8(l))
	x.links0 = append(x.links0, make([]uint32, x.m0+1)...)
	var up []uint32
	if l > 0 {
		up = make([]uint32, l*(x.m+1))
	}
	x.upper = append(x.upper, up)
	for range nFar {
		x.far = append(x.far, noLink)
	}
	return s
}

// Delete removes id; it is never returned by Search afterwards. Its slot
// stays in the graph as a routing node until a later Add reuses it, so
// neighbours keep their connectivity.
func (x *Index) Delete(id uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.slot[id]
	if !ok {
		return
	}
	x.kill(id, s)
	if x.pending != nil {
		*x.pending = append(*x.pending, op{id: id, del: true})
	}
	if x.live == 0 {
		x.reset()
		return
	}
	// Tombstones slow searches down and, below ExactBelow, the flat scan
	// too. Rebuild once they outnumber live entries: the rebuild's cost
	// (live inserts) is paid for by at least as many deletes. It runs in
	// the background (seconds at 100,000 entries, during which searches
	// would otherwise wait).
	if dead := len(x.ids) - x.live; dead > x.live && dead >= 64 && x.pending == nil && !x.noRebuild {
		x.startRebuild()
	}
}

// kill turns slot s into a tombstone.
func (x *Index) kill(id uint64, s uint32) {
	delete(x.slot, id)
	x.alive[s] = false
	x.live--
	// The entry slot keeps its place; reusing it would mean re-linking the
	// node every search starts from.
	if int(s) != x.entry {
		x.free = append(x.free, s)
	}
}

// Search returns the stored id most similar (largest dot product) to v, and
// that similarity. ok is false when the index is empty or v has the wrong
// length. Below ExactBelow entries the answer is exact; above, it is the
// graph's best candidate (see the package doc for the measured recall).
func (x *Index) Search(v []float32) (id uint64, sim float32, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.live == 0 || len(v) != x.dim {
		return 0, 0, false
	}
	if x.live < x.exactBelow {
		return x.flat(v)
	}
	sc := x.scratch.Get().(*scratch)
	defer x.scratch.Put(sc)
	ep := x.descend(v, x.top, 0, -1)
	res := x.searchLayer(v, ep, x.efS, 0, -1, sc)
	if len(res) == 0 {
		// Every candidate the walk met was a tombstone: fall back to exact.
		return x.flat(v)
	}
	best := res[0]
	for _, c := range res[1:] {
		if c.sim > best.sim {
			best = c
		}
	}
	return x.ids[best.slot], best.sim, true
}

// flat scans every live vector: exact, and branch-light over contiguous
// memory.
func (x *Index) flat(v []float32) (uint64, float32, bool) {
	best, bs := float32(math.Inf(-1)), -1
	d := x.dim
	for s := range x.ids {
		if !x.alive[s] {
			continue
		}
		if p := dot(v, x.vecs[s*d:s*d+d]); p > best || bs < 0 {
			best, bs = p, s
		}
	}
	if bs < 0 {
		return 0, 0, false
	}
	return x.ids[bs], best, true
}

func (x *Index) vec(s uint32) []float32 {
	i := int(s) * x.dim
	return x.vecs[i : i+x.dim : i+x.dim]
}

// randomLevel draws a new node's level: under the write lock, or levelMu
// with the read lock (plans).
func (x *Index) randomLevel() int {
	// -ln(U)*ml with U in (0,1]: P(level >= l) = M^-l.
	l := int(-math.Log(1-x.rng.Float64()) * x.ml)
	return min(l, maxLevel)
}

func (x *Index) reset() {
	x.vecs, x.ids, x.alive, x.levels, x.links0, x.upper, x.far = nil, nil, nil, nil, nil, nil, nil
	x.free = nil
	x.slot = make(map[uint64]uint32)
	x.entry, x.top, x.live = -1, 0, 0
	x.gen++
}
