package vecindex

// op is an Add (vec set) or a Delete made while a rebuild ran.
type op struct {
	id uint64
	// vec is the slot's vector in the old graph, not a copy: a later add may
	// reuse the slot and overwrite it, but only after a delete of this id
	// (or a replacement of it) that is logged after this op, so the replay's
	// outcome for the id is the same.
	vec []float32
	del bool
}

// startRebuild (under the write lock) starts building a graph of the live
// entries in the background. Searches, adds and deletes go on in the old
// graph meanwhile; the adds and deletes are logged, replayed into the new
// graph under the write lock, and the new graph then takes the old one's
// place. The write lock is held for a copy of the live vectors here and for
// the replay and the swap there, not for the rebuild's inserts.
func (x *Index) startRebuild() {
	d := x.dim
	ids := make([]uint64, 0, x.live)
	vecs := make([]float32, 0, x.live*d)
	for s := range x.ids {
		if x.alive[s] {
			ids = append(ids, x.ids[s])
			vecs = append(vecs, x.vecs[s*d:s*d+d]...)
		}
	}
	x.pending = new([]op)
	x.bg.Add(1)
	go x.rebuild(ids, vecs)
}

// rebuild builds the new graph from the snapshot, then replays the log and
// swaps it in.
func (x *Index) rebuild(ids []uint64, vecs []float32) {
	defer x.bg.Done()
	o := x.opts
	o.Dim = x.dim
	o.seed = 0 // not the old graph's levels again
	nx := New(o)
	nx.noRebuild = true
	d := x.dim
	for i, id := range ids {
		nx.Add(id, vecs[i*d:i*d+d])
	}
	if x.beforeSwap != nil {
		x.beforeSwap()
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, logged := range *x.pending {
		if logged.del {
			nx.Delete(logged.id)
		} else {
			nx.Add(logged.id, logged.vec)
		}
	}
	x.vecs, x.ids, x.alive, x.levels, x.links0, x.upper, x.far = nx.vecs, nx.ids, nx.alive, nx.levels, nx.links0, nx.upper, nx.far
	x.slot, x.free, x.entry, x.top, x.live = nx.slot, nx.free, nx.entry, nx.top, nx.live
	x.pending = nil
	x.gen++
}
