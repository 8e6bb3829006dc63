package vllmsim

import (
	"container/list"
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// pseudoTokens cuts text into one token per 4 bytes (the last one shorter), each id a hash of
// its bytes: not a tokenizer, but stable, so equal text prefixes give equal token prefixes and
// a prompt's length in tokens is about what a real tokenizer gives for English.
func pseudoTokens(text []byte) []int64 {
	ids := make([]int64, 0, (len(text)+3)/4)
	for i := 0; i < len(text); i += 4 {
		// FNV-1a, 32 bits, kept non-negative so ids look like a vocabulary's.
		h := uint32(2166136261)
		for _, c := range text[i:min(i+4, len(text))] {
			h ^= uint32(c)
			h *= 16777619
		}
		ids = append(ids, int64(h&0x7fffffff))
	}
	return ids
}

// blockHashes are the chained hashes of tokens' full blocks: block i's hash covers block i-1's
// hash and its own ids, so equal hashes mean equal prefixes, as in vLLM's prefix cache. A
// trailing partial block is not cached, so it has no hash.
func blockHashes(tokens []int64, blockSize int) []uint64 {
	n := len(tokens) / blockSize
	hashes := make([]uint64, n)
	buf := make([]byte, 8*(blockSize+1))
	var parent uint64
	for i := range n {
		binary.LittleEndian.PutUint64(buf, parent)
		for j, t := range tokens[i*blockSize : (i+1)*blockSize] {
			binary.LittleEndian.PutUint64(buf[8*(j+1):], uint64(t))
		}
		parent = xxhash.Sum64(buf)
		hashes[i] = parent
	}
	return hashes
}

// prefixCache is an engine's KV blocks, by chained hash, with the least recently used evicted
// beyond capacity. It is not safe for concurrent use (the Server's lock guards it).
type prefixCache struct {
	capacity int
	lru      list.List // of *cachedBlock, most recently used first
	blocks   map[uint64]*list.Element
	nextID   int // block ids are opaque to the other side: a counter will do
}

type cachedBlock struct {
	hash uint64
	id   int
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, blocks: make(map[uint64]*list.Element)}
}

// hits is how many of hashes' leading blocks are cached: a prefix cache serves only a prefix,
// so the first miss ends the match.
func (c *prefixCache) hits(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// store caches hashes' blocks (or marks them used) and returns their block ids. The blocks are
// touched last to first, so the prefix is the most recently used: eviction then takes a
// sequence's tail before its head, as vLLM frees a request's blocks in reverse order, since a
// cached block is useless once a block before it is gone.
func (c *prefixCache) store(hashes []uint64) []int {
	ids := make([]int, len(hashes))
	for i := len(hashes) - 1; i >= 0; i-- {
		if e, ok := c.blocks[hashes[i]]; ok {
			c.lru.MoveToFront(e)
			ids[i] = e.Value.(*cachedBlock).id
			continue
		}
		ids[i] = c.newID()
		c.blocks[hashes[i]] = c.lru.PushFront(&cachedBlock{hash: hashes[i], id: ids[i]})
		if c.lru.Len() > c.capacity {
			old := c.lru.Remove(c.lru.Back()).(*cachedBlock)
			delete(c.blocks, old.hash)
		}
	}
	return ids
}

func (c *prefixCache) newID() int {
	c.nextID++
	return c.nextID
}
