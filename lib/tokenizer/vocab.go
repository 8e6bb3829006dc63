package tokenizer

import "math/bits"

// shortVocab answers, for a piece of at most shortMax bytes, whether it is a vocabulary token
// whose BPE is itself (the common case for words), and its id: one probe of an open-addressing
// table that holds the pieces' bytes inline. The map of all tokens (pieceID) costs a string
// hash, a probe of its groups and a comparison through the key's pointer, and was two fifths of
// encoding a chat; this is about a third of that.
type shortVocab struct {
	slots []vocabSlot
	shift uint8 // 64 - log2(len(slots))
}

// shortMax is the longest piece shortVocab holds: two words of bytes.
const shortMax = 16

// shortVocabMax bounds the entries, so that a hostile tokenizer.json (up to 2^22 ids) does not
// make a table twenty times its file's size; beyond it, lookups go to pieceID.
const shortVocabMax = 1 << 20

type vocabSlot struct {
	k0, k1 uint64 // the piece's bytes, little-endian, zero-padded
	n      uint8  // its length; 0: an empty slot
	id     int32
}

// newShortVocab holds the pieces of n entries that add gives it; nil if n is too large.
func newShortVocab(n int, each func(add func(piece string, id int32))) *shortVocab {
	if n > shortVocabMax {
		return nil
	}
	size := 1 << bits.Len(uint(n+n/2)) // a load of at most two thirds
	v := &shortVocab{slots: make([]vocabSlot, size), shift: uint8(64 - bits.Len(uint(size-1)))}
	each(func(piece string, id int32) {
		k0, k1 := pieceKey(piece)
		for i := v.home(k0, k1, len(piece)); ; i = (i + 1) & uint64(len(v.slots)-1) {
			if s := &v.slots[i]; s.n == 0 {
				*s = vocabSlot{k0: k0, k1: k1, n: uint8(len(piece)), id: id}
				return
			}
		}
	})
	return v
}

// pieceKey packs a piece of 1 to shortMax bytes into two words, little-endian, zero-padded.
func pieceKey(p string) (uint64, uint64) {
	if len(p) < 8 {
		return partialWord(p), 0
	}
	return load8(p), partialWord(p[8:])
}

// partialWord packs up to eight bytes into a word. Four to eight bytes are two four-byte loads
// that overlap (the bytes they share land in the same place in both); fewer, up to three loads
// of one byte. No loop: a word's length is what the branch predictor cannot guess.
func partialWord(p string) uint64 {
	switch n := len(p); {
	case n >= 4:
		lo := uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24
		hi := uint64(p[n-4]) | uint64(p[n-3])<<8 | uint64(p[n-2])<<16 | uint64(p[n-1])<<24
		return lo | hi<<(8*(n-4))
	case n > 0:
		return uint64(p[0]) | uint64(p[n/2])<<(8*(n/2)) | uint64(p[n-1])<<(8*(n-1))
	}
	return 0
}

func (v *shortVocab) home(k0, k1 uint64, n int) uint64 {
	h := (k0 ^ bits.RotateLeft64(k1, 31) ^ uint64(n)) * 0x9e3779b97f4a7c15
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	return h >> v.shift
}

// get returns the id of piece (1 to shortMax bytes) if it is a vocabulary token whose BPE is
// itself.
func (v *shortVocab) get(piece string) (int32, bool) {
	k0, k1 := pieceKey(piece)
	n := uint8(len(piece))
	for i := v.home(k0, k1, len(piece)); ; i = (i + 1) & uint64(len(v.slots)-1) {
		s := &v.slots[i]
		if s.n == n && s.k0 == k0 && s.k1 == k1 {
			return s.id, true
		}
		if s.n == 0 {
			return 0, false
		}
	}
}
