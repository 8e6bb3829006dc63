package batchstate

import (
	"context"
	"fmt"
	"testing"

	"github.com/infergate/infergate/store/files"
	"github.com/stretchr/testify/require"
)

// The internal tests' helpers (batchstatetest has its own, for the contract).

func newBatch(status Status) *Batch {
	return &Batch{
		ID:               files.NewID("batch_"),
		Endpoint:         "/v1/chat/completions",
		InputFileID:      files.NewID("file-"),
		CompletionWindow: "24h",
		Status:           status,
		CreatedAt:        1700000000,
	}
}

func create(t *testing.T, s Store, status Status) *Batch {
	t.Helper()
	b := newBatch(status)
	require.NoError(t, s.Create(context.Background(), b))
	return b
}

func setStatus(t *testing.T, s Store, id string, status Status) {
	t.Helper()
	_, err := s.Update(context.Background(), id, func(b *Batch) error {
		b.Status = status
		return nil
	})
	require.NoError(t, err)
}

func ids(bs []*Batch) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.ID
	}
	return out
}

func results(prefix string, from, to int, kind ResultKind) []Result {
	var out []Result
	for i := from; i < to; i++ {
		out = append(out, Result{CustomID: fmt.Sprintf("%s%d", prefix, i), Kind: kind, Line: fmt.Appendf(nil, `{"i":%d}`, i)})
	}
	return out
}

// collect returns every result, by custom id, failing on a custom id seen twice.
func collect(t *testing.T, s Store, id string) map[string]Result {
	t.Helper()
	out := map[string]Result{}
	require.NoError(t, s.Results(context.Background(), id, func(r Result) error {
		if _, dup := out[r.CustomID]; dup {
			t.Errorf("result %q seen twice", r.CustomID)
		}
		r.Line = append([]byte(nil), r.Line...)
		out[r.CustomID] = r
		return nil
	}))
	return out
}
