package kvroute_test

import (
	"fmt"
	"testing"

	"github.com/infergate/infergate/adapters/llm/kvroute"
	"github.com/infergate/infergate/adapters/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cands are Candidates for Picker tests: one tier unless prio says otherwise.
type cands []struct {
	prio int
	load int64
	ok   bool
}

func (c cands) Len() int                { return len(c) }
func (c cands) Name(i int) string       { return fmt.Sprint("ep", i) }
func (c cands) Priority(i int) int      { return c[i].prio }
func (c cands) Outstanding(i int) int64 { return c[i].load }
func (c cands) Usable(i int) bool       { return c[i].ok }

func ids(n, seed int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = seed*100000 + i
	}
	return out
}

// Chained hashes: prompts sharing a prefix share exactly its full blocks' hashes.
func TestHashes(t *testing.T) {
	x := kvroute.New("m", kvroute.Options{BlockSize: 4})
	a := x.TokenHashes(ids(18, 1))
	require.Len(t, a, 4, "full blocks only")
	b := append(ids(9, 1), 7, 7, 7, 7, 7, 7, 7, 7)
	hb := x.TokenHashes(b)
	assert.Equal(t, a[:2], hb[:2])
	assert.NotEqual(t, a[2], hb[2], "the third block differs")
	c := ids(18, 1)
	c[0] = 9
	for i, h := range x.TokenHashes(c) {
		assert.NotEqual(t, a[i], h, "a different first block changes every hash after it")
	}
	assert.NotEqual(t, a, kvroute.New("other", kvroute.Options{BlockSize: 4}).TokenHashes(ids(18, 1)), "hashes are per model")
	assert.Len(t, x.TextHashes(make([]byte, 33)), 2, "text blocks of 4 bytes a token")
}

// The picker sends a prompt where its longest prefix was sent before, unless that endpoint is
// loaded beyond what the prefix saves; a prompt nobody holds goes to the least loaded; an
// unusable endpoint or a lower tier is not picked while a usable one of the top tier is.
func TestPick(t *testing.T) {
	x := kvroute.New("m", kvroute.Options{BlockSize: 4, LoadWeight: 2})
	conv := ids(64, 1) // 16 blocks
	x.Record("ep2", x.TokenHashes(conv[:32]))
	x.Record("ep1", x.TokenHashes(conv[:8]))
	c := cands{{0, 0, true}, {0, 0, true}, {0, 1, true}}
	p := pickerFor(t, x, conv)
	assert.Equal(t, 2, p.Pick(c, 0), "8 of 16 blocks cached beats 2, at one request in flight")
	assert.Equal(t, 16, x.Matched("ep2", x.TokenHashes(conv)), "the chosen endpoint now holds the whole prompt")

	c[2].load = 9 // 16 blocks + 2*9 > 16 blocks + 0 on an empty endpoint
	assert.Equal(t, 0, pickerFor(t, x, ids(64, 2)).Pick(c, 0), "a cold prompt goes by load")
	c[0].load = 3
	assert.Equal(t, 1, pickerFor(t, x, conv).Pick(c, 0), "too loaded: the next best prefix, ep1's")
	c[1].ok = false
	assert.Equal(t, 2, pickerFor(t, x, conv).Pick(c, 0), "ep2: 0 blocks + 2*9 beats ep0: 16 blocks + 2*3")
	c[0].load = 0
	assert.Equal(t, 0, pickerFor(t, x, conv).Pick(c, 0), "ep0: 16 blocks + 0 beats ep2: 0 blocks + 2*9")

	tiers := cands{{10, 5, true}, {0, 0, true}}
	x.Record("ep1", x.TokenHashes(conv))
	assert.Equal(t, 0, pickerFor(t, x, conv).Pick(tiers, 0), "the top tier wins while usable")
	tiers[0].ok = false
	assert.Equal(t, 1, pickerFor(t, x, conv).Pick(tiers, 0))
	assert.Equal(t, -1, pickerFor(t, x, conv).Pick(cands{{0, 0, false}}, 0))
}

// Each endpoint remembers at most Capacity blocks, the least recently sent leaving first.
func TestCapacity(t *testing.T) {
	x := kvroute.New("m", kvroute.Options{BlockSize: 4, Capacity: 8})
	a, b := x.TokenHashes(ids(24, 1)), x.TokenHashes(ids(24, 2)) // 6 blocks each
	x.Record("ep0", a)
	x.Record("ep0", b)
	assert.Equal(t, 6, x.Matched("ep0", b))
	assert.Equal(t, 2, x.Matched("ep0", a), "a's first two blocks were sent last: they stay")
	x.Record("ep0", a[:1])
	x.Record("ep0", x.TokenHashes(ids(8, 3)))
	assert.Equal(t, 1, x.Matched("ep0", a), "touched blocks outlive untouched ones")
}

func pickerFor(t *testing.T, x *kvroute.Index, prompt []int) upstream.Picker {
	t.Helper()
	return kvroute.PickerFor(x, x.TokenHashes(prompt))
}
