package respcache

import "time"

// For the external tests: wait for the answers being stored in the background.
func (c *Cache) Wait() { c.wait() }

// Waiting counts the requests waiting for another's answer.
func (c *Cache) Waiting() int64 { return c.waiting.Load() }

// Deliver hands r a channel message as if the subscription had brought it: the Redis store's own
// messages (origin "self") or another replica's.
func (r *Redis) Deliver(self bool, flush bool, key string) {
	origin := r.origin
	if !self {
		origin++
	}
	if flush {
		r.handle(appendFlushMessage(nil, origin))
		return
	}
	r.handle(appendAddMessage(nil, origin, key, meta{partition: "p", vector: []float32{0, 1}, size: 1, expires: r.opts.Now().Add(time.Hour).UnixMilli()}))
}

// IndexCounts says what the semantic index holds, summed over partitions: the vectors in the
// indexes, the vectors counted in (partIndex.n), and the entries that have one.
func (m *Memory) IndexCounts() (vectors, counted, entries int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.vec.mu.RLock()
	defer m.vec.mu.RUnlock()
	for _, p := range m.vec.parts {
		vectors += p.idx.Len()
		counted += p.n
	}
	for _, e := range m.byID {
		if e.vslot != nil {
			entries++
		}
	}
	return vectors, counted, entries
}

// MetaRecord is the meta of an entry as Redis holds it ("m"), for tests that write entries as an
// older gateway did.
func MetaRecord(partition string, v []float32, size int64, expires time.Time) []byte {
	return appendMeta(nil, meta{partition: partition, vector: v, size: size, expires: expires.UnixMilli()})
}
