package tensor

import "unsafe"

// Number is every Go type that a fixed-size KServe datatype is viewed as. FP16 and BF16 have no Go
// type; they are viewed as uint16 bit patterns.
type Number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// littleEndian is true on hosts whose native byte order matches the wire's, where raw tensor bytes
// can be reinterpreted in place instead of decoded.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// View returns the little-endian raw bytes b as a []T. On little-endian hosts with suitably aligned
// memory the result aliases b (no copy), so writes through it change b; otherwise it is a decoded copy.
// Trailing bytes that do not fill a whole element are ignored; callers validate sizes first.
func View[T Number](b []byte) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	n := len(b) / size
	if n == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if littleEndian && uintptr(p)%unsafe.Alignof(zero) == 0 {
		return unsafe.Slice((*T)(p), n)
	}
	out := make([]T, n)
	copy(Bytes(out), b[:n*size])
	if !littleEndian {
		swapInPlace(Bytes(out), size)
	}
	return out
}

// Bytes returns s as little-endian raw bytes. On little-endian hosts the result aliases s.
func Bytes[T Number](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var zero T
	size := int(unsafe.Sizeof(zero))
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*size)
	if littleEndian {
		return b
	}
	out := make([]byte, len(b))
	copy(out, b)
	swapInPlace(out, size)
	return out
}

func swapInPlace(b []byte, size int) {
	for i := 0; i+size <= len(b); i += size {
		for l, r := i, i+size-1; l < r; l, r = l+1, r-1 {
			b[l], b[r] = b[r], b[l]
		}
	}
}
