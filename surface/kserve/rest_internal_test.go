package kserve

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/infergate/infergate/engines"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadBodyFailures covers body readers net/http never hands a handler through the real
// server: one that ends before its declared length with a plain EOF, and one that fails.
func TestReadBodyFailures(t *testing.T) {
	s := NewService(engines.NewRegistry(), WithMaxMessageBytes(100))
	read := func(body io.Reader, length int64) ([]byte, error) {
		r := httptest.NewRequest("POST", "/v2/models/m/infer", body)
		r.ContentLength = length
		return s.readBody(httptest.NewRecorder(), r, rawHeadroom)
	}
	_, err := read(strings.NewReader("abc"), 10)
	require.Error(t, err)
	assert.Equal(t, 400, restStatus(err))
	assert.Equal(t, "the request body ended early, after 3 of 10 bytes", restMessage(err))

	_, err = read(io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(errors.New("boom"))), -1)
	assert.Equal(t, "failed to read the request body after 2 bytes: boom", restMessage(err))

	buf, err := read(iotest.OneByteReader(strings.NewReader("0123456789")), 10)
	require.NoError(t, err)
	assert.Equal(t, "\x00\x00\x00\x000123456789", string(buf), "headroom, then the body")

	buf, err = read(iotest.HalfReader(strings.NewReader(strings.Repeat("x", 100))), -1)
	require.NoError(t, err)
	assert.Len(t, buf, rawHeadroom+100, "a body at the limit is accepted")
	_, err = read(strings.NewReader(strings.Repeat("x", 101)), -1)
	assert.Equal(t, 413, restStatus(err))
}

// TestReadBodyAllocatesFromBytesNotClaims checks what reading a body costs in allocations: a
// Content-Length claim is not an allocation size (10 bytes claimed as 1 GiB cost about 1 MiB), and
// a real 16 MiB body is read with a few short growth steps, not grown past its size.
func TestReadBodyAllocatesFromBytesNotClaims(t *testing.T) {
	s := NewService(engines.NewRegistry())
	allocated := func(body []byte, claim int64) uint64 {
		r := httptest.NewRequest("POST", "/v2/models/m/infer", bytes.NewReader(body))
		r.ContentLength = claim
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _ = s.readBody(httptest.NewRecorder(), r, rawHeadroom)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	assert.Less(t, allocated([]byte("0123456789"), 1<<30), uint64(2<<20), "a claim of 1 GiB with 10 bytes sent")
	body := make([]byte, 16<<20+100)
	assert.Less(t, allocated(body, int64(len(body))), uint64(len(body))+6<<20, "16 MiB: 1 MiB, 4 MiB, then the body's size")
}
