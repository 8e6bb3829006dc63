package vecindex

import (
	"cmp"
	"slices"
)

// The graph follows Malkov and Yashunin's HNSW (arXiv:1603.09320): layer 0
// holds every node with up to 2*M links, each higher layer about 1/M of the
// layer below with up to M; a search descends greedily from the top entry
// node and runs a beam search of width ef on layer 0. Links are chosen with
// the paper's diversity heuristic (a candidate is kept only if it is closer
// to the new node than to every link already kept), which keeps clustered
// data, such as near-duplicate questions, navigable.
//
// Deleted nodes stay in the graph as tombstones: searches walk through them
// but never return them, inserts never link to them, and the next Add reuses
// the slot, re-linking it for its new vector. Links that other nodes still
// hold to a reused slot are corrected lazily: a full neighbour list is
// pruned by real similarities, which drops a link that no longer fits.

// Long-range links. The diversity heuristic prunes a node's links to far
// away nodes as closer ones arrive, so a cluster that shares no words with
// the rest (one prompt template among many) can end up with no link into
// it: searches for its members then end, confidently, in another cluster
// (with only the heuristic, 17 of 2,858 sampled vectors of a 20,000-prompt
// lexical index could not find themselves; 6 with two long-range links per
// node, 2 with four). Each layer-0 node therefore also keeps nFar links that
// are never pruned: out-links to random nodes set when it is inserted, and
// each insert points a random slot of nFar random nodes at the new node, so
// every region has in-links from everywhere (the "navigable small world"
// random edges HNSW's layers otherwise replace).
const nFar = 4

// noLink marks an unset long-range link.
const noLink = ^uint32(0)

// cand is a search candidate: a slot and its similarity to the query.
type cand struct {
	sim  float32
	slot uint32
}

// scratch holds one search's buffers, so a search allocates nothing.
type scratch struct {
	mark  []uint32 // visited marks, compared with epoch
	epoch uint32
	cands []cand // max-heap by sim: the frontier, best first
	res   []cand // min-heap by sim: the ef best, worst first
	sel   []cand // neighbour selection buffers (inserts only)
	out   []cand
	lsel  []cand
	lout  []cand
}

func (sc *scratch) reset(n int) {
	if len(sc.mark) < n {
		sc.mark = make([]uint32, n+n/4+16)
		sc.epoch = 0
	}
	sc.epoch++
	if sc.epoch == 0 { // wrapped: old marks could collide
		clear(sc.mark)
		sc.epoch = 1
	}
}

// visit marks s and reports whether it was unvisited.
func (sc *scratch) visit(s uint32) bool {
	if sc.mark[s] == sc.epoch {
		return false
	}
	sc.mark[s] = sc.epoch
	return true
}

// links returns slot s's link list on layer lc: [count, link...].
func (x *Index) links(s uint32, lc int) []uint32 {
	if lc == 0 {
		i := int(s) * (x.m0 + 1)
		return x.links0[i : i+x.m0+1 : i+x.m0+1]
	}
	i := (lc - 1) * (x.m + 1)
	return x.upper[s][i : i+x.m+1 : i+x.m+1]
}

// descend walks greedily from the entry node through layers from..to+1 and
// returns the closest node found, never stepping onto exclude.
func (x *Index) descend(q []float32, from, to, exclude int) uint32 {
	ep := uint32(x.entry)
	best := dot(q, x.vec(ep))
	for lc := from; lc > to; lc-- {
		for changed := true; changed; {
			changed = false
			l := x.links(ep, lc)
			for _, n := range l[1 : 1+l[0]] {
				if int(n) == exclude {
					continue
				}
				if s := dot(q, x.vec(n)); s > best {
					best, ep, changed = s, n, true
				}
			}
		}
	}
	return ep
}

// searchLayer is the beam search on layer lc from ep. It returns up to ef
// live nodes (a heap, not sorted), never exclude; tombstones are walked
// through but not returned.
func (x *Index) searchLayer(q []float32, ep uint32, ef, lc, exclude int, sc *scratch) []cand {
	sc.reset(len(x.ids))
	sc.cands, sc.res = sc.cands[:0], sc.res[:0]
	if exclude >= 0 {
		sc.visit(uint32(exclude))
	}
	sc.visit(ep)
	c0 := cand{dot(q, x.vec(ep)), ep}
	sc.cands = pushMax(sc.cands, c0)
	if x.alive[ep] && int(ep) != exclude {
		sc.res = pushMin(sc.res, c0)
	}
	for len(sc.cands) > 0 {
		var c cand
		c, sc.cands = popMax(sc.cands)
		if len(sc.res) >= ef && c.sim < sc.res[0].sim {
			break
		}
		l := x.links(c.slot, lc)
		nbrs := [2][]uint32{l[1 : 1+l[0]]}
		if lc == 0 {
			nbrs[1] = x.far[int(c.slot)*nFar : int(c.slot)*nFar+nFar]
		}
		for _, ns := range nbrs {
			for _, n := range ns {
				if n == noLink || !sc.visit(n) {
					continue
				}
				s := dot(q, x.vec(n))
				if len(sc.res) < ef || s > sc.res[0].sim {
					sc.cands = pushMax(sc.cands, cand{s, n})
					if x.alive[n] {
						sc.res = pushMin(sc.res, cand{s, n})
						if len(sc.res) > ef {
							_, sc.res = popMin(sc.res)
						}
					}
				}
			}
		}
	}
	return sc.res
}

// insert links slot s (already holding its vector) into the graph, looking
// for its neighbours under the write lock (Add plans them under the read
// lock when it can: plan.go).
func (x *Index) insert(s uint32) {
	l := int(x.levels[s])
	if x.entry < 0 {
		for lc := 0; lc <= l; lc++ {
			x.links(s, lc)[0] = 0
		}
		x.entry, x.top = int(s), l
		return
	}
	x.apply(s, x.neighbours(x.vec(s), l, int(s), &x.ins))
}

// farLinks gives slot s its random long-range links, out and in (never to s
// itself).
func (x *Index) farLinks(s uint32) {
	n := len(x.ids)
	if n <= 1 {
		return
	}
	for i := range nFar {
		o := uint32(x.rng.IntN(n - 1))
		if o >= s {
			o++
		}
		x.far[int(s)*nFar+i] = o
		in := uint32(x.rng.IntN(n - 1))
		if in >= s {
			in++
		}
		x.far[int(in)*nFar+x.rng.IntN(nFar)] = s
	}
}

// link adds a link n -> s on layer lc (sim is their similarity); a full list
// is re-selected with the heuristic over its links plus s.
func (x *Index) link(n, s uint32, lc int, sim float32, sc *scratch) {
	l := x.links(n, lc)
	cnt := int(l[0])
	for _, e := range l[1 : 1+cnt] {
		if e == s {
			return
		}
	}
	if cnt < len(l)-1 {
		l[1+cnt] = s
		l[0]++
		return
	}
	nv := x.vec(n)
	sc.lsel = append(sc.lsel[:0], cand{sim, s})
	for _, e := range l[1 : 1+cnt] {
		sc.lsel = append(sc.lsel, cand{dot(nv, x.vec(e)), e})
	}
	sc.lout = x.selectNeighbors(sc.lsel, len(l)-1, sc.lout[:0])
	l[0] = uint32(len(sc.lout))
	for i, c := range sc.lout {
		l[1+i] = c.slot
	}
}

// selectNeighbors keeps up to m of cands (similarities to a base node): a
// candidate is kept only if it is more similar to the base than to every one
// kept before it, so links spread in different directions. It sorts cands.
func (x *Index) selectNeighbors(cands []cand, m int, out []cand) []cand {
	slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.sim, a.sim) })
	for _, c := range cands {
		if len(out) >= m {
			break
		}
		cv := x.vec(c.slot)
		keep := true
		for _, r := range out {
			if dot(cv, x.vec(r.slot)) > c.sim {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, c)
		}
	}
	return out
}

// Binary heaps on cand slices; container/heap would box every element.

func pushMax(h []cand, c cand) []cand {
	h = append(h, c)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p].sim >= h[i].sim {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func popMax(h []cand) (cand, []cand) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].sim > h[c].sim {
			c++
		}
		if h[i].sim >= h[c].sim {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return top, h
}

func pushMin(h []cand, c cand) []cand {
	h = append(h, c)
	for i := len(h) - 1; i > 0; {
		p := (i - 1) / 2
		if h[p].sim <= h[i].sim {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func popMin(h []cand) (cand, []cand) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1].sim < h[c].sim {
			c++
		}
		if h[i].sim <= h[c].sim {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return top, h
}
