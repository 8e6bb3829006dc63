package kvroute_test

import (
	"fmt"
	"testing"

	"github.com/infergate/infergate/stage/kvroute"
	"github.com/infergate/infergate/upstream"
	"github.com/prometheus/client_golang/prometheus"
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

// The picker sends a prompt where its longest prefix was sent before, unless the blocks of the
// requests in flight there cost more than the prefix saves; a prompt nobody holds goes where the
// least is in flight (then the fewest requests); an unusable endpoint or a lower tier is not
// picked while a usable one of the top tier is.
func TestPick(t *testing.T) {
	x := kvroute.New("m", kvroute.Options{BlockSize: 4, LoadWeight: 0.5})
	conv := ids(64, 1) // 16 blocks
	x.Record("ep2", x.TokenHashes(conv[:32]))
	x.Record("ep1", x.TokenHashes(conv[:8]))
	c := cands{{0, 0, true}, {0, 0, true}, {0, 0, true}}
	first := pickerFor(t, x, conv)
	assert.Equal(t, 2, first.Pick(c, 0), "8 of 16 blocks cached beats 2 and 0")
	assert.Equal(t, 16, x.Matched("ep2", x.TokenHashes(conv)), "the chosen endpoint now holds the whole prompt")
	// ep2 now serves 16 blocks: cost 0 + 0.5*16 = 8 against ep1's 14 + 0.
	second := pickerFor(t, x, conv)
	assert.Equal(t, 2, second.Pick(c, 0))
	// With 32 blocks in flight on ep2 (cost 16), ep1's two cached blocks win (cost 14).
	assert.Equal(t, 1, pickerFor(t, x, conv).Pick(c, 0), "too busy: the next best prefix, ep1's")
	kvroute.Done(first)
	kvroute.Done(second)

	cold := cands{{0, 2, true}, {0, 0, true}, {0, 0, true}}
	kvroute.Done(pickerFor(t, x, conv)) // ep2 again, done at once
	p := pickerFor(t, x, ids(64, 2))
	// ep1 still serves the 16 blocks picked above; ep0 and ep2 none; ep2 has fewer requests.
	assert.Equal(t, 2, p.Pick(cold, 0), "a cold prompt goes where the least is in flight, then the fewest requests")
	kvroute.Done(p)

	c[2].ok = false
	assert.Equal(t, 1, pickerFor(t, x, conv).Pick(c, 0), "ep2 unusable: ep1 holds more of the prefix than ep0")
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

// The metrics count each pick as a hit when the chosen endpoint had been sent part of the
// prompt, and the prompt's blocks as cached or to prefill there.
func TestMetrics(t *testing.T) {
	m := kvroute.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	x := kvroute.New("m", kvroute.Options{BlockSize: 4, Metrics: m})
	c := cands{{0, 0, true}, {0, 0, true}}
	pick := func(prompt []int) {
		p := pickerFor(t, x, prompt)
		require.GreaterOrEqual(t, p.Pick(c, 0), 0)
		kvroute.Done(p)
	}
	conv := ids(64, 1)
	pick(conv[:32]) // 8 blocks sent nowhere before: a miss, 8 to prefill
	pick(conv)      // 16 blocks, 8 of them where the first went: a hit, 8 cached, 8 to prefill
	got := map[string]float64{}
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "result" {
					got[f.GetName()+" "+l.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	assert.Equal(t, map[string]float64{
		"infergate_kvroute_picks_total hit": 1, "infergate_kvroute_picks_total miss": 1,
		"infergate_kvroute_blocks_total cached": 8, "infergate_kvroute_blocks_total prefill": 16,
	}, got)
}
