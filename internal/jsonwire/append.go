package jsonwire

import "unicode/utf8"

// Escaping says how AppendString writes what JSON lets a writer choose: which characters it
// escapes beyond the required ones (the quote, the backslash, control characters), which
// escape it uses for a control character, and what it writes for invalid UTF-8 (which a JSON
// text may not hold). Whatever the flags, the output is valid JSON that decodes to s, with each
// byte of invalid UTF-8 as U+FFFD. Hex digits are lower case; '/' is never escaped.
//
// The presets reproduce, byte for byte, the writers the gateway had; each is pinned by a test
// to the bytes that writer produced.
type Escaping uint8

const (
	// EscapeHTML writes <, > and & as \u003c, \u003e and \u0026, as encoding/json does by
	// default, so that the JSON can sit inside HTML.
	EscapeHTML Escaping = 1 << iota
	// EscapeLineSeparators writes U+2028 and U+2029 as \u2028 and \u2029, as encoding/json
	// does: JavaScript before ES2019 ends a line at them.
	EscapeLineSeparators
	// ShortBF writes backspace and form feed as \b and \f (as encoding/json has since Go 1.22,
	// and Python), not \u0008 and \u000c. \n, \r and \t are always short unless ControlAsHex.
	ShortBF
	// ControlAsHex writes every control character as \u00XX, \n, \r and \t included (ShortBF
	// is then ignored): the response cache's canonical form.
	ControlAsHex
	// RawReplacement writes a byte of invalid UTF-8 as U+FFFD itself (its three UTF-8 bytes),
	// not as the escape \ufffd.
	RawReplacement
	// ASCIIOnly escapes every byte that is not printable ASCII: DEL as \u007f, a character
	// outside ASCII as \uXXXX, one above U+FFFF as a UTF-16 surrogate pair (Python's
	// json.dumps with ensure_ascii; RawReplacement is then ignored).
	ASCIIOnly
)

// The writers the gateway had, as presets.
const (
	// Minimal escapes only what JSON requires, \n, \r and \t short and other control
	// characters as \u00XX (\b as \u0008): the Anthropic translation's writer
	// (surface/anthropic appendString).
	Minimal Escaping = 0
	// MinimalShort is Minimal with \b and \f short: the KServe tensor writer
	// (lib/tensor AppendJSONString).
	MinimalShort = ShortBF
	// EncodingJSON is what json.Marshal writes for a string: the Granite stage's streamed
	// answers (stage/granitestage appendJSONString).
	EncodingJSON = EscapeHTML | EscapeLineSeparators | ShortBF
	// Canonical is the response cache's one spelling of a string for its keys: every control
	// character as \u00XX, invalid UTF-8 as a raw U+FFFD (stage/respcache appendString).
	// Changing it changes every cache key.
	Canonical = ControlAsHex | RawReplacement
	// PythonASCII is Python's json.dumps(ensure_ascii=True), which the Granite prompt must
	// reproduce (lib/granite pyString).
	PythonASCII = ASCIIOnly | ShortBF
)

const hexDigits = "0123456789abcdef"

// AppendString appends s to dst as a JSON string, quotes included, escaped as e says.
func AppendString[T Text](dst []byte, s T, e Escaping) []byte {
	dst = append(dst, '"')
	dst = AppendContents(dst, s, e)
	return append(dst, '"')
}

// AppendContents is AppendString without the quotes, for a writer that builds one string from
// several pieces.
func AppendContents[T Text](dst []byte, s T, e Escaping) []byte {
	// Which skip stops at every byte e has something to do with is chosen once; a switch per
	// stop, not a call through a function value, keeps the calls direct.
	const (
		ascii = iota
		html
		printable
		each
	)
	skip := ascii
	switch {
	case e&EscapeHTML != 0 && e&ASCIIOnly != 0:
		skip = each // no writer combines them: a byte loop is enough
	case e&EscapeHTML != 0:
		skip = html
	case e&ASCIIOnly != 0:
		skip = printable
	}
	start := 0 // the start of the bytes not yet appended
	for i := 0; ; {
		switch skip {
		case ascii:
			i = SkipPlainASCII(s, i)
		case html:
			i = SkipPlainHTML(s, i)
		case printable:
			i = skipPrintable(s, i)
		default:
			i = skipBytes(s, i)
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			dst = appendASCII(dst, c, e)
			i++
			start = i
			continue
		}
		r, n := decodeRune(s, i)
		switch {
		case r == utf8.RuneError && n == 1:
			dst = append(dst, s[start:i]...)
			if e&(RawReplacement|ASCIIOnly) == RawReplacement {
				dst = append(dst, "\uFFFD"...)
			} else {
				dst = append(dst, `\ufffd`...)
			}
		case e&ASCIIOnly != 0:
			dst = append(dst, s[start:i]...)
			if r > 0xFFFF {
				r -= 0x10000
				dst = appendU(dst, 0xD800+r>>10)
				r = 0xDC00 + r&0x3FF
			}
			dst = appendU(dst, r)
		case e&EscapeLineSeparators != 0 && (r == '\u2028' || r == '\u2029'):
			dst = append(dst, s[start:i]...)
			dst = appendU(dst, r)
		default:
			// Valid text, written as it is. Text outside ASCII comes in runs (a word, a
			// sentence): decode on while it lasts rather than going back to the skip.
			for i += n; i < len(s) && s[i] >= utf8.RuneSelf; i += n {
				if r, n = decodeRune(s, i); r == utf8.RuneError && n == 1 || e&ASCIIOnly != 0 ||
					e&EscapeLineSeparators != 0 && (r == '\u2028' || r == '\u2029') {
					break
				}
			}
			continue
		}
		i += n
		start = i
	}
	return append(dst, s[start:]...)
}

// appendASCII appends the escape of an ASCII byte a skip stopped at.
func appendASCII(dst []byte, c byte, e Escaping) []byte {
	switch {
	case c == '"' || c == '\\':
		return append(dst, '\\', c)
	case c >= 0x20: // < > & under EscapeHTML, DEL under ASCIIOnly
		return appendU(dst, rune(c))
	case e&ControlAsHex != 0:
	case c == '\n':
		return append(dst, '\\', 'n')
	case c == '\r':
		return append(dst, '\\', 'r')
	case c == '\t':
		return append(dst, '\\', 't')
	case e&ShortBF == 0:
	case c == '\b':
		return append(dst, '\\', 'b')
	case c == '\f':
		return append(dst, '\\', 'f')
	}
	return appendU(dst, rune(c))
}

// appendU appends \uXXXX for r (at most 0xFFFF).
func appendU(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
}

// decodeRune decodes the UTF-8 sequence at s[i] (utf8.RuneError and 1 for an invalid byte).
func decodeRune[T Text](s T, i int) (rune, int) {
	// At most four bytes are converted: no allocation for a []byte s.
	return utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
}

// skipBytes stops at every byte but printable ASCII other than the quote, the backslash and
// HTML's three, one at a time.
func skipBytes[T Text](b T, i int) int {
	for ; i < len(b); i++ {
		if c := b[i]; c < 0x20 || c >= 0x7F || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			break
		}
	}
	return i
}
