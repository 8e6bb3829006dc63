package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpoolBody: a body in memory or spilled to a file reads back the same, from any offset,
// as often as asked; a body over the limit, announced or found while reading, is a
// MaxBytesError; a client that breaks off is its error; no file is ever left in the directory.
func TestSpoolBody(t *testing.T) {
	dir := t.TempDir()
	body := make([]byte, 100_000)
	for i := range body {
		body[i] = byte(i * 7)
	}
	spool := func(b []byte, chunked bool, limit int64, mem int) (*Spool, error) {
		r := httptest.NewRequest("POST", "/", bytes.NewReader(b))
		if chunked {
			r.ContentLength = -1
		}
		return SpoolBody(r, SpoolOptions{Limit: limit, Memory: mem, Dir: dir})
	}
	for _, tc := range []struct {
		name    string
		n, mem  int
		chunked bool
		onDisk  bool
	}{
		{"fits, announced", 1000, 4096, false, false},
		{"fits, chunked", 1000, 4096, true, false},
		{"exactly memory, chunked", 4096, 4096, true, false},
		{"one over memory, chunked", 4097, 4096, true, true},
		{"spilled, announced", 100_000, 4096, false, true},
		{"spilled, chunked", 100_000, 4096, true, true},
		{"empty", 0, 4096, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := spool(body[:tc.n], tc.chunked, 1<<20, tc.mem)
			require.NoError(t, err)
			defer s.Close()
			assert.EqualValues(t, tc.n, s.Size())
			assert.Equal(t, tc.onDisk, s.Bytes() == nil && tc.n > 0, "on disk")
			for range 2 {
				got, err := io.ReadAll(s.Section(0, s.Size()))
				require.NoError(t, err)
				assert.True(t, bytes.Equal(body[:tc.n], got))
			}
			require.NoError(t, iotest.TestReader(s.Section(0, s.Size()), body[:tc.n]))
			if tc.n > 10 { // across memory's end
				p := make([]byte, 10)
				off := int64(min(tc.mem, tc.n) - 5)
				n, err := s.ReadAt(p, off)
				require.Equal(t, min(10, tc.n-int(off)), n)
				if n == 10 {
					require.NoError(t, err)
				}
				assert.Equal(t, body[off:off+int64(n)], p[:n])
			}
			files, _ := os.ReadDir(dir)
			assert.Empty(t, files, "the file is unlinked at once")
			require.NoError(t, s.Close())
			require.NoError(t, s.Close(), "twice")
		})
	}

	var tooBig *http.MaxBytesError
	_, err := spool(body, false, 50_000, 4096)
	require.ErrorAs(t, err, &tooBig, "announced")
	_, err = spool(body, true, 50_000, 4096)
	require.ErrorAs(t, err, &tooBig, "found while reading")
	assert.EqualValues(t, 50_000, tooBig.Limit)
	s, err := spool(body[:50_000], true, 50_000, 4096)
	require.NoError(t, err, "exactly the limit")
	s.Close()

	broken := errors.New("client went away")
	r := httptest.NewRequest("POST", "/", io.MultiReader(bytes.NewReader(body[:20_000]), iotest.ErrReader(broken)))
	r.ContentLength = -1
	_, err = SpoolBody(r, SpoolOptions{Limit: 1 << 20, Memory: 4096, Dir: dir})
	require.ErrorIs(t, err, broken)
	assert.NotErrorIs(t, err, ErrSpool, "the client's failure, not the gateway's")
	r = httptest.NewRequest("POST", "/", bytes.NewReader(body[:20_000]))
	r.ContentLength = 30_000
	_, err = SpoolBody(r, SpoolOptions{Limit: 1 << 20, Memory: 40_000, Dir: dir})
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "shorter than announced")

	r = httptest.NewRequest("POST", "/", bytes.NewReader(body))
	_, err = SpoolBody(r, SpoolOptions{Limit: 1 << 20, Memory: 4096, Dir: dir + "/no-such-dir"})
	require.ErrorIs(t, err, ErrSpool, "no place to spool is the gateway's failure")
	files, _ := os.ReadDir(dir)
	assert.Empty(t, files)

	// A budget shared by spools: what they hold together stays under it, a body that would pass
	// it is refused whole, and what a spool held is given back when it is closed.
	budget := NewSpoolBudget(150_000)
	opts := SpoolOptions{Limit: 1 << 20, Memory: 4096, Dir: dir, Budget: budget}
	r = httptest.NewRequest("POST", "/", bytes.NewReader(body))
	a, err := SpoolBody(r, opts)
	require.NoError(t, err)
	r = httptest.NewRequest("POST", "/", bytes.NewReader(body))
	r.ContentLength = -1
	_, err = SpoolBody(r, opts)
	require.ErrorIs(t, err, ErrSpoolFull)
	r = httptest.NewRequest("POST", "/", bytes.NewReader(body[:40_000]))
	c, err := SpoolBody(r, opts)
	require.NoError(t, err, "what the refused one took was given back")
	assert.EqualValues(t, 10_000, budget.left.Load())
	require.NoError(t, a.Close())
	require.NoError(t, a.Close())
	require.NoError(t, c.Close())
	assert.EqualValues(t, 150_000, budget.left.Load(), "all given back, once")
	files, _ = os.ReadDir(dir)
	assert.Empty(t, files)
}
