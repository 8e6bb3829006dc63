package tensor

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// frameLE is an independent reference encoder for BYTES framing.
func frameLE(elems ...string) []byte {
	var b bytes.Buffer
	for _, e := range elems {
		var l [4]byte
		binary.LittleEndian.PutUint32(l[:], uint32(len(e)))
		b.Write(l[:])
		b.WriteString(e)
	}
	return append([]byte{}, b.Bytes()...)
}

func TestBytesFramingLiteral(t *testing.T) {
	want := []byte{2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0, 1, 0, 0, 0, 0}
	assert.Equal(t, want, JoinBytes([]string{"ab", "", "\x00"}))
	assert.Equal(t, want, JoinBytes([][]byte{[]byte("ab"), nil, {0}}))
	assert.Equal(t, want, AppendBytes(AppendBytes(AppendBytes(nil, []byte("ab")), nil), []byte{0}))
	assert.Equal(t, want, frameLE("ab", "", "\x00"))

	long := strings.Repeat("x", 0x010203)
	assert.Equal(t, []byte{0x03, 0x02, 0x01, 0x00}, JoinBytes([]string{long})[:4])
}

func TestBytesRoundTrip(t *testing.T) {
	many := make([]string, 3000) // more than SplitBytes' initial capacity
	for i := range many {
		many[i] = strings.Repeat("m", i%7)
	}
	cases := []struct {
		name  string
		elems []string
	}{
		{"no elements", []string{}},
		{"one empty string", []string{""}},
		{"several empty strings", []string{"", "", ""}},
		{"ascii", []string{"1", "22", "333"}},
		{"embedded NULs", []string{"a\x00b", "\x00", "\x00\x00\x00\x00", "end\x00"}},
		{"non-UTF-8", []string{"\xff\xfe", "\x80", "\xc3\x28", "valid é"}},
		{"looks like a length prefix", []string{"\x04\x00\x00\x00", "\xff\xff\xff\xff"}},
		{"large element", []string{strings.Repeat("z", 70000), ""}},
		{"many elements", many},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wire := frameLE(tc.elems...)
			assert.Equal(t, wire, JoinBytes(tc.elems))
			bs := make([][]byte, len(tc.elems))
			var appended []byte
			for i, e := range tc.elems {
				bs[i] = []byte(e)
				appended = AppendBytes(appended, []byte(e))
			}
			assert.Equal(t, wire, JoinBytes(bs))
			assert.Equal(t, wire, append([]byte{}, appended...))

			n, err := CountBytes(wire)
			require.NoError(t, err)
			assert.Equal(t, len(tc.elems), n)

			got, err := SplitBytes(wire)
			require.NoError(t, err)
			require.Len(t, got, len(tc.elems))
			for i := range got {
				assert.Equal(t, tc.elems[i], string(got[i]), "element %d", i)
			}
			assert.Equal(t, wire, JoinBytes(got))
		})
	}
}

func TestSplitBytesAliasesInput(t *testing.T) {
	wire := JoinBytes([]string{"abc", "de", "f"})
	orig := bytes.Clone(wire)
	got, err := SplitBytes(wire)
	require.NoError(t, err)
	require.Len(t, got, 3)
	// Elements are subslices of the input, not copies.
	assert.Same(t, &wire[4], &got[0][0])
	assert.Same(t, &wire[4+3+4], &got[1][0])
	// Their capacity ends at the element, so appending to one cannot overwrite the next frame.
	for i, e := range got {
		assert.Equal(t, len(e), cap(e), "element %d", i)
	}
	_ = append(got[0], 'X', 'X', 'X', 'X')
	assert.Equal(t, orig, wire)
}

func TestAppendBytesKeepsPrefix(t *testing.T) {
	dst := []byte("prefix")
	elem := []byte("\x00payload\xff")
	out := AppendBytes(dst, elem)
	assert.Equal(t, append([]byte("prefix"), frameLE("\x00payload\xff")...), out)
	assert.Equal(t, []byte("\x00payload\xff"), elem)
	assert.Equal(t, []byte{0, 0, 0, 0}, AppendBytes(nil, nil))
}

func TestJoinBytesEmpty(t *testing.T) {
	assert.Equal(t, []byte{}, JoinBytes([]string{}))
	assert.Equal(t, []byte{}, JoinBytes[[]byte](nil))
	n, err := CountBytes(nil)
	assert.NoError(t, err)
	assert.Zero(t, n)
	got, err := SplitBytes([]byte{})
	assert.NoError(t, err)
	assert.Empty(t, got)
}

func TestBytesFramingErrors(t *testing.T) {
	ok := frameLE("ok")
	cases := []struct {
		name   string
		data   []byte
		before int // complete elements before the bad one
		want   FramingError
		msg    string
	}{
		{"indicator cut to 1 byte", []byte{5}, 0, FramingError{Want: 4, Have: 1},
			"expecting 4 bytes but only 1 bytes available"},
		{"indicator cut to 2 bytes", []byte{5, 0}, 0, FramingError{Want: 4, Have: 2},
			"expecting 4 bytes but only 2 bytes available"},
		{"indicator cut to 3 bytes", []byte{5, 0, 0}, 0, FramingError{Want: 4, Have: 3},
			"expecting 4 bytes but only 3 bytes available"},
		{"indicator cut after a good element", append(bytes.Clone(ok), 1, 0), 1, FramingError{Want: 4, Have: 2},
			"expecting 4 bytes but only 2 bytes available"},
		{"empty string then 3 stray bytes", []byte{0, 0, 0, 0, 0, 0, 0}, 1, FramingError{Want: 4, Have: 3},
			"expecting 4 bytes but only 3 bytes available"},
		{"declared length past end", []byte{5, 0, 0, 0, 'a', 'b', 'c'}, 0, FramingError{Truncated: true, Want: 5, Have: 3},
			"expecting string of length 5 but only 3 bytes available"},
		{"declared length with nothing after", []byte{1, 0, 0, 0}, 0, FramingError{Truncated: true, Want: 1, Have: 0},
			"expecting string of length 1 but only 0 bytes available"},
		{"declared length past end after a good element", append(bytes.Clone(ok), 3, 0, 0, 0, 'x'), 1,
			FramingError{Truncated: true, Want: 3, Have: 1}, "expecting string of length 3 but only 1 bytes available"},
		{"declared length off by one", []byte{4, 0, 0, 0, 'a', 'b', 'c'}, 0, FramingError{Truncated: true, Want: 4, Have: 3},
			"expecting string of length 4 but only 3 bytes available"},
		{"sign bit set", []byte{0, 0, 0, 0x80, 'a'}, 0, FramingError{Truncated: true, Want: 1 << 31, Have: 1},
			"expecting string of length 2147483648 but only 1 bytes available"},
		{"0xFFFFFFFF", []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4}, 0, FramingError{Truncated: true, Want: 0xFFFFFFFF, Have: 4},
			"expecting string of length 4294967295 but only 4 bytes available"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := CountBytes(tc.data)
			var fe *FramingError
			require.True(t, errors.As(err, &fe), "CountBytes: want *FramingError, got %v", err)
			assert.Equal(t, tc.want, *fe)
			assert.EqualError(t, err, tc.msg)
			assert.Equal(t, tc.before, n)

			elems, err := SplitBytes(tc.data)
			fe = nil
			require.True(t, errors.As(err, &fe), "SplitBytes: want *FramingError, got %v", err)
			assert.Equal(t, tc.want, *fe)
			assert.EqualError(t, err, tc.msg)
			assert.Len(t, elems, tc.before)
		})
	}
}

// TestHugeDeclaredLengthAllocatesLittle: a length indicator claiming 4 GiB with a few bytes present
// must be compared with the bytes present, never used to size an allocation.
func TestHugeDeclaredLengthAllocatesLittle(t *testing.T) {
	inputs := map[string][]byte{
		"0xFFFFFFFF":               {0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4},
		"0x7FFFFFFF":               {0xff, 0xff, 0xff, 0x7f, 1},
		"after a good element":     append(frameLE("a"), 0xff, 0xff, 0xff, 0xff, 9),
		"0xFFFFFFFF, nothing else": {0xff, 0xff, 0xff, 0xff},
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			var err error
			splitAllocs := testing.AllocsPerRun(100, func() { _, err = SplitBytes(data) })
			require.Error(t, err)
			countAllocs := testing.AllocsPerRun(100, func() { _, err = CountBytes(data) })
			require.Error(t, err)
			assert.LessOrEqual(t, splitAllocs, 2.0, "SplitBytes allocations")
			assert.LessOrEqual(t, countAllocs, 1.0, "CountBytes allocations (the error only)")

			// And the few allocations are small: bytes per call, not gigabytes.
			perCall := bytesAllocated(1000, func() {
				_, _ = SplitBytes(data)
				_, _ = CountBytes(data)
			})
			assert.Less(t, perCall, uint64(1024), "bytes allocated per SplitBytes+CountBytes call")
		})
	}
}

func TestCountBytesDoesNotAllocateOnValidInput(t *testing.T) {
	data := JoinBytes([]string{"a", "", "bcd", strings.Repeat("e", 300)})
	allocs := testing.AllocsPerRun(100, func() {
		if n, err := CountBytes(data); err != nil || n != 4 {
			panic("bad count")
		}
	})
	assert.Zero(t, allocs)
}

// bytesAllocated returns the average heap bytes allocated by one call of f over runs calls.
func bytesAllocated(runs int, f func()) uint64 {
	f() // warm up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}
