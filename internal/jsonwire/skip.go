package jsonwire

import "math/bits"

// The skips below find where a run of bytes that needs no attention ends. Most of a request or an
// answer is string contents, and a loop that looks at one byte at a time runs at a few hundred
// MB/s; these look at eight at a time (SWAR: SIMD within a register).

// Text is what the skips and the writer read: a document's bytes, or a string being written.
type Text interface{ ~string | ~[]byte }

const (
	ones = 0x0101010101010101
	tops = 0x8080808080808080
)

// SkipPlain returns the index of the first byte of b at or after i that is a quote, a backslash
// or a control character (below 0x20), or len(b). Bytes above 0x7F are passed over: this is the
// skip of a reader that does not look at UTF-8.
func SkipPlain[T Text](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := word(b, i)
		q, e := x^(ones*'"'), x^(ones*'\\')
		// A byte below n turns x - n*ones's top bit on (the borrow), unless its own top bit is
		// on (hence &^x); a zero byte of q or e is a quote or a backslash. A borrow can also mark
		// a byte after a real match, never one when there is none: enough to know none matches,
		// and the byte loop below finds the exact one.
		if m := ((x-ones*0x20)&^x | (q-ones)&^q | (e-ones)&^e) & tops; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			break
		}
	}
	return i
}

// SkipPlainASCII is SkipPlain that also stops at a byte above 0x7F, for a reader or writer that
// checks or decodes UTF-8 there.
func SkipPlainASCII[T Text](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := word(b, i)
		q, e := x^(ones*'"'), x^(ones*'\\')
		// Or-ing x in stops at any top bit; with every byte ASCII, a borrow marks exactly a match.
		if m := ((x - ones*0x20) | (q - ones) | (e - ones) | x) & tops; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
	}
	return i
}

// SkipPlainHTML is SkipPlainASCII that also stops at <, > and &, for a writer that escapes them
// as encoding/json does.
func SkipPlainHTML[T Text](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := word(b, i)
		q, e := x^(ones*'"'), x^(ones*'\\')
		l, g, a := x^(ones*'<'), x^(ones*'>'), x^(ones*'&')
		if ((x-ones*0x20)|(q-ones)|(e-ones)|(l-ones)|(g-ones)|(a-ones)|x)&tops != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 || c == '<' || c == '>' || c == '&' {
			break
		}
	}
	return i
}

// skipPrintable is SkipPlainASCII that also stops at DEL (0x7F), for the writer that leaves
// nothing but printable ASCII unescaped (Python's ensure_ascii).
func skipPrintable[T Text](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := word(b, i)
		q, e := x^(ones*'"'), x^(ones*'\\')
		// x + 1 turns a 0x7F byte's top bit on. A carry out of a byte happens only from 0xFF,
		// whose own top bit already stops the loop.
		if ((x-ones*0x20)|(q-ones)|(e-ones)|(x+ones)|x)&tops != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x7F {
			break
		}
	}
	return i
}

// skipSpace returns the index of the first byte of b at or after i that is not JSON white space
// (space, tab, line feed, carriage return). Bodies are mostly compact, so a byte loop suffices.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// word is b[i:i+8] as a little-endian word (the compiler makes one load of the eight).
func word[T Text](b T, i int) uint64 {
	b = b[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
