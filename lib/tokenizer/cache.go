package tokenizer

import (
	"hash/maphash"
	"sync/atomic"
)

// pieceCache remembers the BPE of recent pieces that needed merging (words not in the
// vocabulary as a whole), as Hugging Face's tokenizers do: a direct-mapped table of immutable
// entries behind atomic pointers, so lookups take no lock, each entry is one allocation, and
// the memory is bounded (cacheSlots entries of about 160 bytes).
type pieceCache struct {
	seed  maphash.Seed
	slots [cacheSlots]atomic.Pointer[cacheEntry]
}

const (
	cacheSlots    = 1 << 13
	cacheMaxPiece = 48
	cacheMaxIDs   = 24
)

type cacheEntry struct {
	plen, nids uint8
	piece      [cacheMaxPiece]byte
	ids        [cacheMaxIDs]int32
}

// get returns the ids of piece (nil if not cached) and the piece's hash for put.
func (c *pieceCache) get(piece string) ([]int32, uint64) {
	h := maphash.String(c.seed, piece)
	if e := c.slots[h&(cacheSlots-1)].Load(); e != nil && string(e.piece[:e.plen]) == piece {
		return e.ids[:e.nids], h
	}
	return nil, h
}

func (c *pieceCache) put(h uint64, piece string, ids []int32) {
	if len(ids) > cacheMaxIDs {
		return
	}
	e := &cacheEntry{plen: uint8(len(piece)), nids: uint8(len(ids))}
	copy(e.piece[:], piece)
	copy(e.ids[:], ids)
	c.slots[h&(cacheSlots-1)].Store(e)
}
