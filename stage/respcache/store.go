package respcache

import (
	"context"
	"errors"
)

// Store keeps one model's cached responses: an in-process Memory, or Redis shared by replicas.
// Responses are opaque to a Store (the stage's normalised answers); keys and partitions are the
// stage's hashes. A Store holds one model's entries, so Flush empties that model's cache.
//
// Errors mean the store could not answer (Redis unreachable or slow): the stage then bypasses
// the cache for the request. An absent entry is not an error.
type Store interface {
	// Get returns the response stored under key; nil when there is none (or it expired).
	Get(ctx context.Context, key string) ([]byte, error)
	// Nearest returns the entry of partition whose vector is the most similar to v (cosine;
	// v is L2-normalised), with its response and words when the similarity is at least min. A
	// Match with a zero Similarity means the partition has no entry with a vector of v's length.
	Nearest(ctx context.Context, partition string, v []float32, min float32) (Match, error)
	// Put stores e, replacing any entry under its key. It returns once e is visible to Get and
	// Nearest through this store (and, for a shared store, written where others read it).
	Put(ctx context.Context, e Entry) error
	// Flush removes every entry and returns how many there were (as far as the store can count).
	Flush(ctx context.Context) (int, error)
	// Stats are the store's counts for the metrics, cheap to read.
	Stats() Stats
}

// Entry is one cached response.
type Entry struct {
	// Key is the exact key (model, owner, the request's hash).
	Key string
	// Partition and Vector place the entry in semantic search: the requests it may answer share
	// Partition, and Vector embeds their last user message (L2-normalised). Both empty in exact
	// mode, or when the request had no text to embed.
	Partition string
	Vector    []float32
	// Words are the embedded text's words (wordsOf), which a semantic hit must have the same of
	// when the embedder is not an embeddings model; empty when not checked.
	Words string
	// Response is the stored answer.
	Response []byte
}

// Match is what Nearest found.
type Match struct {
	// Key and Response are the entry's; Response is nil when Similarity is below the minimum.
	Key      string
	Response []byte
	// Words are the entry's Words, with its Response.
	Words string
	// Similarity is the nearest entry's cosine similarity to the query; 0 when none.
	Similarity float32
}

// Stats are a store's counts, as far as this process knows them.
type Stats struct {
	// Entries and Bytes are what the store holds (Redis: the entries this replica indexes).
	Entries, Bytes int64
	// Evictions counts entries removed to stay within the bounds (not expiries, not Flush).
	Evictions int64
}

// ErrTooLarge is Put's error for an entry bigger than the store's bounds allow.
var ErrTooLarge = errors.New("respcache: entry larger than the store's bound")

// size is what an entry costs a store, approximately: its bytes and a fixed overhead for the
// bookkeeping around it (map slot, list links, index row).
func (e *Entry) size() int64 {
	return int64(len(e.Key)+len(e.Partition)+4*len(e.Vector)+len(e.Words)+len(e.Response)) + entryOverhead
}

const entryOverhead = 160
