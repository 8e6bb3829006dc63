package jsonwire

import (
	"slices"
	"unicode/utf8"
	"unsafe"
)

// UTF8 says what Unescape does with text that is not UTF-8: raw bytes of invalid UTF-8 in the
// contents, and \u escapes that are a lone UTF-16 surrogate.
//
// Lone surrogates are handled the way encoding/json handles them in every mode but
// RejectInvalid: a \u escape of a high surrogate (D800-DBFF) followed at once by a \u escape of
// a low one (DC00-DFFF) is one code point; any other surrogate escape is U+FFFD, and the escape
// after a high surrogate that did not pair is then decoded on its own (so "\ud800\ud83d\ude00"
// is U+FFFD then U+1F600). Every unescaper the gateway had does this, except the Granite
// prompt's re-encoder (lib/granite's pyScanner.str), which also swallowed that next escape:
// "\ud800\ud800\udc00" came out as three U+FFFD, not U+FFFD and U+10000.
type UTF8 uint8

const (
	// ReplaceInvalid decodes as encoding/json's Unmarshal into a string: each byte of invalid
	// UTF-8 becomes U+FFFD, and so does a lone surrogate. The result is valid UTF-8. The chat
	// template's and the Granite stage's readers need this.
	ReplaceInvalid UTF8 = iota
	// KeepInvalid copies raw bytes as they are, valid UTF-8 or not, for a string that carries
	// bytes (a KServe BYTES tensor element) or one re-encoded later by a writer that replaces
	// invalid UTF-8 itself (the Anthropic translation, the response cache's canonical form).
	// Lone surrogates still become U+FFFD: an escape always decodes to UTF-8.
	KeepInvalid
	// RejectInvalid makes invalid UTF-8 and a lone surrogate a SyntaxError, as
	// Options.StrictUTF8 makes them for the Scanner.
	RejectInvalid
)

// Unescape appends the value of a JSON string to dst, given its contents: the bytes between its
// quotes (Token.Contents). Escapes are decoded; a raw control character, a raw quote or a bad
// escape is a SyntaxError whose Offset counts from the start of src. With no escape and, unless
// m is KeepInvalid, nothing but valid UTF-8, it is one append of src (found eight bytes at a
// time). The value is never longer than src, but under ReplaceInvalid an invalid byte grows
// to the three bytes of U+FFFD.
func Unescape(dst, src []byte, m UTF8) ([]byte, error) {
	// The common case: a run with no escape, to the end.
	j := plainRun(src, 0, m)
	if j == len(src) {
		return append(dst, src...), nil
	}
	return unescapeFrom(slices.Grow(dst, len(src)), src, j, m)
}

// UnescapeString is Unescape into a new string: one allocation, the string's own.
func UnescapeString(src []byte, m UTF8) (string, error) {
	j := plainRun(src, 0, m)
	if j == len(src) {
		return string(src), nil
	}
	b, err := unescapeFrom(make([]byte, 0, len(src)), src, j, m)
	if err != nil || len(b) == 0 {
		return "", err
	}
	// b is this function's own and is never written again: the string may share its bytes, as
	// strings.Builder's String does.
	return unsafe.String(&b[0], len(b)), nil
}

// plainRun returns the end of the run of src from i that Unescape copies as it is: up to the
// first backslash, quote or control character and, unless m keeps invalid UTF-8, the first
// byte of invalid UTF-8.
func plainRun(src []byte, i int, m UTF8) int {
	if m == KeepInvalid {
		return SkipPlain(src, i)
	}
	for {
		i = SkipPlainASCII(src, i)
		if i >= len(src) || src[i] < utf8.RuneSelf {
			return i
		}
		// Text outside ASCII: check the whole run of it at once rather than rune by rune.
		k := SkipPlain(src, i)
		if utf8.Valid(src[i:k]) {
			i = k
			continue
		}
		for i < k {
			r, n := utf8.DecodeRune(src[i:k])
			if r == utf8.RuneError && n == 1 {
				return i
			}
			i += n
		}
	}
}

// unescapeFrom appends src's value to dst; src[:j] is a plain run.
func unescapeFrom(dst, src []byte, j int, m UTF8) ([]byte, error) {
	i := 0 // the start of the bytes not yet appended
	for {
		if j = plainRun(src, j, m); j >= len(src) {
			return append(dst, src[i:]...), nil
		}
		dst = append(dst, src[i:j]...)
		switch c := src[j]; {
		case c == '\\':
			if j+1 >= len(src) {
				return dst, badEscape.at(j, 0)
			}
			switch e := src[j+1]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(src, j+2)
				if !ok {
					return dst, badUnicodeEscape.at(j, 0)
				}
				j += 6
				if r >= 0xD800 && r < 0xE000 {
					lo, ok := rune(0), false
					if r < 0xDC00 && j+1 < len(src) && src[j] == '\\' && src[j+1] == 'u' {
						lo, ok = hex4(src, j+2)
					}
					if ok && lo >= 0xDC00 && lo < 0xE000 {
						r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
						j += 6
					} else if m == RejectInvalid {
						return dst, loneSurrogate.at(j-6, 0)
					} else {
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
				i = j
				continue
			default:
				return dst, badEscape.at(j, 0)
			}
			j += 2
			i = j
		case c == '"':
			return dst, unterminatedString.at(j, 0) // a raw quote ends the string early
		case c < 0x20:
			return dst, controlInString.at(j, 0)
		default: // a byte of invalid UTF-8 (plainRun passes valid text)
			if m == RejectInvalid {
				return dst, invalidUTF8.at(j, 0)
			}
			dst = append(dst, "\uFFFD"...)
			j++
			i = j
		}
	}
}
