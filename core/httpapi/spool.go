package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
)

// Spool is a request body read once from the client and then read as often as the gateway needs
// it (routing reads it, each attempt of a failover sends it): its first bytes in memory, the rest
// in a temporary file. An upload of any size up to the limit costs the gateway a bounded amount
// of memory, as nginx's request buffering does; the file is unlinked as soon as it is created,
// so nothing is left behind when the process dies, and its space is freed by Close.
type Spool struct {
	head   []byte
	file   *os.File // the bytes after head; nil when the body fit in memory
	size   int64
	budget *SpoolBudget // what size is counted against, until Close
}

// ErrSpool marks SpoolBody's failures that are the gateway's own (its temporary file could not
// be made or written), not the client's.
var ErrSpool = errors.New("spooling the request body")

// ErrSpoolFull is SpoolBody's error when the body would take its SpoolBudget past its cap.
var ErrSpoolFull = errors.New("the gateway holds as many request bodies as it may: retry later")

// SpoolOptions configures SpoolBody.
type SpoolOptions struct {
	// Limit is the largest body accepted.
	Limit int64
	// Memory is how many of the body's bytes are held in memory; the rest go to a file.
	Memory int
	// Dir is where the file is made; os.TempDir() when empty.
	Dir string
	// Budget, when set, caps the bytes of every spool that shares it, together.
	Budget *SpoolBudget
}

// SpoolBudget caps what the spools sharing it hold at once, in memory and on disk together: a
// server's bound on the space its concurrent uploads take, whatever each one's size.
type SpoolBudget struct{ left atomic.Int64 }

// NewSpoolBudget is a budget of n bytes.
func NewSpoolBudget(n int64) *SpoolBudget {
	b := &SpoolBudget{}
	b.left.Store(n)
	return b
}

// take reserves n bytes, or reports that they are not there.
func (b *SpoolBudget) take(n int64) bool {
	if b == nil {
		return true
	}
	if b.left.Add(-n) < 0 {
		b.left.Add(n)
		return false
	}
	return true
}

func (b *SpoolBudget) give(n int64) {
	if b != nil {
		b.left.Add(n)
	}
}

// spoolChunk is how much SpoolBody reads at a time.
const spoolChunk = 32 << 10

// SpoolBody reads r's body into a Spool: up to o.Memory bytes in memory, the rest in a file. A
// body over o.Limit (announced by Content-Length, or found so while reading) is an
// *http.MaxBytesError, one past o.Budget ErrSpoolFull, a failure of the file ErrSpool; on any
// error nothing is kept.
func SpoolBody(r *http.Request, o SpoolOptions) (*Spool, error) {
	s, whole, err := SpoolHead(r, o)
	if err != nil || whole {
		return s, err
	}
	if err := SpoolRest(s, r, o); err != nil {
		return nil, err
	}
	return s, nil
}

// SpoolHead is SpoolBody's first part: it reads r's body into a Spool until o.Memory bytes are in
// memory, and whole reports whether that is all of it. It leaves r.Body bounded by o.Limit, as
// the rest of the body is to be read: SpoolBody spools it; a caller that has learnt what it
// needs from the head may read it from r.Body as it comes instead.
func SpoolHead(r *http.Request, o SpoolOptions) (_ *Spool, whole bool, err error) {
	if r.ContentLength > o.Limit {
		return nil, false, &http.MaxBytesError{Limit: o.Limit}
	}
	mem := int64(max(o.Memory, 0))
	s := &Spool{budget: o.Budget}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if r.ContentLength >= 0 && r.ContentLength <= mem {
		if !s.grow(r.ContentLength) {
			return nil, false, ErrSpoolFull
		}
		s.head = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, s.head); err != nil {
			return nil, false, err
		}
		return s, true, nil
	}
	if r.ContentLength > 0 {
		s.head = make([]byte, 0, mem) // it will fill
	}
	r.Body = http.MaxBytesReader(nil, r.Body, o.Limit)
	chunk := make([]byte, min(spoolChunk, mem))
	for int64(len(s.head)) < mem {
		n, rerr := r.Body.Read(chunk[:min(int64(len(chunk)), mem-int64(len(s.head)))])
		if n > 0 {
			if !s.grow(int64(n)) {
				return nil, false, ErrSpoolFull
			}
			if len(s.head)+n > cap(s.head) {
				// A body of unknown length gets a chunk's room, then, past that, mem's: append's
				// growth by a quarter would allocate five times mem on the way to it.
				size := min(max(int64(len(s.head)+n), spoolChunk), mem)
				if cap(s.head) > 0 {
					size = mem
				}
				next := make([]byte, len(s.head), size)
				copy(next, s.head)
				s.head = next
			}
			s.head = append(s.head, chunk[:n]...)
		}
		if rerr == io.EOF {
			return s, true, nil
		}
		if rerr != nil {
			return nil, false, rerr
		}
	}
	return s, false, nil
}

// SpoolRest reads the rest of r's body, which SpoolHead began in s, into s's file; on an error
// (as SpoolBody's) s is closed.
func SpoolRest(s *Spool, r *http.Request, o SpoolOptions) (err error) {
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	chunk := make([]byte, spoolChunk)
	for {
		n, rerr := r.Body.Read(chunk)
		if n > 0 {
			if !s.grow(int64(n)) {
				return ErrSpoolFull
			}
			if err := s.write(chunk[:n], o.Dir); err != nil {
				return fmt.Errorf("%w: %w", ErrSpool, err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// grow counts n more bytes against the budget.
func (s *Spool) grow(n int64) bool {
	if !s.budget.take(n) {
		return false
	}
	s.size += n
	return true
}

// write appends p, already counted in size, to the file, making it first. The file is unlinked
// at once: the open file is all that holds its space.
func (s *Spool) write(p []byte, dir string) error {
	if s.file == nil {
		f, err := os.CreateTemp(dir, "infergate-body-*")
		if err != nil {
			return err
		}
		if err := os.Remove(f.Name()); err != nil {
			f.Close()
			return err
		}
		s.file = f
	}
	_, err := s.file.Write(p)
	return err
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
	s.budget.give(s.size)
	s.budget = nil // given back once
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return err
}
