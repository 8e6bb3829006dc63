package tokenizer

import "math/bits"

// pairTable maps a pair of token ids to the rank of their merge: an open-addressing hash table
// with linear probing and 8-byte slots (the pair's two 22-bit ids and a 20-bit rank), which is
// the BPE's hottest lookup and three times as fast as a Go map here. The merged token of each
// rank is in into.
type pairTable struct {
	slots []uint64 // pair<<20 | rank, 0 is empty (pairs are stored +1)
	into  []int32  // merged token by rank
	shift uint8
}

const (
	idBits   = 22 // token ids < 1<<22 (maxVocab)
	rankBits = 20 // ranks < 1<<20 (maxMerges)
)

func newPairTable(n int) pairTable {
	size := 1 << bits.Len(uint(n+n/2+1))
	return pairTable{slots: make([]uint64, size), into: make([]int32, n), shift: uint8(64 - bits.Len(uint(size-1)))}
}

func packPair(a, b int32) uint64 { return (uint64(a)<<idBits | uint64(b)) + 1 }

func (p *pairTable) put(a, b int32, rank int, merged int32) {
	key := packPair(a, b)
	mask := uint64(len(p.slots) - 1)
	for i := (key * 0x9E3779B97F4A7C15) >> p.shift; ; i = (i + 1) & mask {
		if s := p.slots[i]; s == 0 || s>>rankBits == key {
			p.slots[i] = key<<rankBits | uint64(rank)
			p.into[rank] = merged
			return
		}
	}
}

// get returns the rank of merging a and b, noRank if they do not merge.
func (p *pairTable) get(a, b int32) uint32 {
	key := packPair(a, b)
	mask := uint64(len(p.slots) - 1)
	for i := (key * 0x9E3779B97F4A7C15) >> p.shift; ; i = (i + 1) & mask {
		s := p.slots[i]
		if s>>rankBits == key {
			return uint32(s & (1<<rankBits - 1))
		}
		if s == 0 {
			return noRank
		}
	}
}
