package tensor

import (
	"encoding/binary"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// encodeLE is an independent little-endian encoder (encoding/binary), the reference View and
// Bytes are checked against.
func encodeLE[T Number](vals []T) []byte {
	out := []byte{}
	for _, v := range vals {
		var err error
		out, err = binary.Append(out, binary.LittleEndian, v)
		if err != nil {
			panic(err)
		}
	}
	return out
}

// checkViewBytes runs the View/Bytes round trips for one Number type.
func checkViewBytes[T Number](t *testing.T, vals []T) {
	t.Helper()
	size := int(unsafe.Sizeof(vals[0]))
	wire := encodeLE(vals)
	require.Len(t, wire, len(vals)*size)

	// Bytes produces the wire encoding.
	assert.Equal(t, wire, Bytes(vals))

	// View decodes it, aligned and unaligned, with and without trailing bytes.
	assert.Equal(t, vals, View[T](wire))

	for off := 1; off < max(size, 2); off++ {
		buf := make([]byte, off+len(wire)+size)
		copy(buf[off:], wire)
		unaligned := buf[off : off+len(wire)]
		got := View[T](unaligned)
		assert.Equal(t, vals, got, "offset %d", off)
		// A view is always suitably aligned for T, whatever the input's alignment.
		assert.Zero(t, uintptr(unsafe.Pointer(&got[0]))%unsafe.Alignof(vals[0]), "offset %d", off)
		// Trailing bytes that do not fill an element are ignored.
		if size > 1 {
			assert.Equal(t, vals, View[T](buf[off:off+len(wire)+size-1]), "offset %d with tail", off)
		}
		// The input is not modified by decoding.
		assert.Equal(t, wire, unaligned)
	}

	// Round trips in both directions.
	assert.Equal(t, vals, View[T](Bytes(vals)))
	assert.Equal(t, wire, Bytes(View[T](wire)))

	// Less than one element and empty input decode to nothing.
	assert.Empty(t, View[T](wire[:size-1]))
	assert.Empty(t, View[T](nil))
	assert.Empty(t, View[T]([]byte{}))
	assert.Equal(t, []byte{}, Bytes([]T{}))
	assert.Equal(t, []byte{}, Bytes[T](nil))
}

func TestViewBytesRoundTrip(t *testing.T) {
	t.Run("int8", func(t *testing.T) { checkViewBytes(t, []int8{0, 1, -1, math.MinInt8, math.MaxInt8}) })
	t.Run("int16", func(t *testing.T) { checkViewBytes(t, []int16{0, 1, -1, math.MinInt16, math.MaxInt16, 0x1234}) })
	t.Run("int32", func(t *testing.T) {
		checkViewBytes(t, []int32{0, 1, -1, math.MinInt32, math.MaxInt32, 0x12345678})
	})
	t.Run("int64", func(t *testing.T) {
		checkViewBytes(t, []int64{0, 1, -1, math.MinInt64, math.MaxInt64, 0x0123456789abcdef})
	})
	t.Run("uint8", func(t *testing.T) { checkViewBytes(t, []uint8{0, 1, 0x7f, 0x80, math.MaxUint8}) })
	t.Run("uint16", func(t *testing.T) { checkViewBytes(t, []uint16{0, 1, 0x8000, math.MaxUint16, 0x1234}) })
	t.Run("uint32", func(t *testing.T) { checkViewBytes(t, []uint32{0, 1, 1 << 31, math.MaxUint32, 0x12345678}) })
	t.Run("uint64", func(t *testing.T) {
		checkViewBytes(t, []uint64{0, 1, 1 << 63, math.MaxUint64, 0x0123456789abcdef})
	})
	t.Run("float32", func(t *testing.T) {
		checkViewBytes(t, []float32{0, 1, -1.5, math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Inf(-1)), float32(math.Copysign(0, -1))})
	})
	t.Run("float64", func(t *testing.T) {
		checkViewBytes(t, []float64{0, 1, -1.5, math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.Copysign(0, -1)})
	})
}

// TestViewNaNBits checks NaN payloads survive (compared by bits, since NaN != NaN).
func TestViewNaNBits(t *testing.T) {
	nan32 := math.Float32frombits(0x7fc00001)
	got32 := View[float32](Bytes([]float32{nan32}))
	require.Len(t, got32, 1)
	assert.Equal(t, uint32(0x7fc00001), math.Float32bits(got32[0]))

	nan64 := math.Float64frombits(0xfff8000000000abc)
	b := make([]byte, 9)
	copy(b[1:], Bytes([]float64{nan64}))
	got64 := View[float64](b[1:]) // unaligned
	require.Len(t, got64, 1)
	assert.Equal(t, uint64(0xfff8000000000abc), math.Float64bits(got64[0]))
}

// TestViewKnownBytes pins the byte order against literal wire bytes.
func TestViewKnownBytes(t *testing.T) {
	wire := []byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}
	assert.Equal(t, []uint16{0x0201, 0x0403, 0x0605, 0x0807}, View[uint16](wire))
	assert.Equal(t, []uint32{0x04030201, 0x08070605}, View[uint32](wire))
	assert.Equal(t, []uint64{0x0807060504030201}, View[uint64](wire))
	assert.Equal(t, []int32{-2}, View[int32]([]byte{0xfe, 0xff, 0xff, 0xff}))
	assert.Equal(t, []float32{1}, View[float32]([]byte{0x00, 0x00, 0x80, 0x3f}))
	assert.Equal(t, []byte{0x00, 0x00, 0x80, 0x3f}, Bytes([]float32{1}))
}

func TestViewAliasing(t *testing.T) {
	if !littleEndian {
		t.Skip("views alias only on little-endian hosts")
	}
	// Aligned: the view aliases the bytes, both ways.
	s := []int32{1, 2, 3, 4}
	b := Bytes(s)
	assert.Same(t, &s[0], (*int32)(unsafe.Pointer(&b[0])))
	v := View[int32](b)
	v[1] = 0x0a0b0c0d
	assert.Equal(t, []byte{0x0d, 0x0c, 0x0b, 0x0a}, b[4:8])
	assert.Equal(t, int32(0x0a0b0c0d), s[1])

	// Unaligned: a copy, so writes do not reach the input.
	buf := make([]byte, 1+16)
	copy(buf[1:], Bytes([]int32{1, 2, 3, 4}))
	u := View[int32](buf[1:])
	require.Equal(t, []int32{1, 2, 3, 4}, u)
	u[0] = 99
	assert.Equal(t, []int32{1, 2, 3, 4}, View[int32](buf[1:]))
}
