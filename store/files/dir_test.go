package files

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var _ Store = (*Dir)(nil)

func newDir(t *testing.T) (*Dir, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "files")
	d, err := NewDir(path)
	require.NoError(t, err)
	return d, path
}

func put(t *testing.T, d *Dir, id, purpose, content string) File {
	t.Helper()
	f, err := d.Put(context.Background(), File{ID: id, CreatedAt: 1700000000, Filename: id + ".jsonl", Purpose: purpose}, strings.NewReader(content), 0)
	require.NoError(t, err)
	return f
}

func read(t *testing.T, d *Dir, id string) string {
	t.Helper()
	rc, err := d.Open(context.Background(), id)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return string(b)
}

// entries lists the directory's names, temporary files included.
func entries(t *testing.T, path string) []string {
	t.Helper()
	es, err := os.ReadDir(path)
	require.NoError(t, err)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestDirPutGetOpenDelete(t *testing.T) {
	d, path := newDir(t)
	ctx := context.Background()
	content := "{\"custom_id\":\"a\"}\n{\"custom_id\":\"b\"}\n"
	f, err := d.Put(ctx, File{ID: "file-1", CreatedAt: 1700000000, Filename: "in.jsonl", Purpose: "batch"},
		strings.NewReader(content), 1<<20)
	require.NoError(t, err)
	want := File{ID: "file-1", Bytes: int64(len(content)), CreatedAt: 1700000000, Filename: "in.jsonl", Purpose: "batch"}
	assert.Equal(t, want, f, "Put sets Bytes")

	got, err := d.Get(ctx, "file-1")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, content, read(t, d, "file-1"), "Open returns the content, not the description")
	assert.Equal(t, []string{"file-1"}, entries(t, path), "one file, no temporary left")

	empty := put(t, d, "empty", "batch_output", "")
	assert.Zero(t, empty.Bytes)
	assert.Equal(t, "", read(t, d, "empty"))

	require.NoError(t, d.Delete(ctx, "file-1"))
	_, err = d.Get(ctx, "file-1")
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = d.Open(ctx, "file-1")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorIs(t, d.Delete(ctx, "file-1"), ErrNotFound)
	_, err = d.Get(ctx, "never")
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestDirList(t *testing.T) {
	d, _ := newDir(t)
	ctx := context.Background()
	got, _, err := d.List(ctx, ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, got)

	var made []string
	for i, purpose := range []string{"batch", "batch_output", "batch", "batch_output", "batch"} {
		id := NewID("file-")
		made = append(made, id)
		put(t, d, id, purpose, strings.Repeat("x", i))
	}
	ids := func(fs []File) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	got, _, err = d.List(ctx, ListOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{made[4], made[3], made[2], made[1], made[0]}, ids(got), "newest first")
	assert.Equal(t, int64(3), got[1].Bytes)
	assert.Equal(t, "batch_output", got[1].Purpose)

	got, _, err = d.List(ctx, ListOptions{Purpose: "batch"})
	require.NoError(t, err)
	assert.Equal(t, []string{made[4], made[2], made[0]}, ids(got))
	got, _, err = d.List(ctx, ListOptions{Purpose: "batch_output"})
	require.NoError(t, err)
	assert.Equal(t, []string{made[3], made[1]}, ids(got))
	got, _, err = d.List(ctx, ListOptions{Purpose: "assistants"})
	require.NoError(t, err)
	assert.Empty(t, got)

	// Pages: in either order, after an id (there or deleted), up to a limit, with a filter.
	got, more, err := d.List(ctx, ListOptions{Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{made[4], made[3]}, ids(got))
	assert.True(t, more)
	got, more, err = d.List(ctx, ListOptions{After: made[3], Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{made[2], made[1]}, ids(got))
	assert.True(t, more)
	got, more, err = d.List(ctx, ListOptions{After: made[1], Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{made[0]}, ids(got))
	assert.False(t, more)
	got, more, err = d.List(ctx, ListOptions{Ascending: true, After: made[1], Limit: 2})
	require.NoError(t, err)
	assert.Equal(t, []string{made[2], made[3]}, ids(got))
	assert.True(t, more)
	got, _, err = d.List(ctx, ListOptions{Purpose: "batch", Limit: 2, Keep: func(f File) bool { return f.ID != made[4] }})
	require.NoError(t, err)
	assert.Equal(t, []string{made[2], made[0]}, ids(got))
	require.NoError(t, d.Delete(ctx, made[2]))
	got, _, err = d.List(ctx, ListOptions{After: made[2]})
	require.NoError(t, err)
	assert.Equal(t, []string{made[1], made[0]}, ids(got), "after a deleted id")
}

// A replacement is whole: a reader that opened the old content reads all of it, later readers
// the new one.
func TestDirReplaceWhileReading(t *testing.T) {
	d, path := newDir(t)
	old := strings.Repeat("old line\n", 10000)
	put(t, d, "file-x", "batch_output", old)
	rc, err := d.Open(context.Background(), "file-x")
	require.NoError(t, err)
	defer rc.Close()
	head := make([]byte, 100)
	_, err = io.ReadFull(rc, head)
	require.NoError(t, err)

	f := put(t, d, "file-x", "batch_output", "new\n")
	assert.Equal(t, int64(4), f.Bytes)
	assert.Equal(t, "new\n", read(t, d, "file-x"))
	got, err := d.Get(context.Background(), "file-x")
	require.NoError(t, err)
	assert.Equal(t, int64(4), got.Bytes, "the description is the new one")

	rest, err := io.ReadAll(rc)
	require.NoError(t, err)
	assert.Equal(t, old, string(head)+string(rest), "the early reader read the old content, whole")
	assert.Equal(t, []string{"file-x"}, entries(t, path))
}

// The limit is enforced on the bytes read: past it, nothing is stored and nothing is left behind,
// and an older file of the id stays.
func TestDirLimit(t *testing.T) {
	d, path := newDir(t)
	ctx := context.Background()
	f, err := d.Put(ctx, File{ID: "exact"}, strings.NewReader("12345"), 5)
	require.NoError(t, err, "exactly the limit is fine")
	assert.Equal(t, int64(5), f.Bytes)

	_, err = d.Put(ctx, File{ID: "big"}, strings.NewReader("123456"), 5)
	assert.ErrorIs(t, err, ErrTooLarge)
	_, err = d.Get(ctx, "big")
	assert.ErrorIs(t, err, ErrNotFound)

	// A reader that would go on forever is cut at the limit.
	_, err = d.Put(ctx, File{ID: "exact"}, io.LimitReader(zeros{}, 1<<40), 1<<16)
	assert.ErrorIs(t, err, ErrTooLarge)
	assert.Equal(t, "12345", read(t, d, "exact"), "a refused replacement keeps the old file")
	assert.Equal(t, []string{"exact"}, entries(t, path), "no temporary file left")
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// failing returns some bytes, then an error.
type failing struct{ n int }

func (f *failing) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("connection reset")
	}
	n := min(f.n, len(p))
	f.n -= n
	return n, nil
}

func TestDirFailedPutLeavesNothing(t *testing.T) {
	d, path := newDir(t)
	ctx := context.Background()
	put(t, d, "f", "batch", "kept")
	_, err := d.Put(ctx, File{ID: "f"}, &failing{n: 1000}, 0)
	require.ErrorContains(t, err, "connection reset")
	assert.Equal(t, "kept", read(t, d, "f"))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = d.Put(cctx, File{ID: "g"}, strings.NewReader("x"), 0)
	assert.ErrorIs(t, err, context.Canceled)

	// A client that goes away mid-upload: the copy stops there (not at the limit, which only
	// keeps a broken copy from filling the disk).
	cctx, cancel = context.WithCancel(ctx)
	_, err = d.Put(cctx, File{ID: "g"}, cancelling{cancel}, 64<<20)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"f"}, entries(t, path), "nothing stored, no temporary left")
}

// cancelling reads zeros forever, cancelling its context on the first read.
type cancelling struct{ cancel func() }

func (c cancelling) Read(p []byte) (int, error) {
	c.cancel()
	return zeros{}.Read(p)
}

func TestDirBadIDs(t *testing.T) {
	d, path := newDir(t)
	ctx := context.Background()
	outside := filepath.Join(filepath.Dir(path), "escaped")
	for _, id := range []string{"", "../escaped", "..", ".", "a/b", "/etc/passwd", ".hidden", "a.b", "a b", "é",
		"a\x00b", "a\\b", strings.Repeat("x", 129)} {
		_, err := d.Put(ctx, File{ID: id}, strings.NewReader("x"), 0)
		require.Error(t, err, "put %q", id)
		assert.Contains(t, err.Error(), "not a valid file id", "put %q", id)
		_, err = d.Get(ctx, id)
		assert.ErrorIs(t, err, ErrNotFound, "get %q", id)
		_, err = d.Open(ctx, id)
		assert.ErrorIs(t, err, ErrNotFound, "open %q", id)
		assert.ErrorIs(t, d.Delete(ctx, id), ErrNotFound, "delete %q", id)
	}
	assert.Empty(t, entries(t, path))
	assert.NoFileExists(t, outside)

	long := strings.Repeat("x", 128)
	put(t, d, long, "batch", "ok")
	assert.Equal(t, "ok", read(t, d, long), "128 characters is fine")
	put(t, d, "Az09_-", "batch", "ok")
}

// Two Dir values on one directory (two processes on a shared volume) see each other's files.
func TestDirTwoValues(t *testing.T) {
	a, path := newDir(t)
	b, err := NewDir(path)
	require.NoError(t, err)
	ctx := context.Background()
	put(t, a, "from-a", "batch", "A")
	put(t, b, "from-b", "batch", "B")
	assert.Equal(t, "A", read(t, b, "from-a"))
	assert.Equal(t, "B", read(t, a, "from-b"))
	la, _, err := a.List(ctx, ListOptions{})
	require.NoError(t, err)
	lb, _, err := b.List(ctx, ListOptions{})
	require.NoError(t, err)
	assert.Len(t, la, 2)
	assert.Equal(t, la, lb)
	require.NoError(t, b.Delete(ctx, "from-a"))
	_, err = a.Get(ctx, "from-a")
	assert.ErrorIs(t, err, ErrNotFound)
	put(t, b, "from-b", "batch", "B2")
	assert.Equal(t, "B2", read(t, a, "from-b"))
}

// Files Put did not write (strays, temporaries of a Put in progress or of a process that died)
// are not listed.
func TestDirIgnoresStrays(t *testing.T) {
	d, path := newDir(t)
	ctx := context.Background()
	put(t, d, "real", "batch", "content")
	require.NoError(t, os.WriteFile(filepath.Join(path, "README"), []byte("not ours"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(path, "tiny"), []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(path, ".put-123"), []byte("partial"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(path, "subdir"), 0o700))
	got, _, err := d.List(ctx, ListOptions{})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "real", got[0].ID)
	_, err = d.Get(ctx, "README")
	require.Error(t, err)
	_, err = d.Open(ctx, "tiny")
	require.Error(t, err)

	// A stored file whose description was damaged is an error, not a silent skip.
	raw, err := os.ReadFile(filepath.Join(path, "real"))
	require.NoError(t, err)
	raw = bytes.Replace(raw, []byte(`"bytes":7`), []byte(`"bytes":8`), 1)
	require.NoError(t, os.WriteFile(filepath.Join(path, "real"), raw, 0o600))
	_, err = d.Get(ctx, "real")
	assert.ErrorContains(t, err, "content has 7")
	_, _, err = d.List(ctx, ListOptions{})
	require.Error(t, err)
}

func TestNewDirNotADirectory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	_, err := NewDir(p)
	require.Error(t, err)
}
