package upstream_test

import (
	"fmt"
	"testing"

	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
)

// cands are Candidates for Picker tests.
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

func TestLeastOutstanding(t *testing.T) {
	var p upstream.Picker = upstream.LeastOutstanding{}
	c := cands{{10, 3, true}, {10, 1, true}, {5, 0, true}, {5, 0, true}, {5, 0, true}, {0, 0, true}}
	assert.Equal(t, 1, p.Pick(c, 0), "the least loaded in the highest tier")
	assert.Equal(t, 1, p.Pick(c, 1), "whatever the rotation")
	c[1].ok = false
	assert.Equal(t, 0, p.Pick(c, 0), "whatever its load, the highest tier wins while usable")
	c[0].ok = false
	seen := map[int]bool{}
	for rotate := range uint32(3) {
		seen[p.Pick(c, rotate)] = true
	}
	assert.Equal(t, map[int]bool{2: true, 3: true, 4: true}, seen, "ties rotate through the whole tier")
	c[3].load = 1
	for rotate := range uint32(3) {
		assert.NotEqual(t, 3, p.Pick(c, rotate), "a busier endpoint is not a tie")
	}
	c[2].ok, c[3].ok, c[4].ok = false, false, false
	assert.Equal(t, 5, p.Pick(c, 7), "the lowest tier when nothing above is usable")
	c[5].ok = false
	assert.Equal(t, -1, p.Pick(c, 0), "none usable")
	assert.Equal(t, -1, p.Pick(cands{}, 0), "no candidates")
}

// RoundRobin takes turns in the highest usable tier whatever the load; a request's own picker
// (WithPicker) replaces the Router's.
func TestRoundRobin(t *testing.T) {
	var p upstream.Picker = upstream.RoundRobin{}
	c := cands{{10, 9, true}, {10, 0, true}, {10, 5, true}, {0, 0, true}}
	seen := map[int]int{}
	for r := range uint32(30) {
		seen[p.Pick(c, r)]++
	}
	assert.Equal(t, map[int]int{0: 10, 1: 10, 2: 10}, seen, "each of the top tier in turn, loaded or not")
	c[0].ok, c[1].ok, c[2].ok = false, false, false
	assert.Equal(t, 3, p.Pick(c, 7))
}
