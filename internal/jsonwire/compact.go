package jsonwire

import "slices"

// AppendCompact appends the JSON value raw to dst without its insignificant white space. It is
// how a writer passes a value it received through (an upstream's usage, a fingerprint, a
// stop_reason) into what it writes: under EncodingJSON the result is exactly what json.Marshal
// writes for a json.RawMessage holding raw, which is what the writers it replaces did.
//
// Strings are kept as they were written, escapes included (a \u0041 stays \u0041): only the
// escapes e adds to what JSON requires and a valid text may hold raw are made, the HTML
// characters under EscapeHTML and U+2028 and U+2029 under EscapeLineSeparators. A byte of
// invalid UTF-8 inside a string is kept as it is, as json.Marshal keeps it; that is
// AppendString's one difference. e's other flags choose how a character that must be escaped
// is spelled, and raw's own spelling is kept, so they change nothing here.
//
// raw must be one JSON value, white space around it allowed, as Valid has it; otherwise the
// error is Validate's and dst is returned as it was.
func AppendCompact(dst, raw []byte, e Escaping) ([]byte, error) {
	// Checking first keeps the copy loop below to what a valid text can hold; the check runs
	// eight bytes at a time, and the values this copies are small.
	if err := Validate(raw, Options{}); err != nil {
		return dst, err
	}
	dst = slices.Grow(dst, len(raw))
	start := 0 // the start of the bytes not yet appended
	for i := 0; i < len(raw); {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
			dst = append(dst, raw[start:i]...)
			i = skipSpace(raw, i)
			start = i
		case '"':
			dst = append(dst, raw[start:i]...)
			dst, i = compactString(dst, raw, i, e)
			start = i
		default:
			i++
		}
	}
	return append(dst, raw[start:]...), nil
}

// compactString appends the valid string whose opening quote is raw[i], with the escapes e adds,
// and returns the index after its closing quote.
func compactString(dst, raw []byte, i int, e Escaping) ([]byte, int) {
	html, lines := e&EscapeHTML != 0, e&EscapeLineSeparators != 0
	start := i // the start of the bytes not yet appended
	for j := i + 1; ; {
		switch {
		case html:
			j = SkipPlainHTML(raw, j)
		case lines:
			j = SkipPlainASCII(raw, j)
		default:
			j = SkipPlain(raw, j)
		}
		// The text is valid: the string ends before the input does, and a control character
		// is never raw in it.
		switch c := raw[j]; {
		case c == '"':
			return append(dst, raw[start:j+1]...), j + 1
		case c == '\\':
			j += 2 // the escaped byte; a \u escape's hex digits are plain
		case c == '<' || c == '>' || c == '&':
			if html {
				dst = appendU(append(dst, raw[start:j]...), rune(c))
				start = j + 1
			}
			j++
		case lines && c == 0xE2 && j+2 < len(raw) && raw[j+1] == 0x80 && raw[j+2]&^1 == 0xA8:
			// U+2028 or U+2029, found by their bytes as encoding/json finds them.
			dst = appendU(append(dst, raw[start:j]...), 0x2028|rune(raw[j+2]&1))
			j += 3
			start = j
		default: // a byte above 0x7F, kept
			j++
		}
	}
}
