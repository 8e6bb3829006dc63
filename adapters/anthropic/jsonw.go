package anthropic

import (
	"strconv"
	"unicode/utf8"
)

// The translators write JSON by appending to a byte slice: a request or a streamed chunk is
// translated in a few microseconds only if nothing goes through reflection on the way out.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and control characters escaped,
// invalid UTF-8 replaced by U+FFFD (as encoding/json does), so the output is always valid JSON.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendStringInner(b, s)
	return append(b, '"')
}

// plain marks the ASCII bytes a JSON string holds as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendStringInner appends s escaped as appendString does, without the quotes.
func appendStringInner(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		// 8 bytes of printable ASCII at a time: most text is nothing else.
		for i+8 <= len(s) {
			x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			if (special(x)|x)&msb != 0 {
				break
			}
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if plain[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}

func appendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

func appendFloat(b []byte, f float64) []byte { return strconv.AppendFloat(b, f, 'g', -1, 64) }

// appendComma appends a separator unless b ends an opening brace or bracket.
func appendComma(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] != '{' && b[n-1] != '[' {
		b = append(b, ',')
	}
	return b
}
