package batchstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/infergate/infergate/store/files"
)

// maxUpdateTries bounds how often Update runs fn when others keep changing the batch first.
const maxUpdateTries = 50

// validID reports whether id can name a batch: the rule of file ids.
func validID(id string) bool { return files.ValidID(id) }

func validStatus(s Status) bool {
	switch s {
	case Validating, Failed, InProgress, Finalizing, Completed, Expired, Cancelling, Cancelled:
		return true
	}
	return false
}

// checkNew validates a batch given to Create.
func checkNew(b *Batch) error {
	if b == nil {
		return errors.New("batchstate: create: nil batch")
	}
	if !validID(b.ID) {
		return fmt.Errorf("batchstate: create: %q is not a valid batch id (1 to 128 of A-Z, a-z, 0-9, '_', '-')", b.ID)
	}
	if !validStatus(b.Status) {
		return fmt.Errorf("batchstate: create %s: unknown status %q", b.ID, b.Status)
	}
	return nil
}

// checkResults validates results given to Record before any is stored.
func checkResults(id string, results []Result) error {
	for _, r := range results {
		if r.Kind < Output || r.Kind > Skipped {
			return fmt.Errorf("batchstate: record %s: line %q has unknown result kind %d", id, r.CustomID, r.Kind)
		}
	}
	return nil
}

// encodeBatch is the stored form of b: its JSON without counts, which the stores keep apart so
// that Record never touches the object Update rewrites.
func encodeBatch(b *Batch) ([]byte, error) {
	c := *b
	c.Counts = Counts{}
	data, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("batchstate: encode batch %s: %w", b.ID, err)
	}
	return data, nil
}

func decodeBatch(id string, data []byte, counts Counts) (*Batch, error) {
	b := new(Batch)
	if err := json.Unmarshal(data, b); err != nil {
		return nil, fmt.Errorf("batchstate: decode batch %s: %w", id, err)
	}
	b.Counts = counts
	return b, nil
}

// apply runs fn on a fresh copy of the stored batch (data, counts). It returns the batch to
// store and true, or the stored batch and false when fn returned ErrUnchanged. Of the counts,
// the stores take only Total from the batch returned.
func apply(id string, data []byte, counts Counts, fn func(*Batch) error) (*Batch, bool, error) {
	b, err := decodeBatch(id, data, counts)
	if err != nil {
		return nil, false, err
	}
	if err := fn(b); err != nil {
		if errors.Is(err, ErrUnchanged) {
			cur, derr := decodeBatch(id, data, counts) // fn may have changed b before giving up
			return cur, false, derr
		}
		return nil, false, err
	}
	if b.ID != id {
		return nil, false, fmt.Errorf("batchstate: update %s: the update changed the id to %q", id, b.ID)
	}
	if !validStatus(b.Status) {
		return nil, false, fmt.Errorf("batchstate: update %s: unknown status %q", id, b.Status)
	}
	return b, true, nil
}

// backoff waits before Update's next try after the attempt-th conflict: not at all after the
// first (the state just read is fresh), then a jittered, exponentially growing while (capped at
// 20 ms), so contenders spread out instead of colliding again. It reports whether it waited:
// then the state read at the conflict is stale and must be read again.
func backoff(ctx context.Context, attempt int) (waited bool, err error) {
	if attempt <= 1 {
		return false, nil
	}
	d := rand.N(min(50*time.Microsecond<<min(attempt, 20), 20*time.Millisecond))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true, ctx.Err()
	case <-t.C:
		return true, nil
	}
}

// resultValue is a result's stored form: its kind's byte, then its line.
func resultValue(r Result) string {
	v := make([]byte, 1+len(r.Line))
	v[0] = byte(r.Kind)
	copy(v[1:], r.Line)
	return string(v)
}
