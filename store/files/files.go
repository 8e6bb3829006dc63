// Package files stores the files of OpenAI's Files API (batch inputs, outputs and errors): a
// Store interface, ready for an object store, and Dir, a directory (a shared volume when batch
// workers run on several machines).
package files

import (
	"context"
	"errors"
	"io"
)

// File describes a stored file, as OpenAI's file object does.
type File struct {
	ID        string `json:"id"`
	Bytes     int64  `json:"bytes"`
	CreatedAt int64  `json:"created_at"`
	Filename  string `json:"filename"`
	Purpose   string `json:"purpose"`
	// Owner names the API key that uploaded the file, or whose batch wrote it ("" with API
	// keys off); the HTTP API shows a file only to its owner and to admin keys.
	Owner string `json:"owner,omitempty"`
}

// Errors of stores.
var (
	ErrNotFound = errors.New("files: no such file")
	// ErrTooLarge: the content passed the size limit given to Put; nothing is stored.
	ErrTooLarge = errors.New("files: file too large")
)

// Store keeps files. Every method is safe for concurrent use, across processes sharing the store.
type Store interface {
	// Put stores r's content under f.ID, replacing any file of that id whole (readers see the old
	// or the new content, never a mix), and returns f with Bytes set. More than limit bytes
	// (when limit > 0) is ErrTooLarge.
	Put(ctx context.Context, f File, r io.Reader, limit int64) (File, error)
	// Get returns the file's description; ErrNotFound if there is none.
	Get(ctx context.Context, id string) (File, error)
	// Open returns the file's content; ErrNotFound if there is none.
	Open(ctx context.Context, id string) (io.ReadCloser, error)
	// Delete removes the file; ErrNotFound if there is none.
	Delete(ctx context.Context, id string) error
	// List returns the files o selects, by id, descending unless o.Ascending (ids of uploads sort
	// by creation time: newest first), and whether more follow the last (with o.Limit).
	List(ctx context.Context, o ListOptions) (files []File, more bool, err error)
}

// ListOptions selects the files List returns. A page costs the files it reads, not the store's
// size: a store lists ids in order and starts after After, as object stores do.
type ListOptions struct {
	// Purpose keeps the files of this purpose; "" keeps every one.
	Purpose string
	// Keep, when set, keeps only the files it accepts (an owner's, say).
	Keep func(File) bool
	// After starts the list after this id, in the list's order; it need not exist any more.
	After string
	// Ascending lists ids ascending; by default they are descending.
	Ascending bool
	// Limit, when > 0, ends the list at that many files.
	Limit int
}
