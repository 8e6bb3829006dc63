package tensor

import (
	"unsafe"

	"github.com/infergate/infergate/gen/inference"
)

// ContentsError reports typed contents held in a field that cannot carry the tensor's datatype.
type ContentsError struct {
	// Field is the datatype the offending field carries (for example INT32 for int_contents).
	Field inference.DataType
}

func (e *ContentsError) Error() string {
	return "unexpected explicit tensor data of type '" + Name(e.Field) + "'"
}

// FromContents converts typed contents of a tensor of datatype dt into raw little-endian bytes
// (BYTES: framed elements). Where the wire type already has the datatype's layout (BOOL, INT32,
// INT64, UINT32, UINT64, FP32, FP64) the result aliases the contents' slice. Data in any field other
// than the one for dt is a *ContentsError; FP16 and BF16 have no typed field, so any data is one.
// Narrow integer types keep the low bytes of each value, as Triton does.
func FromContents(dt inference.DataType, c *inference.InferTensorContents) ([]byte, error) {
	if f := strayField(dt, c); f != inference.DataType_TYPE_INVALID {
		return nil, &ContentsError{Field: f}
	}
	switch dt {
	case inference.DataType_TYPE_BOOL:
		return boolBytes(c.GetBoolContents()), nil
	case inference.DataType_TYPE_INT8:
		return narrow[int32, int8](c.GetIntContents()), nil
	case inference.DataType_TYPE_INT16:
		return narrow[int32, int16](c.GetIntContents()), nil
	case inference.DataType_TYPE_INT32:
		return Bytes(c.GetIntContents()), nil
	case inference.DataType_TYPE_INT64:
		return Bytes(c.GetInt64Contents()), nil
	case inference.DataType_TYPE_UINT8:
		return narrow[uint32, uint8](c.GetUintContents()), nil
	case inference.DataType_TYPE_UINT16:
		return narrow[uint32, uint16](c.GetUintContents()), nil
	case inference.DataType_TYPE_UINT32:
		return Bytes(c.GetUintContents()), nil
	case inference.DataType_TYPE_UINT64:
		return Bytes(c.GetUint64Contents()), nil
	case inference.DataType_TYPE_FP32:
		return Bytes(c.GetFp32Contents()), nil
	case inference.DataType_TYPE_FP64:
		return Bytes(c.GetFp64Contents()), nil
	case inference.DataType_TYPE_STRING:
		return JoinBytes(c.GetBytesContents()), nil
	}
	return []byte{}, nil
}

// ToContents converts raw bytes of datatype dt into typed contents. FP16 and BF16 have no typed
// representation and yield ok=false, as do BYTES that are not validly framed.
func ToContents(dt inference.DataType, raw []byte) (c *inference.InferTensorContents, ok bool) {
	c = &inference.InferTensorContents{}
	switch dt {
	case inference.DataType_TYPE_BOOL:
		c.BoolContents = make([]bool, len(raw))
		for i, v := range raw {
			c.BoolContents[i] = v != 0
		}
	case inference.DataType_TYPE_INT8:
		c.IntContents = widen[int8, int32](View[int8](raw))
	case inference.DataType_TYPE_INT16:
		c.IntContents = widen[int16, int32](View[int16](raw))
	case inference.DataType_TYPE_INT32:
		c.IntContents = View[int32](raw)
	case inference.DataType_TYPE_INT64:
		c.Int64Contents = View[int64](raw)
	case inference.DataType_TYPE_UINT8:
		c.UintContents = widen[uint8, uint32](raw)
	case inference.DataType_TYPE_UINT16:
		c.UintContents = widen[uint16, uint32](View[uint16](raw))
	case inference.DataType_TYPE_UINT32:
		c.UintContents = View[uint32](raw)
	case inference.DataType_TYPE_UINT64:
		c.Uint64Contents = View[uint64](raw)
	case inference.DataType_TYPE_FP32:
		c.Fp32Contents = View[float32](raw)
	case inference.DataType_TYPE_FP64:
		c.Fp64Contents = View[float64](raw)
	case inference.DataType_TYPE_STRING:
		elems, err := SplitBytes(raw)
		if err != nil {
			return nil, false
		}
		c.BytesContents = elems
	default:
		return nil, false
	}
	return c, true
}

// strayField returns the datatype of the first non-empty typed field that dt cannot use, or
// TYPE_INVALID when all data sits in dt's own field.
func strayField(dt inference.DataType, c *inference.InferTensorContents) inference.DataType {
	own := fieldOf(dt)
	fields := [...]struct {
		dt inference.DataType
		n  int
	}{
		{inference.DataType_TYPE_BOOL, len(c.GetBoolContents())},
		{inference.DataType_TYPE_INT32, len(c.GetIntContents())},
		{inference.DataType_TYPE_INT64, len(c.GetInt64Contents())},
		{inference.DataType_TYPE_UINT32, len(c.GetUintContents())},
		{inference.DataType_TYPE_UINT64, len(c.GetUint64Contents())},
		{inference.DataType_TYPE_FP32, len(c.GetFp32Contents())},
		{inference.DataType_TYPE_FP64, len(c.GetFp64Contents())},
		{inference.DataType_TYPE_STRING, len(c.GetBytesContents())},
	}
	for _, f := range fields {
		if f.n > 0 && f.dt != own {
			return f.dt
		}
	}
	return inference.DataType_TYPE_INVALID
}

// fieldOf names the typed field (by the datatype it carries) that holds values of dt.
func fieldOf(dt inference.DataType) inference.DataType {
	switch dt {
	case inference.DataType_TYPE_INT8, inference.DataType_TYPE_INT16:
		return inference.DataType_TYPE_INT32
	case inference.DataType_TYPE_UINT8, inference.DataType_TYPE_UINT16:
		return inference.DataType_TYPE_UINT32
	case inference.DataType_TYPE_FP16, inference.DataType_TYPE_BF16:
		return inference.DataType_TYPE_INVALID
	}
	return dt
}

func boolBytes(v []bool) []byte {
	if len(v) == 0 {
		return []byte{}
	}
	// A Go bool is one byte holding 0 or 1, exactly the raw BOOL encoding.
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v))
}

func narrow[From int32 | uint32, To int8 | int16 | uint8 | uint16](v []From) []byte {
	out := make([]To, len(v))
	for i, x := range v {
		out[i] = To(x)
	}
	return Bytes(out)
}

func widen[From int8 | int16 | uint8 | uint16, To int32 | uint32](v []From) []To {
	out := make([]To, len(v))
	for i, x := range v {
		out[i] = To(x)
	}
	return out
}
