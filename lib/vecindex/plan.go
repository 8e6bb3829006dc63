package vecindex

// An insert's expensive part, finding the new node's neighbours on each
// layer, is a search like any other: Add runs it under the read lock, while
// searches go on, and takes the write lock only to store the vector and link
// it (plan, then apply). The graph may change in between; what changes it
// under a plan:
//   - other inserts: the plan misses the nodes they added, as an insert that
//     ran just before them would;
//   - deletes: a planned neighbour may be a tombstone by then, which still
//     routes, as every tombstone does;
//   - a deleted slot reused for another vector: a link to it was chosen for
//     the old vector (a link less apt, not a wrong answer: searches compare
//     vectors, never trust links);
//   - a reset or a rebuild's swap renumbers every slot: gen changes, and the
//     plan is not used (the insert searches again under the write lock).
//     Nothing else removes slots, so every slot of a plan still in use exists.

// plan is the neighbours chosen for a vector of the given level on each of
// its layers, 0..min(level, top).
type plan struct {
	gen, top, level int
	layers          [][]cand // by layer: the selected neighbours
}

// planInsert finds q's neighbours on every layer of the graph. Under the
// read lock; nil for an empty graph.
func (x *Index) planInsert(q []float32) *plan {
	if x.entry < 0 {
		return nil
	}
	// The level of the slot it will take: the free slot to be reused next
	// (if that changes, apply is not used for a slot of more layers), or a
	// fresh one's.
	var l int
	if n := len(x.free); n > 0 {
		l = int(x.levels[x.free[n-1]])
	} else {
		x.levelMu.Lock()
		l = x.randomLevel()
		x.levelMu.Unlock()
	}
	if x.duringPlan != nil {
		x.duringPlan()
	}
	sc := x.scratch.Get().(*scratch)
	defer x.scratch.Put(sc)
	return x.neighbours(q, l, -1, sc)
}

// neighbours selects q's neighbours for a node of level l on each of its
// layers, never exclude. The graph must not be empty.
func (x *Index) neighbours(q []float32, l, exclude int, sc *scratch) *plan {
	p := &plan{gen: x.gen, top: x.top, level: l, layers: make([][]cand, min(l, x.top)+1)}
	ep := x.descend(q, x.top, l, exclude)
	for lc := min(l, x.top); lc >= 0; lc-- {
		res := x.searchLayer(q, ep, x.efC, lc, exclude, sc)
		if len(res) == 0 {
			continue
		}
		best := res[0]
		for _, c := range res[1:] {
			if c.sim > best.sim {
				best = c
			}
		}
		sc.sel = append(sc.sel[:0], res...)
		sc.out = x.selectNeighbors(sc.sel, x.m, sc.out[:0])
		p.layers[lc] = append([]cand(nil), sc.out...)
		ep = best.slot
	}
	return p
}

// apply links slot s (already holding its vector) by p, made for this graph
// (same gen). Under the write lock.
func (x *Index) apply(s uint32, p *plan) {
	l := int(x.levels[s])
	for lc := 0; lc <= l; lc++ {
		x.links(s, lc)[0] = 0
	}
	x.farLinks(s)
	sc := &x.ins
	for lc := min(l, p.top); lc >= 0; lc-- {
		own := x.links(s, lc)
		n := 0
		for _, c := range p.layers[lc] {
			if c.slot == s {
				continue // s's own slot, reused: it was a tombstone when planned
			}
			own[1+n] = c.slot
			n++
		}
		own[0] = uint32(n)
		for _, c := range own[1 : 1+n] {
			x.link(c, s, lc, dot(x.vec(c), x.vec(s)), sc) // not the planned sim: c may hold another vector by now
		}
	}
	if l > x.top {
		x.entry, x.top = int(s), l
	}
}
