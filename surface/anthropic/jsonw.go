package anthropic

import (
	"strconv"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/jsonscan"
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

// appendStringInner appends s escaped as appendString does, without the quotes.
func appendStringInner(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		// Printable ASCII other than the quote and backslash goes as it is, 8 bytes at a time:
		// most text is nothing else.
		if i = jsonscan.SkipPlainASCII(s, i); i >= len(s) {
			break
		}
		c := s[i]
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
