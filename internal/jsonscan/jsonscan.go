// Package jsonscan holds what the gateway's hand-written JSON readers share (the request
// router's, the chat template's, the Granite stage's and the Anthropic translation's): finding
// where a string literal's plain bytes end; and, for a writer (the Anthropic one, the Granite
// stage's), where a string's bytes stop being ones JSON takes as they are. Most of a request or
// an answer is string contents, and a reader that looks at them a byte at a time runs at a few
// hundred MB/s; these look at eight at a time. encoding/json has no such entry point, and a
// general JSON library would replace the readers rather than serve them, so this is written here.
package jsonscan

// Text is what the skips read: a document's bytes, or a string being written into one.
type Text interface{ ~string | ~[]byte }

const (
	ones = 0x0101010101010101
	tops = 0x8080808080808080
)

// SkipPlain returns the index of the first byte of b at or after i that is a quote, a backslash
// or a control character (below 0x20), or len(b). Bytes above 0x7F are passed over.
func SkipPlain[T Text](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := word(b, i)
		q, e := x^(ones*'"'), x^(ones*'\\')
		// A byte below n turns x - n*ones's top bit on (the borrow), unless its own top bit is
		// on; a zero byte of q or e is a quote or a backslash. The borrow can mark bytes after
		// a match too, never one when there is none: enough to tell that none matches.
		if ((x-ones*0x20)&^x|(q-ones)&^q|(e-ones)&^e)&tops != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			break
		}
	}
	return i
}

// SkipPlainASCII is SkipPlain that also stops at a byte above 0x7F, for a reader that checks or
// decodes UTF-8 there.
func SkipPlainASCII[T Text](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := word(b, i)
		q, e := x^(ones*'"'), x^(ones*'\\')
		// With no top bit on in x (all ASCII), the borrows alone tell.
		if ((x-ones*0x20)|(q-ones)|(e-ones)|x)&tops != 0 {
			break
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
// as encoding/json does (the Granite stage's answers).
func SkipPlainHTML[T Text](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := word(b, i)
		q, e := x^(ones*'"'), x^(ones*'\\')
		l, g, a := x^(ones*'<'), x^(ones*'>'), x^(ones*'&')
		// As in SkipPlainASCII: with every byte ASCII, a borrow marks exactly a match.
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

// word is b[i:i+8] as a little-endian word (the compiler makes one load of the eight).
func word[T Text](b T, i int) uint64 {
	b = b[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
