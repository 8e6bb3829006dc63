package tokenizer

import (
	"hash/maphash"
	"iter"
	"math/bits"
)

// The vocabulary's tables are kept free of pointers once loaded. A map[string]int32 of Qwen's
// 151,000 tokens and a []string of their bytes hold 300,000 pointers, which every cycle of the
// garbage collector visits: 11 ms of marking per cycle with one tokenizer loaded, paid by
// whatever the process runs meanwhile (write barriers stay on, and a core is taken). These
// hold the same in a few flat arrays that the collector skips.

// tokenTexts is what each token id stands for, as bytes: text[off[id]:off[id+1]].
type tokenTexts struct {
	text string
	off  []uint32
}

func packTokenTexts(tokens []string) tokenTexts {
	size := 0
	for _, s := range tokens {
		size += len(s)
	}
	buf := make([]byte, 0, size)
	off := make([]uint32, len(tokens)+1)
	for i, s := range tokens {
		buf = append(buf, s...)
		off[i+1] = uint32(len(buf))
	}
	return tokenTexts{text: string(buf), off: off}
}

// get returns token id's bytes ("" for an id that is no token).
func (t *tokenTexts) get(id int) string { return t.text[t.off[id]:t.off[id+1]] }

// strTable maps strings to ids: an open-addressing table of entry numbers over the keys laid
// end to end in one string.
type strTable struct {
	keys  tokenTexts // entry i's key
	ids   []int32    // entry i's id
	slots []uint32   // entry number + 1; 0 is empty
	mask  uint64
	seed  maphash.Seed
}

func newStrTable(m map[string]int32) *strTable {
	keys := make([]string, 0, len(m))
	ids := make([]int32, 0, len(m))
	for k, id := range m {
		keys = append(keys, k)
		ids = append(ids, id)
	}
	size := 1 << bits.Len(uint(len(m)+len(m)/2)) // a load of at most two thirds
	t := &strTable{keys: packTokenTexts(keys), ids: ids, slots: make([]uint32, size),
		mask: uint64(size - 1), seed: maphash.MakeSeed()}
	for i, k := range keys {
		for j := maphash.String(t.seed, k) & t.mask; ; j = (j + 1) & t.mask {
			if t.slots[j] == 0 {
				t.slots[j] = uint32(i + 1)
				break
			}
		}
	}
	return t
}

// all yields every key and its id.
func (t *strTable) all() iter.Seq2[string, int32] {
	return func(yield func(string, int32) bool) {
		for i, id := range t.ids {
			if !yield(t.keys.get(i), id) {
				return
			}
		}
	}
}

func (t *strTable) get(s string) (int32, bool) {
	for j := maphash.String(t.seed, s) & t.mask; ; j = (j + 1) & t.mask {
		e := t.slots[j]
		if e == 0 {
			return 0, false
		}
		if t.keys.get(int(e-1)) == s {
			return t.ids[e-1], true
		}
	}
}
