package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// Spool is a request body read once from the client and then read as often as the gateway needs
// it (routing reads it, each attempt of a failover sends it): its first bytes in memory, the rest
// in a temporary file. An upload of any size up to the limit costs the gateway a bounded amount
// of memory, as nginx's request buffering does; the file is unlinked as soon as it is created,
// so nothing is left behind when the process dies, and its space is freed by Close.
type Spool struct {
	head []byte
	file *os.File // the bytes after head; nil when the body fit in memory
	size int64
}

// ErrSpool marks SpoolBody's failures that are the gateway's own (its temporary file could not
// be made or written), not the client's.
var ErrSpool = errors.New("spooling the request body")

// SpoolBody reads r's body into a Spool: up to memLimit bytes in memory, the rest in a file in
// dir (os.TempDir() when empty). A body over limit (announced by Content-Length, or found so while
// reading) is an *http.MaxBytesError, with nothing kept.
func SpoolBody(r *http.Request, limit int64, memLimit int, dir string) (*Spool, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if memLimit < 0 || int64(memLimit) > limit {
		memLimit = int(limit)
	}
	s := &Spool{}
	if r.ContentLength >= 0 && r.ContentLength <= int64(memLimit) {
		s.head = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, s.head); err != nil {
			return nil, err
		}
		s.size = r.ContentLength
		return s, nil
	}
	// Unknown length, or more than memory holds: fill the head (growing as it reads, so that a
	// small chunked body costs its size), then the file with whatever follows.
	var head bytes.Buffer
	if r.ContentLength > 0 {
		head.Grow(memLimit)
	}
	if _, err := head.ReadFrom(io.LimitReader(r.Body, int64(memLimit))); err != nil {
		return nil, err
	}
	s.head, s.size = head.Bytes(), int64(head.Len())
	if s.size < int64(memLimit) {
		return s, nil // the body ended in memory's bound
	}
	var first [1]byte
	switch n, err := io.ReadFull(r.Body, first[:]); {
	case n == 0 && (err == io.EOF || err == io.ErrUnexpectedEOF):
		return s, nil // exactly memLimit bytes
	case err != nil:
		return nil, err
	}
	f, err := os.CreateTemp(dir, "infergate-body-*")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSpool, err)
	}
	// Unlinked at once: the open file is all that holds its space.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", ErrSpool, err)
	}
	s.file = f
	rest := limit - s.size // what the file may hold
	n, err := io.Copy(f, io.MultiReader(bytes.NewReader(first[:]), io.LimitReader(r.Body, rest)))
	s.size += n
	switch {
	case err != nil:
		s.Close()
		var pe *os.PathError
		if errors.As(err, &pe) { // the file's, not the client's
			err = fmt.Errorf("%w: %w", ErrSpool, err)
		}
		return nil, err
	case n > rest:
		s.Close()
		return nil, &http.MaxBytesError{Limit: limit}
	}
	return s, nil
}

// NewSpool is a Spool of bytes already in memory (a body read otherwise, a test's form).
func NewSpool(b []byte) *Spool { return &Spool{head: b, size: int64(len(b))} }

// Size is the body's length in bytes.
func (s *Spool) Size() int64 { return s.size }

// Bytes is the whole body when it is all in memory, and nil when part of it is in the file.
func (s *Spool) Bytes() []byte {
	if s.file != nil {
		return nil
	}
	return s.head
}

// ReadAt reads the body's bytes at off, from memory or the file, as io.ReaderAt has it.
func (s *Spool) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("httpapi.Spool.ReadAt: negative offset")
	}
	n := 0
	if off < int64(len(s.head)) {
		n = copy(p, s.head[off:])
		off += int64(n)
	}
	if n == len(p) {
		return n, nil
	}
	if s.file == nil {
		return n, io.EOF
	}
	m, err := s.file.ReadAt(p[n:], off-int64(len(s.head)))
	return n + m, err
}

// Section is a reader of the body's bytes [off, off+n), from its own offset: readers of one
// Spool do not disturb each other.
func (s *Spool) Section(off, n int64) *io.SectionReader { return io.NewSectionReader(s, off, n) }

// Close frees the file's space; the Spool must not be read after. It is safe to call more than
// once, and on a Spool held only in memory.
func (s *Spool) Close() error {
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return err
}
