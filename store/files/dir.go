package files

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// Dir is a Store in a directory. Each file is one file named by its id: the content, then its
// description (JSON), then a 16-byte trailer (the description's length and a magic number).
// Keeping the description with the content, rather than in a second file, makes a replacement
// one rename: two Puts of one id racing (a finalizer taking over from a slow one) leave one
// whole file, never one's content with the other's description, and nothing is left behind.
// A reader that opened the old file keeps reading it after the rename (POSIX keeps the
// unlinked inode alive, and NFS clients do the same by renaming it aside).
//
// Puts write to a temporary file whose name starts with a dot (never a valid id, so never
// listed) and rename it into place. A process that dies mid-Put leaves that temporary file.
type Dir struct {
	path string
}

// Limits of the on-disk form.
const (
	trailerLen = 16
	maxDescLen = 64 << 10
	maxIDLen   = 128
)

// magic ends every stored file, so a stray file in the directory is never taken for one.
var magic = [8]byte{'I', 'G', 'F', 'I', 'L', 'E', '1', '\n'}

// NewDir returns a store in the directory at path, creating it if needed.
func NewDir(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o750); err != nil {
		return nil, fmt.Errorf("files: create directory: %w", err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("files: %s is not a directory", path)
	}
	return &Dir{path: path}, nil
}

// ValidID reports whether id can name a file or a batch: 1 to 128 of [A-Za-z0-9_-]. Ids come
// from clients (URL paths): no separator and no dot keeps them inside a directory and away from
// temporary files, and out of Redis key syntax (hash tags, separators).
func ValidID(id string) bool {
	if id == "" || len(id) > maxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// notFound is ErrNotFound for an id that cannot name a file, saying why.
func notFound(id string) error {
	return fmt.Errorf("%w: %q is not a valid file id (1 to %d of A-Z, a-z, 0-9, '_', '-')", ErrNotFound, id, maxIDLen)
}

// Put implements Store.
func (d *Dir) Put(ctx context.Context, f File, r io.Reader, limit int64) (File, error) {
	if !ValidID(f.ID) {
		return File{}, fmt.Errorf("files: put: %q is not a valid file id (1 to %d of A-Z, a-z, 0-9, '_', '-')", f.ID, maxIDLen)
	}
	if err := ctx.Err(); err != nil {
		return File{}, fmt.Errorf("files: put %s: %w", f.ID, err)
	}
	tmp, err := os.CreateTemp(d.path, ".put-*")
	if err != nil {
		return File{}, fmt.Errorf("files: put %s: %w", f.ID, err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()

	// The limit is enforced on the bytes read, whatever the request declared: one byte past it
	// is enough to know.
	src := io.Reader(ctxReader{ctx, r})
	if limit > 0 && limit < math.MaxInt64 {
		src = io.LimitReader(src, limit+1)
	}
	n, err := io.Copy(tmp, src)
	if err != nil {
		return File{}, fmt.Errorf("files: put %s: %w", f.ID, err)
	}
	if limit > 0 && n > limit {
		return File{}, fmt.Errorf("files: put %s: more than %d bytes: %w", f.ID, limit, ErrTooLarge)
	}
	f.Bytes = n
	desc, err := json.Marshal(f)
	if err != nil {
		return File{}, fmt.Errorf("files: put %s: %w", f.ID, err)
	}
	if len(desc) > maxDescLen {
		return File{}, fmt.Errorf("files: put %s: description of %d bytes (filename too long?)", f.ID, len(desc))
	}
	var trailer [trailerLen]byte
	binary.BigEndian.PutUint64(trailer[:8], uint64(len(desc)))
	copy(trailer[8:], magic[:])
	if _, err := tmp.Write(append(desc, trailer[:]...)); err != nil {
		return File{}, fmt.Errorf("files: put %s: %w", f.ID, err)
	}
	// Durable before it is visible: after a crash the id holds the old file or the whole new one.
	if err := tmp.Sync(); err != nil {
		return File{}, fmt.Errorf("files: put %s: %w", f.ID, err)
	}
	if err := tmp.Close(); err != nil {
		return File{}, fmt.Errorf("files: put %s: %w", f.ID, err)
	}
	if err := os.Rename(tmp.Name(), d.file(f.ID)); err != nil {
		return File{}, fmt.Errorf("files: put %s: %w", f.ID, err)
	}
	done = true
	d.syncDir()
	return f, nil
}

// syncDir makes the rename durable. Best effort: some file systems cannot sync a directory, and
// the file is in place for every reader either way.
func (d *Dir) syncDir() {
	if dir, err := os.Open(d.path); err == nil {
		_ = dir.Sync()
		_ = dir.Close()
	}
}

// Get implements Store.
func (d *Dir) Get(ctx context.Context, id string) (File, error) {
	if !ValidID(id) {
		return File{}, notFound(id)
	}
	f, err := d.open(id)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	desc, _, err := describe(f, id)
	return desc, err
}

// Open implements Store. The content read is the file's when Open was called, even if it is
// replaced or deleted while it is read.
func (d *Dir) Open(ctx context.Context, id string) (io.ReadCloser, error) {
	if !ValidID(id) {
		return nil, notFound(id)
	}
	f, err := d.open(id)
	if err != nil {
		return nil, err
	}
	desc, _, err := describe(f, id)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return content{io.NewSectionReader(f, 0, desc.Bytes), f}, nil
}

// Delete implements Store.
func (d *Dir) Delete(ctx context.Context, id string) error {
	if !ValidID(id) {
		return notFound(id)
	}
	if err := os.Remove(d.file(id)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("files: delete %s: %w", id, ErrNotFound)
		}
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	return nil
}

// List implements Store. Entries that are not stored files (temporary files, strays) are left
// out, and so are files deleted while the list is read.
func (d *Dir) List(ctx context.Context, o ListOptions) ([]File, bool, error) {
	entries, err := os.ReadDir(d.path) // sorted by name
	if err != nil {
		return nil, false, fmt.Errorf("files: list: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() && ValidID(e.Name()) {
			names = append(names, e.Name())
		}
	}
	if !o.Ascending {
		slices.Reverse(names)
	}
	if o.After != "" {
		// The first name past After in the list's order, whether After is still there or not.
		names = names[sort.Search(len(names), func(i int) bool {
			if o.Ascending {
				return names[i] > o.After
			}
			return names[i] < o.After
		}):]
	}
	var out []File
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("files: list: %w", err)
		}
		f, err := d.open(name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("files: list: %w", err)
		}
		desc, ours, err := describe(f, name)
		_ = f.Close()
		if !ours {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("files: list: %w", err)
		}
		if (o.Purpose != "" && desc.Purpose != o.Purpose) || (o.Keep != nil && !o.Keep(desc)) {
			continue
		}
		if o.Limit > 0 && len(out) == o.Limit {
			return out, true, nil
		}
		out = append(out, desc)
	}
	return out, false, nil
}

func (d *Dir) file(id string) string { return filepath.Join(d.path, id) }

func (d *Dir) open(id string) (*os.File, error) {
	f, err := os.Open(d.file(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("files: %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	return f, nil
}

// describe reads the description of the stored file f. ours is false when f does not end with
// the trailer (not a file Put wrote); err is then set too.
func describe(f *os.File, id string) (desc File, ours bool, err error) {
	st, err := f.Stat()
	if err != nil {
		return File{}, true, fmt.Errorf("files: %s: %w", id, err)
	}
	size := st.Size()
	var trailer [trailerLen]byte
	if size < trailerLen {
		return File{}, false, fmt.Errorf("files: %s: not a stored file", id)
	}
	if _, err := f.ReadAt(trailer[:], size-trailerLen); err != nil {
		return File{}, true, fmt.Errorf("files: %s: %w", id, err)
	}
	if !bytes.Equal(trailer[8:], magic[:]) {
		return File{}, false, fmt.Errorf("files: %s: not a stored file", id)
	}
	n := binary.BigEndian.Uint64(trailer[:8])
	if n > maxDescLen || int64(n) > size-trailerLen {
		return File{}, true, fmt.Errorf("files: %s: corrupt description length %d", id, n)
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, size-trailerLen-int64(n)); err != nil {
		return File{}, true, fmt.Errorf("files: %s: %w", id, err)
	}
	if err := json.Unmarshal(buf, &desc); err != nil {
		return File{}, true, fmt.Errorf("files: %s: corrupt description: %w", id, err)
	}
	if want := size - trailerLen - int64(n); desc.Bytes != want {
		return File{}, true, fmt.Errorf("files: %s: description says %d bytes, content has %d", id, desc.Bytes, want)
	}
	desc.ID = id
	return desc, true, nil
}

// content reads a stored file's content (not its description) and closes the file.
type content struct {
	*io.SectionReader
	f *os.File
}

func (c content) Close() error { return c.f.Close() }

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
