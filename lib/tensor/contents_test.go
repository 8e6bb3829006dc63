package tensor

import (
	"errors"
	"math"
	"testing"
	"unsafe"

	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	tBOOL   = inference.DataType_TYPE_BOOL
	tUINT8  = inference.DataType_TYPE_UINT8
	tUINT16 = inference.DataType_TYPE_UINT16
	tUINT32 = inference.DataType_TYPE_UINT32
	tUINT64 = inference.DataType_TYPE_UINT64
	tINT8   = inference.DataType_TYPE_INT8
	tINT16  = inference.DataType_TYPE_INT16
	tINT32  = inference.DataType_TYPE_INT32
	tINT64  = inference.DataType_TYPE_INT64
	tFP16   = inference.DataType_TYPE_FP16
	tFP32   = inference.DataType_TYPE_FP32
	tFP64   = inference.DataType_TYPE_FP64
	tBYTES  = inference.DataType_TYPE_STRING
	tBF16   = inference.DataType_TYPE_BF16
)

func TestContentsRoundTrip(t *testing.T) {
	cases := []struct {
		dt   inference.DataType
		c    *inference.InferTensorContents
		want []byte
	}{
		{tBOOL, &inference.InferTensorContents{BoolContents: []bool{true, false, true, true}}, []byte{1, 0, 1, 1}},
		{tINT8, &inference.InferTensorContents{IntContents: []int32{0, 1, -1, 127, -128}},
			encodeLE([]int8{0, 1, -1, 127, -128})},
		{tINT16, &inference.InferTensorContents{IntContents: []int32{0, 1, -1, math.MaxInt16, math.MinInt16}},
			encodeLE([]int16{0, 1, -1, math.MaxInt16, math.MinInt16})},
		{tINT32, &inference.InferTensorContents{IntContents: []int32{0, 1, -1, math.MaxInt32, math.MinInt32}},
			encodeLE([]int32{0, 1, -1, math.MaxInt32, math.MinInt32})},
		{tINT64, &inference.InferTensorContents{Int64Contents: []int64{0, 1, -1, math.MaxInt64, math.MinInt64}},
			encodeLE([]int64{0, 1, -1, math.MaxInt64, math.MinInt64})},
		{tUINT8, &inference.InferTensorContents{UintContents: []uint32{0, 1, 0x80, math.MaxUint8}},
			[]byte{0, 1, 0x80, 0xff}},
		{tUINT16, &inference.InferTensorContents{UintContents: []uint32{0, 1, 0x8000, math.MaxUint16}},
			encodeLE([]uint16{0, 1, 0x8000, math.MaxUint16})},
		{tUINT32, &inference.InferTensorContents{UintContents: []uint32{0, 1, 1 << 31, math.MaxUint32}},
			encodeLE([]uint32{0, 1, 1 << 31, math.MaxUint32})},
		{tUINT64, &inference.InferTensorContents{Uint64Contents: []uint64{0, 1, 1 << 63, math.MaxUint64}},
			encodeLE([]uint64{0, 1, 1 << 63, math.MaxUint64})},
		{tFP32, &inference.InferTensorContents{Fp32Contents: []float32{0, 1.5, -2.25, math.MaxFloat32, float32(math.Inf(1))}},
			encodeLE([]float32{0, 1.5, -2.25, math.MaxFloat32, float32(math.Inf(1))})},
		{tFP64, &inference.InferTensorContents{Fp64Contents: []float64{0, 1.5, -2.25, math.MaxFloat64, math.Inf(-1)}},
			encodeLE([]float64{0, 1.5, -2.25, math.MaxFloat64, math.Inf(-1)})},
		{tBYTES, &inference.InferTensorContents{BytesContents: [][]byte{[]byte("abc"), {}, {0, 0xff}, []byte("é")}},
			frameLE("abc", "", "\x00\xff", "é")},
	}
	for _, tc := range cases {
		t.Run(Name(tc.dt), func(t *testing.T) {
			raw, err := FromContents(tc.dt, tc.c)
			require.NoError(t, err)
			assert.Equal(t, tc.want, raw)

			back, ok := ToContents(tc.dt, raw)
			require.True(t, ok)
			assert.Equal(t, normalize(tc.c), normalize(back))

			// And from raw bytes the other way round.
			again, err := FromContents(tc.dt, back)
			require.NoError(t, err)
			assert.Equal(t, tc.want, again)
		})
	}
}

// normalize copies the typed fields of c into a plain comparable struct (nil and empty slices
// alike, BYTES elements as strings).
func normalize(c *inference.InferTensorContents) map[string]any {
	m := map[string]any{}
	if v := c.GetBoolContents(); len(v) > 0 {
		m["bool"] = v
	}
	if v := c.GetIntContents(); len(v) > 0 {
		m["int"] = v
	}
	if v := c.GetInt64Contents(); len(v) > 0 {
		m["int64"] = v
	}
	if v := c.GetUintContents(); len(v) > 0 {
		m["uint"] = v
	}
	if v := c.GetUint64Contents(); len(v) > 0 {
		m["uint64"] = v
	}
	if v := c.GetFp32Contents(); len(v) > 0 {
		m["fp32"] = v
	}
	if v := c.GetFp64Contents(); len(v) > 0 {
		m["fp64"] = v
	}
	if v := c.GetBytesContents(); len(v) > 0 {
		s := make([]string, len(v))
		for i, e := range v {
			s[i] = string(e)
		}
		m["bytes"] = s
	}
	return m
}

func TestContentsNarrowTypesKeepLowBytes(t *testing.T) {
	cases := []struct {
		name string
		dt   inference.DataType
		c    *inference.InferTensorContents
		raw  []byte
		back *inference.InferTensorContents
	}{
		{"INT8 257 -> 1", tINT8, &inference.InferTensorContents{IntContents: []int32{257}},
			[]byte{1}, &inference.InferTensorContents{IntContents: []int32{1}}},
		{"INT8 -129 -> 127, 128 -> -128, 0x7fffffff -> -1", tINT8, &inference.InferTensorContents{IntContents: []int32{-129, 128, math.MaxInt32}},
			[]byte{0x7f, 0x80, 0xff}, &inference.InferTensorContents{IntContents: []int32{127, -128, -1}}},
		{"INT16 65537 -> 1, 0x18000 -> -32768", tINT16, &inference.InferTensorContents{IntContents: []int32{65537, 0x18000}},
			[]byte{1, 0, 0, 0x80}, &inference.InferTensorContents{IntContents: []int32{1, math.MinInt16}}},
		{"UINT8 257 -> 1, max -> 255", tUINT8, &inference.InferTensorContents{UintContents: []uint32{257, math.MaxUint32}},
			[]byte{1, 0xff}, &inference.InferTensorContents{UintContents: []uint32{1, 255}}},
		{"UINT16 0x12345 -> 0x2345", tUINT16, &inference.InferTensorContents{UintContents: []uint32{0x12345}},
			[]byte{0x45, 0x23}, &inference.InferTensorContents{UintContents: []uint32{0x2345}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := FromContents(tc.dt, tc.c)
			require.NoError(t, err)
			assert.Equal(t, tc.raw, raw)
			back, ok := ToContents(tc.dt, raw)
			require.True(t, ok)
			assert.Equal(t, normalize(tc.back), normalize(back))
		})
	}
}

func TestFromContentsEmpty(t *testing.T) {
	for _, tc := range allDatatypes {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []*inference.InferTensorContents{nil, {}, {IntContents: []int32{}, BytesContents: [][]byte{}}} {
				raw, err := FromContents(tc.dt, c)
				require.NoError(t, err)
				assert.Equal(t, []byte{}, raw)
			}
		})
	}
}

// typedFields lists each typed field of InferTensorContents, named by the datatype it carries,
// with a setter that puts one element in it.
var typedFields = []struct {
	field inference.DataType
	set   func(*inference.InferTensorContents)
}{
	{tBOOL, func(c *inference.InferTensorContents) { c.BoolContents = []bool{true} }},
	{tINT32, func(c *inference.InferTensorContents) { c.IntContents = []int32{7} }},
	{tINT64, func(c *inference.InferTensorContents) { c.Int64Contents = []int64{7} }},
	{tUINT32, func(c *inference.InferTensorContents) { c.UintContents = []uint32{7} }},
	{tUINT64, func(c *inference.InferTensorContents) { c.Uint64Contents = []uint64{7} }},
	{tFP32, func(c *inference.InferTensorContents) { c.Fp32Contents = []float32{7} }},
	{tFP64, func(c *inference.InferTensorContents) { c.Fp64Contents = []float64{7} }},
	{tBYTES, func(c *inference.InferTensorContents) { c.BytesContents = [][]byte{[]byte("7")} }},
}

// ownField is the typed field that may carry each datatype (the KServe table, §1.4); FP16 and BF16
// have none.
var ownField = map[inference.DataType]inference.DataType{
	tBOOL: tBOOL, tINT8: tINT32, tINT16: tINT32, tINT32: tINT32, tINT64: tINT64,
	tUINT8: tUINT32, tUINT16: tUINT32, tUINT32: tUINT32, tUINT64: tUINT64,
	tFP32: tFP32, tFP64: tFP64, tBYTES: tBYTES,
}

func TestContentsErrorWrongField(t *testing.T) {
	for _, dt := range allDatatypes {
		for _, f := range typedFields {
			c := &inference.InferTensorContents{}
			f.set(c)
			raw, err := FromContents(dt.dt, c)
			own, hasOwn := ownField[dt.dt]
			if hasOwn && own == f.field {
				assert.NoError(t, err, "%s in its own field %s", dt.name, Name(f.field))
				assert.NotEmpty(t, raw, "%s", dt.name)
				continue
			}
			var ce *ContentsError
			if assert.True(t, errors.As(err, &ce), "%s with data in %s: want *ContentsError, got %v", dt.name, Name(f.field), err) {
				assert.Equal(t, f.field, ce.Field, "%s with data in %s", dt.name, Name(f.field))
				assert.EqualError(t, err, "unexpected explicit tensor data of type '"+Name(f.field)+"'")
			}
			assert.Nil(t, raw)
		}
	}
}

func TestContentsErrorCases(t *testing.T) {
	cases := []struct {
		name  string
		dt    inference.DataType
		c     *inference.InferTensorContents
		field inference.DataType
	}{
		{"fp32_contents for INT32", tINT32, &inference.InferTensorContents{Fp32Contents: []float32{1}}, tFP32},
		{"int64_contents for INT32", tINT32, &inference.InferTensorContents{Int64Contents: []int64{1}}, tINT64},
		{"uint_contents for INT8", tINT8, &inference.InferTensorContents{UintContents: []uint32{1}}, tUINT32},
		{"int_contents for UINT16", tUINT16, &inference.InferTensorContents{IntContents: []int32{1}}, tINT32},
		{"int_contents for BOOL", tBOOL, &inference.InferTensorContents{IntContents: []int32{1}}, tINT32},
		{"own field plus a stray one", tINT32, &inference.InferTensorContents{IntContents: []int32{1}, BytesContents: [][]byte{{}}}, tBYTES},
		{"two stray fields: the first in field order", tBOOL,
			&inference.InferTensorContents{Fp64Contents: []float64{1}, IntContents: []int32{1}}, tINT32},
		{"fp32_contents for FP16", tFP16, &inference.InferTensorContents{Fp32Contents: []float32{1}}, tFP32},
		{"uint_contents for FP16", tFP16, &inference.InferTensorContents{UintContents: []uint32{0x3c00}}, tUINT32},
		{"fp32_contents for BF16", tBF16, &inference.InferTensorContents{Fp32Contents: []float32{1}}, tFP32},
		{"int_contents for BF16", tBF16, &inference.InferTensorContents{IntContents: []int32{0x3f80}}, tINT32},
		{"bool_contents for an invalid datatype", inference.DataType_TYPE_INVALID, &inference.InferTensorContents{BoolContents: []bool{true}}, tBOOL},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := FromContents(tc.dt, tc.c)
			var ce *ContentsError
			require.True(t, errors.As(err, &ce), "want *ContentsError, got %v", err)
			assert.Equal(t, tc.field, ce.Field)
			assert.Equal(t, "unexpected explicit tensor data of type '"+Name(tc.field)+"'", err.Error())
			assert.Nil(t, raw)
		})
	}
}

func TestFromContentsAliases(t *testing.T) {
	if !littleEndian {
		t.Skip("contents alias raw bytes only on little-endian hosts")
	}
	c := &inference.InferTensorContents{IntContents: []int32{1, 2, 3}}
	raw, err := FromContents(tINT32, c)
	require.NoError(t, err)
	require.Len(t, raw, 12)
	assert.Same(t, (*byte)(unsafe.Pointer(&c.IntContents[0])), &raw[0])
	raw[4] = 0x2a // writes through to the contents
	assert.Equal(t, int32(0x2a), c.IntContents[1])

	same := func(dt inference.DataType, c *inference.InferTensorContents, first unsafe.Pointer) {
		t.Helper()
		raw, err := FromContents(dt, c)
		require.NoError(t, err)
		require.NotEmpty(t, raw)
		assert.Equal(t, first, unsafe.Pointer(&raw[0]), "%s should alias its contents", Name(dt))
	}
	b := []bool{true, false}
	same(tBOOL, &inference.InferTensorContents{BoolContents: b}, unsafe.Pointer(&b[0]))
	i64 := []int64{1}
	same(tINT64, &inference.InferTensorContents{Int64Contents: i64}, unsafe.Pointer(&i64[0]))
	u32 := []uint32{1}
	same(tUINT32, &inference.InferTensorContents{UintContents: u32}, unsafe.Pointer(&u32[0]))
	u64 := []uint64{1}
	same(tUINT64, &inference.InferTensorContents{Uint64Contents: u64}, unsafe.Pointer(&u64[0]))
	f32 := []float32{1}
	same(tFP32, &inference.InferTensorContents{Fp32Contents: f32}, unsafe.Pointer(&f32[0]))
	f64 := []float64{1}
	same(tFP64, &inference.InferTensorContents{Fp64Contents: f64}, unsafe.Pointer(&f64[0]))

	// Narrow types are converted into a fresh buffer.
	n := []int32{1, 2}
	raw, err = FromContents(tINT16, &inference.InferTensorContents{IntContents: n})
	require.NoError(t, err)
	raw[0] = 9
	assert.Equal(t, []int32{1, 2}, n)
}

func TestToContents(t *testing.T) {
	t.Run("no typed field for FP16, BF16 or invalid types", func(t *testing.T) {
		for _, dt := range []inference.DataType{tFP16, tBF16, inference.DataType_TYPE_INVALID, 99, -1} {
			c, ok := ToContents(dt, []byte{0, 0x3c})
			assert.False(t, ok, "%d", dt)
			assert.Nil(t, c, "%d", dt)
		}
	})
	t.Run("malformed BYTES", func(t *testing.T) {
		for _, raw := range [][]byte{{1}, {1, 0, 0}, {5, 0, 0, 0, 'a'}, {0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4}} {
			c, ok := ToContents(tBYTES, raw)
			assert.False(t, ok, "%v", raw)
			assert.Nil(t, c, "%v", raw)
		}
	})
	t.Run("BYTES elements alias raw", func(t *testing.T) {
		raw := frameLE("ab", "c")
		c, ok := ToContents(tBYTES, raw)
		require.True(t, ok)
		require.Len(t, c.BytesContents, 2)
		assert.Same(t, &raw[4], &c.BytesContents[0][0])
	})
	t.Run("any non-zero byte is true", func(t *testing.T) {
		c, ok := ToContents(tBOOL, []byte{0, 1, 2, 0xff})
		require.True(t, ok)
		assert.Equal(t, []bool{false, true, true, true}, c.BoolContents)
	})
	t.Run("empty raw gives empty contents", func(t *testing.T) {
		for dt, own := range ownField {
			c, ok := ToContents(dt, []byte{})
			require.True(t, ok, "%s", Name(dt))
			assert.Empty(t, normalize(c), "%s (field %s)", Name(dt), Name(own))
		}
	})
	t.Run("unaligned raw", func(t *testing.T) {
		buf := make([]byte, 1+16)
		copy(buf[1:], encodeLE([]int64{-5, 1 << 40}))
		c, ok := ToContents(tINT64, buf[1:])
		require.True(t, ok)
		assert.Equal(t, []int64{-5, 1 << 40}, c.Int64Contents)
		copy(buf[1:], encodeLE([]float32{1.5, -3}))
		c, ok = ToContents(tFP32, buf[1:9])
		require.True(t, ok)
		assert.Equal(t, []float32{1.5, -3}, c.Fp32Contents)
	})
}
