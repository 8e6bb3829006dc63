// Package tensor is the KServe v2 tensor codec: datatype names and sizes, zero-copy typed views of
// little-endian raw bytes, BYTES element framing, and conversion between the typed
// InferTensorContents representation and raw bytes.
//
// Datatypes are the generated inference.DataType enum, whose numbering already covers all 13 KServe
// datatypes (TYPE_STRING is the KServe "BYTES" type).
package tensor

import "github.com/infergate/infergate/gen/inference"

// names maps each valid DataType to its KServe wire name.
var names = [...]string{
	inference.DataType_TYPE_BOOL:   "BOOL",
	inference.DataType_TYPE_UINT8:  "UINT8",
	inference.DataType_TYPE_UINT16: "UINT16",
	inference.DataType_TYPE_UINT32: "UINT32",
	inference.DataType_TYPE_UINT64: "UINT64",
	inference.DataType_TYPE_INT8:   "INT8",
	inference.DataType_TYPE_INT16:  "INT16",
	inference.DataType_TYPE_INT32:  "INT32",
	inference.DataType_TYPE_INT64:  "INT64",
	inference.DataType_TYPE_FP16:   "FP16",
	inference.DataType_TYPE_FP32:   "FP32",
	inference.DataType_TYPE_FP64:   "FP64",
	inference.DataType_TYPE_STRING: "BYTES",
	inference.DataType_TYPE_BF16:   "BF16",
}

// sizes holds the element size in bytes of each fixed-size DataType; BYTES is variable (0).
var sizes = [...]int{
	inference.DataType_TYPE_BOOL:   1,
	inference.DataType_TYPE_UINT8:  1,
	inference.DataType_TYPE_UINT16: 2,
	inference.DataType_TYPE_UINT32: 4,
	inference.DataType_TYPE_UINT64: 8,
	inference.DataType_TYPE_INT8:   1,
	inference.DataType_TYPE_INT16:  2,
	inference.DataType_TYPE_INT32:  4,
	inference.DataType_TYPE_INT64:  8,
	inference.DataType_TYPE_FP16:   2,
	inference.DataType_TYPE_FP32:   4,
	inference.DataType_TYPE_FP64:   8,
	inference.DataType_TYPE_STRING: 0,
	inference.DataType_TYPE_BF16:   2,
}

// ParseDatatype returns the DataType for a KServe datatype string such as "INT32" or "BYTES",
// or TYPE_INVALID when the string names no datatype.
func ParseDatatype(s string) inference.DataType {
	// A switch compiles to a length-and-compare jump table, cheaper than a map on the hot path.
	switch s {
	case "BOOL":
		return inference.DataType_TYPE_BOOL
	case "UINT8":
		return inference.DataType_TYPE_UINT8
	case "UINT16":
		return inference.DataType_TYPE_UINT16
	case "UINT32":
		return inference.DataType_TYPE_UINT32
	case "UINT64":
		return inference.DataType_TYPE_UINT64
	case "INT8":
		return inference.DataType_TYPE_INT8
	case "INT16":
		return inference.DataType_TYPE_INT16
	case "INT32":
		return inference.DataType_TYPE_INT32
	case "INT64":
		return inference.DataType_TYPE_INT64
	case "FP16":
		return inference.DataType_TYPE_FP16
	case "FP32":
		return inference.DataType_TYPE_FP32
	case "FP64":
		return inference.DataType_TYPE_FP64
	case "BYTES":
		return inference.DataType_TYPE_STRING
	case "BF16":
		return inference.DataType_TYPE_BF16
	}
	return inference.DataType_TYPE_INVALID
}

// Name returns the KServe wire name of dt ("INT32", "BYTES", ...), or "<invalid>" as Triton
// prints unknown datatypes in its error messages.
func Name(dt inference.DataType) string {
	if dt > 0 && int(dt) < len(names) {
		return names[dt]
	}
	return "<invalid>"
}

// ElementSize returns the size in bytes of one element of dt, or 0 for BYTES and invalid types.
func ElementSize(dt inference.DataType) int {
	if dt > 0 && int(dt) < len(sizes) {
		return sizes[dt]
	}
	return 0
}

// Valid reports whether dt is one of the 13 KServe datatypes.
func Valid(dt inference.DataType) bool {
	return dt > 0 && int(dt) < len(names)
}

// ElementCount returns the product of shape's dimensions, and false if any dimension is negative
// or the product overflows int64 (a hostile shape must not wrap around to a small count).
func ElementCount(shape []int64) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		if d == 0 {
			n = 0
		}
	}
	if n == 0 {
		return 0, true
	}
	for _, d := range shape {
		if n > (1<<62)/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}
