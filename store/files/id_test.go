package files

import (
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewIDForm(t *testing.T) {
	before := time.Now().UnixMilli()
	id := NewID("file-")
	after := time.Now().UnixMilli()
	require.True(t, strings.HasPrefix(id, "file-"), id)
	body := strings.TrimPrefix(id, "file-")
	require.Len(t, body, 26)
	var ms int64
	for i, c := range body {
		k := strings.IndexRune(crockford, c)
		require.GreaterOrEqual(t, k, 0, "character %q of %s", c, id)
		if i < 10 {
			ms = ms<<5 | int64(k)
		}
	}
	assert.GreaterOrEqual(t, ms, before, "the first 10 characters are the time in ms")
	assert.LessOrEqual(t, ms, after)
	assert.True(t, ValidID(id), "a file id is a valid file name")
	assert.True(t, strings.HasPrefix(NewID("batch_"), "batch_"))
}

// Ids made one after the other sort in that order, even many within one millisecond, and from
// several goroutines they are all distinct.
func TestNewIDOrderAndUnique(t *testing.T) {
	prev := NewID("")
	for range 20000 {
		id := NewID("")
		require.Less(t, prev, id)
		prev = id
	}

	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			local := make([]string, 0, 2000)
			for range 2000 {
				local = append(local, NewID("x"))
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				assert.False(t, seen[id], "duplicate %s", id)
				seen[id] = true
			}
		})
	}
	wg.Wait()
	assert.Len(t, seen, 16000)
}

// Within one millisecond the random part grows by a random step (1 to 2^32), so the next id is
// not guessable as the previous plus one.
func TestNewIDStep(t *testing.T) {
	g := idGen{}
	prev := new(big.Int)
	big1 := big.NewInt(1)
	bigger := 0
	for range 100 {
		require.True(t, g.step())
		cur := new(big.Int).SetBytes(g.rnd[:])
		gap := new(big.Int).Sub(cur, prev)
		require.Positive(t, gap.Sign(), "grows")
		require.LessOrEqual(t, gap.Cmp(new(big.Int).Lsh(big1, 32)), 0, "by at most 2^32")
		if gap.Cmp(big1) > 0 {
			bigger++
		}
		prev = cur
	}
	assert.Greater(t, bigger, 90, "steps are random, not 1")
	g.rnd = [10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	assert.False(t, g.step(), "overflow is reported")
}
