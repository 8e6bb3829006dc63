package tensor

import (
	"encoding/binary"
	"fmt"
)

// BYTES tensors travel as a run of elements, each a uint32 little-endian length followed by that
// many bytes, with no terminator or padding.

// FramingError describes raw BYTES data that does not parse as length-prefixed elements.
type FramingError struct {
	// Truncated is true when the data ends inside an element's content, false when it ends inside
	// a 4-byte length indicator.
	Truncated bool
	// Want is the declared element length (Truncated) or 4 (length indicator); Have the bytes left.
	Want, Have int
}

func (e *FramingError) Error() string {
	if e.Truncated {
		return fmt.Sprintf("expecting string of length %d but only %d bytes available", e.Want, e.Have)
	}
	return fmt.Sprintf("expecting 4 bytes but only %d bytes available", e.Have)
}

// CountBytes returns the number of BYTES elements framed in b without allocating. It fails on a
// length indicator cut short or an element whose declared length runs past the end of b, so a
// hostile length is compared with the bytes present and never trusted.
func CountBytes(b []byte) (int, error) {
	return walkBytes(b, func([]byte) {})
}

// SplitBytes returns the BYTES elements framed in b as subslices of b (no copy). Capacity is bounded
// by what b can hold, never by a caller's claim.
func SplitBytes(b []byte) ([][]byte, error) {
	out := make([][]byte, 0, min(len(b)/4, 1024))
	_, err := walkBytes(b, func(elem []byte) { out = append(out, elem) })
	return out, err
}

// walkBytes calls each with every framed element of b, in order, and returns how many there were.
func walkBytes(b []byte, each func(elem []byte)) (int, error) {
	n := 0
	for len(b) > 0 {
		if len(b) < 4 {
			return n, &FramingError{Want: 4, Have: len(b)}
		}
		l := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(l) > uint64(len(b)) {
			return n, &FramingError{Truncated: true, Want: int(l), Have: len(b)}
		}
		each(b[:l:l])
		b = b[l:]
		n++
	}
	return n, nil
}

// AppendBytes appends elem to dst as one framed BYTES element.
func AppendBytes(dst, elem []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(elem)))
	return append(dst, elem...)
}

// JoinBytes frames elems into one raw BYTES buffer.
func JoinBytes[E ~[]byte | ~string](elems []E) []byte {
	size := 0
	for _, e := range elems {
		size += 4 + len(e)
	}
	out := make([]byte, 0, size)
	for _, e := range elems {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e)))
		out = append(out, e...)
	}
	return out
}
