package anthropic

import (
	"strconv"

	"github.com/infergate/infergate/internal/jsonwire"
)

// The translators write JSON by appending to a byte slice: a request or a streamed chunk is
// translated in a few microseconds only if nothing goes through reflection on the way out.

// appendString appends s as a JSON string: quotes, backslashes and control characters escaped
// (\n, \r and \t short, the others \u00XX), invalid UTF-8 replaced by U+FFFD (as encoding/json
// does), so the output is always valid JSON: jsonwire's Minimal escaping, which is this writer's.
func appendString(b []byte, s string) []byte { return jsonwire.AppendString(b, s, jsonwire.Minimal) }

// appendStringInner appends s escaped as appendString does, without the quotes.
func appendStringInner(b []byte, s string) []byte {
	return jsonwire.AppendContents(b, s, jsonwire.Minimal)
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
