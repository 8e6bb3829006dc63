package respcache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestMirrorKeepsNewer: a load or message older than what the index holds for a key (the load
// read the meta before this replica's Put replaced it) does not bring the old vector back; a
// newer one replaces it; the replica's own Put always does.
func TestMirrorKeepsNewer(t *testing.T) {
	now := time.Unix(1000, 0)
	x := newMirror(100, func() time.Time { return now })
	at := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	old := meta{partition: "p", vector: normalize([]float32{1, 0}), size: 3, expires: at(time.Minute)}
	fresh := meta{partition: "p", vector: normalize([]float32{0, 1}), size: 3, expires: at(time.Minute + time.Millisecond)}
	nearest := func(v []float32) string {
		key, sim, ok := x.search("p", normalize(v))
		if !ok || sim < 0.99 {
			return ""
		}
		return key
	}

	x.add("a", fresh, true)
	x.add("a", old, false) // a stale load
	assert.Equal(t, "a", nearest([]float32{0, 1}), "the newer vector stays")
	assert.Empty(t, nearest([]float32{1, 0}), "the stale one is not indexed")

	newer := meta{partition: "p", vector: normalize([]float32{1, 1}), size: 3, expires: at(2 * time.Minute)}
	x.add("a", newer, false) // another replica's later put
	assert.Equal(t, "a", nearest([]float32{1, 1}))
	assert.Empty(t, nearest([]float32{0, 1}))

	x.add("a", old, true) // this replica's own put wins, whatever its expiry
	assert.Equal(t, "a", nearest([]float32{1, 0}))
	assert.Equal(t, 1, len(x.byKey))
}
