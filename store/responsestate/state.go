// Package responsestate keeps the Responses API's stored responses (POST /v1/responses with
// store, the default): each one's Response object, the input items its request gave, and the
// conversation that came before it, so that a request naming it as previous_response_id
// continues the conversation in one lookup, and GET /v1/responses/{id} and its input_items
// answer from it. A response belongs to the API key that made it: every method takes the
// caller's owner and treats another owner's response as absent, so an unknown id and a foreign
// one get the same answer.
//
// Two implementations of one Store: in-process (the default: Memory) and Redis (Redis: shared
// by every gateway replica, so that a follow-up on another replica finds the response its
// predecessor stored). Both bound what they keep (a record's size, the TTL, Memory's total) and
// pass the contract test suite of package responsestatetest, which a new implementation runs
// too.
//
// A lookup of a 22 KB record (BenchmarkGet, one caller) takes about 0.1 µs in Memory, which
// keeps the *Record it was given, and about 0.1 ms in Redis on loopback (one GET and a decode
// that copies the values out of the reply without parsing them); the targets were 20 µs and
// 1 ms.
package responsestate

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Record is one stored response.
type Record struct {
	ID    string // the Response's id (resp_…)
	Owner string // the API key's identity; "" when API keys are off
	Model string
	// CreatedAt is when the response was made; a store keeps it until CreatedAt plus its TTL.
	// Redis keeps it to the millisecond.
	CreatedAt time.Time
	// Response is the Response object as the client got it (the final one of a stream).
	Response json.RawMessage
	// Input is the request's input as items (a string input as the user message it stands
	// for), as GET .../input_items lists them.
	Input []json.RawMessage
	// Context is the conversation before this request: its previous response's Context, Input
	// and output items, oldest first; empty for a first turn. A continuation's context is
	// this record's Context, Input and output, which the caller assembles.
	Context []json.RawMessage
}

// Size is what a record weighs against a store's bounds: the bytes of its JSON values and
// strings.
func (r *Record) Size() int {
	n := len(r.ID) + len(r.Owner) + len(r.Model) + len(r.Response)
	for _, it := range r.Input {
		n += len(it)
	}
	for _, it := range r.Context {
		n += len(it)
	}
	return n
}

// Store keeps responses. Errors other than the ones below mean the store could not answer
// (Redis unreachable): the caller answers 503, never as if the response were absent.
type Store interface {
	// Put stores r, replacing the record of the same id (ids are the gateway's and never
	// reused, so that is the same owner's). A record over the store's MaxRecordBytes is
	// ErrTooLarge and nothing is stored or replaced; one that has expired already (CreatedAt
	// plus the TTL has passed) is not stored, and the record it replaces is gone. The store
	// keeps its own copy of nothing: r and its slices must not change after Put. A nil r or an
	// empty ID is an error.
	Put(ctx context.Context, r *Record) error
	// Get returns owner's response id; ErrNotFound when absent, expired or another owner's.
	// The record is the store's: read it, do not change it. Empty values and lists may come
	// back nil.
	Get(ctx context.Context, owner, id string) (*Record, error)
	// Delete removes owner's response id; ErrNotFound when absent, expired or another owner's
	// (which it leaves in place).
	Delete(ctx context.Context, owner, id string) error
}

// Errors a Store answers with.
var (
	ErrNotFound = errors.New("responsestate: no such response")
	ErrTooLarge = errors.New("responsestate: the response is over the store's bound on one record")
)

// Defaults of both stores' options.
const (
	// DefaultTTL is OpenAI's retention of stored responses: 30 days.
	DefaultTTL = 30 * 24 * time.Hour
	// DefaultMaxRecordBytes bounds one record: a conversation carried through
	// previous_response_id grows by each turn, and a chain past this is refused storing
	// (the answer is still given) rather than allowed to grow without end.
	DefaultMaxRecordBytes = 16 << 20
	// DefaultMaxBytes bounds Memory's total; the oldest records go first when it is reached.
	DefaultMaxBytes = 256 << 20
)
