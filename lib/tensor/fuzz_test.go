package tensor

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/protobuf/proto"
)

// FuzzSplitBytes checks that CountBytes and SplitBytes agree on every input, that a successful
// split re-joins to exactly the input, and that a failed one reports a consistent FramingError.
func FuzzSplitBytes(f *testing.F) {
	for _, seed := range [][]byte{
		{},
		frameLE(""),
		frameLE("", "", ""),
		frameLE("abc", "\x00", "\xff\xfe"),
		frameLE("1", "22", "333", "4444"),
		{1}, {1, 0}, {1, 0, 0},
		{5, 0, 0, 0, 'a', 'b', 'c'},
		{1, 0, 0, 0},
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4},
		{0, 0, 0, 0x80, 'a'},
		append(frameLE("ok"), 3, 0, 0, 0, 'x'),
		append(frameLE("ok"), 1, 0),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		n, errCount := CountBytes(data)
		elems, errSplit := SplitBytes(data)
		if n != len(elems) {
			t.Fatalf("CountBytes = %d, SplitBytes gave %d elements", n, len(elems))
		}
		if (errCount == nil) != (errSplit == nil) {
			t.Fatalf("CountBytes error %v, SplitBytes error %v", errCount, errSplit)
		}
		if !bytes.Equal(orig, data) {
			t.Fatalf("input modified")
		}
		joined := JoinBytes(elems)
		for i, e := range elems {
			if len(e) != cap(e) {
				t.Fatalf("element %d: len %d cap %d; appending to it would overwrite the next frame", i, len(e), cap(e))
			}
		}
		if errSplit == nil {
			if !bytes.Equal(joined, data) {
				t.Fatalf("JoinBytes(SplitBytes(b)) = %x, want %x", joined, data)
			}
			return
		}
		var fc, fs *FramingError
		if !errors.As(errCount, &fc) || !errors.As(errSplit, &fs) {
			t.Fatalf("want *FramingError from both, got %T and %T", errCount, errSplit)
		}
		if *fc != *fs {
			t.Fatalf("CountBytes %+v, SplitBytes %+v", *fc, *fs)
		}
		// The elements before the error are a prefix of the input, and the error accounts exactly
		// for the bytes left after that prefix.
		if !bytes.HasPrefix(data, joined) {
			t.Fatalf("elements before the error are not a prefix of the input")
		}
		rest := len(data) - len(joined)
		switch {
		case fs.Truncated:
			if fs.Have != rest-4 || fs.Want <= fs.Have || uint32(fs.Want) != leUint32(data[len(joined):]) {
				t.Fatalf("truncated element: %+v with %d bytes left", *fs, rest)
			}
		default:
			if fs.Want != 4 || fs.Have != rest || rest < 1 || rest > 3 {
				t.Fatalf("cut length indicator: %+v with %d bytes left", *fs, rest)
			}
		}
	})
}

func leUint32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// FuzzContents decodes arbitrary bytes as InferTensorContents and converts them for every datatype,
// valid or not: no panic, errors only as *ContentsError naming a field that holds data, and for
// every datatype with a typed field a round trip through raw bytes keeps the values (narrow integer
// types keep their low bytes).
func FuzzContents(f *testing.F) {
	for _, c := range []*inference.InferTensorContents{
		{},
		{BoolContents: []bool{true, false}},
		{IntContents: []int32{1, -1, 257, math.MinInt32}},
		{Int64Contents: []int64{1, -1, math.MaxInt64}},
		{UintContents: []uint32{1, 0x12345, math.MaxUint32}},
		{Uint64Contents: []uint64{1, math.MaxUint64}},
		{Fp32Contents: []float32{1.5, float32(math.NaN()), float32(math.Inf(-1))}},
		{Fp64Contents: []float64{1.5, math.Float64frombits(0x7ff0000000000abc)}},
		{BytesContents: [][]byte{[]byte("abc"), {}, {0, 0xff}}},
		{IntContents: []int32{1}, Fp32Contents: []float32{1}},
		{BoolContents: []bool{true}, BytesContents: [][]byte{{1}}},
	} {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x03, 0x01, 0x00, 0x02})       // bool_contents packed with a non-0/1 varint
	f.Add([]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0x0f}) // int_contents unpacked, 0xFFFFFFFF
	f.Add([]byte{0x35, 0x00, 0x00, 0xc0, 0x7f})       // fp32_contents unpacked NaN
	f.Add([]byte{0x42, 0xff, 0xff, 0xff, 0xff, 0x0f}) // bytes_contents with a huge length
	f.Fuzz(func(t *testing.T, data []byte) {
		var c inference.InferTensorContents
		if err := proto.Unmarshal(data, &c); err != nil {
			return
		}
		for dt := inference.DataType(-1); dt <= inference.DataType_TYPE_BF16+1; dt++ {
			checkContents(t, dt, &c)
		}
	})
}

func checkContents(t *testing.T, dt inference.DataType, c *inference.InferTensorContents) {
	raw, err := FromContents(dt, c)
	if err != nil {
		var ce *ContentsError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: error %T %v, want *ContentsError", Name(dt), err, err)
		}
		if raw != nil {
			t.Fatalf("%s: %d bytes returned with an error", Name(dt), len(raw))
		}
		if own, ok := ownField[dt]; (ok && ce.Field == own) || fieldLen(c, ce.Field) == 0 {
			t.Fatalf("%s: ContentsError names field %s, which is the type's own or empty", Name(dt), Name(ce.Field))
		}
		return
	}
	own, hasField := ownField[dt]
	if !hasField {
		// FP16, BF16 and invalid types accept no typed data at all.
		if len(raw) != 0 {
			t.Fatalf("%s: no typed field, yet %d bytes", Name(dt), len(raw))
		}
		if _, ok := ToContents(dt, raw); ok {
			t.Fatalf("%s: ToContents succeeded for a type with no typed field", Name(dt))
		}
		return
	}
	n := fieldLen(c, own)
	if size := ElementSize(dt); size > 0 && len(raw) != n*size {
		t.Fatalf("%s: %d elements gave %d bytes, want %d", Name(dt), n, len(raw), n*size)
	}
	back, ok := ToContents(dt, raw)
	if !ok {
		t.Fatalf("%s: ToContents failed on FromContents' output", Name(dt))
	}
	if got := fieldLen(back, own); got != n {
		t.Fatalf("%s: %d elements came back as %d", Name(dt), n, got)
	}
	for _, f := range typedFields {
		if f.field != own && fieldLen(back, f.field) != 0 {
			t.Fatalf("%s: ToContents filled field %s", Name(dt), Name(f.field))
		}
	}
	switch dt {
	case tBOOL:
		equalSlices(t, dt, c.GetBoolContents(), back.GetBoolContents())
	case tINT8:
		equalSlices(t, dt, mapSlice(c.GetIntContents(), func(v int32) int32 { return int32(int8(v)) }), back.GetIntContents())
	case tINT16:
		equalSlices(t, dt, mapSlice(c.GetIntContents(), func(v int32) int32 { return int32(int16(v)) }), back.GetIntContents())
	case tUINT8:
		equalSlices(t, dt, mapSlice(c.GetUintContents(), func(v uint32) uint32 { return uint32(uint8(v)) }), back.GetUintContents())
	case tUINT16:
		equalSlices(t, dt, mapSlice(c.GetUintContents(), func(v uint32) uint32 { return uint32(uint16(v)) }), back.GetUintContents())
	case tINT32:
		equalSlices(t, dt, c.GetIntContents(), back.GetIntContents())
	case tINT64:
		equalSlices(t, dt, c.GetInt64Contents(), back.GetInt64Contents())
	case tUINT32:
		equalSlices(t, dt, c.GetUintContents(), back.GetUintContents())
	case tUINT64:
		equalSlices(t, dt, c.GetUint64Contents(), back.GetUint64Contents())
	case tFP32: // by bits: NaN payloads must survive too
		equalSlices(t, dt, mapSlice(c.GetFp32Contents(), math.Float32bits), mapSlice(back.GetFp32Contents(), math.Float32bits))
	case tFP64:
		equalSlices(t, dt, mapSlice(c.GetFp64Contents(), math.Float64bits), mapSlice(back.GetFp64Contents(), math.Float64bits))
	case tBYTES:
		for i, e := range c.GetBytesContents() {
			if !bytes.Equal(e, back.GetBytesContents()[i]) {
				t.Fatalf("BYTES element %d: %x came back as %x", i, e, back.GetBytesContents()[i])
			}
		}
	}
	// Raw -> contents -> raw is the identity.
	again, err := FromContents(dt, back)
	if err != nil || !bytes.Equal(again, raw) {
		t.Fatalf("%s: raw %x -> contents -> raw %x (err %v)", Name(dt), raw, again, err)
	}
}

func fieldLen(c *inference.InferTensorContents, field inference.DataType) int {
	switch field {
	case tBOOL:
		return len(c.GetBoolContents())
	case tINT32:
		return len(c.GetIntContents())
	case tINT64:
		return len(c.GetInt64Contents())
	case tUINT32:
		return len(c.GetUintContents())
	case tUINT64:
		return len(c.GetUint64Contents())
	case tFP32:
		return len(c.GetFp32Contents())
	case tFP64:
		return len(c.GetFp64Contents())
	case tBYTES:
		return len(c.GetBytesContents())
	}
	return 0
}

func mapSlice[A, B any](in []A, f func(A) B) []B {
	out := make([]B, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func equalSlices[T comparable](t *testing.T, dt inference.DataType, want, got []T) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d values came back as %d", Name(dt), len(want), len(got))
	}
	for i := range want {
		if want[i] != got[i] {
			t.Fatalf("%s: value %d: %v came back as %v", Name(dt), i, want[i], got[i])
		}
	}
}
