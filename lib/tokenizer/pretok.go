package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The pre-tokenizer: the regular expressions that split text into pieces before the BPE, as
// hand-written scanners. Go's regexp has no lookahead, which all three patterns use (\s+(?!\S));
// a scanner is also several times faster than a general engine. Each scanner returns the end of
// the piece that starts at i, with the semantics of the pattern's leftmost-first alternation and
// backtracking (documented per alternative below). Every character is matched by some
// alternative of these patterns, so the pieces tile the text.
//
// Character classes follow Unicode (Go's unicode tables): \p{L} is unicode.IsLetter, \p{N}
// unicode.IsNumber, \s unicode.IsSpace (the White_Space property, as in Oniguruma, the engine
// Hugging Face's tokenizers use). A byte that is not valid UTF-8 is a character of its own that
// is neither letter, number nor space.

// The patterns, as they appear in tokenizer.json files.
const (
	// Qwen 2, 2.5 and 3.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama 3, 3.1, 3.2, 3.3 (tiktoken's cl100k_base).
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// GPT-2, GPT-J, GPT-NeoX, Pythia, RoBERTa: the ByteLevel pre-tokenizer's own (use_regex).
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// splitFunc returns the end (> i) of the piece of s that starts at i < len(s).
type splitFunc func(s string, i int) int

var knownPatterns = map[string]splitFunc{
	patternQwen2:  scanQwen2,
	patternLlama3: scanLlama3,
	patternGPT2:   scanGPT2,
}

// preStep is one pre-tokenizer: a split (nil: none) and, for ByteLevel, whether a space is
// prepended to each piece that does not start with one.
type preStep struct {
	split       splitFunc
	byteLevel   bool
	prefixSpace bool
}

const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for r := range rune(utf8.RuneSelf) {
		asciiClass[r] = slowClass(r)
	}
}

// runeProps holds, for the code points below propsLimit (the BMP and the two supplementary
// planes with letters in use), the class in the low two bits and propNFC when the character
// cannot combine with what is before it under NFC (NFC_QC=Yes and canonical combining class 0),
// so that a text of only such characters is NFC already. It is built on the first Load
// (196 KB, a few milliseconds) and replaces the unicode package's binary searches.
var (
	runeProps     []uint8
	runePropsOnce sync.Once
)

const (
	propsLimit = 0x30000
	propNFC    = 4
)

func buildRuneProps() {
	p := make([]uint8, propsLimit)
	var buf [utf8.UTFMax]byte
	for r := range rune(propsLimit) {
		p[r] = slowClass(r)
		if r >= 0xD800 && r < 0xE000 {
			continue
		}
		n := utf8.EncodeRune(buf[:], r)
		if norm.NFC.Properties(buf[:n]).BoundaryBefore() && norm.NFC.IsNormal(buf[:n]) {
			p[r] |= propNFC
		}
	}
	runeProps = p
}

func slowClass(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

// next decodes the character at i: its rune, width and class. An invalid byte is RuneError of
// width 1, class other.
func next(s string, i int) (rune, int, uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && w == 1 {
		return r, 1, clsOther
	}
	if r < propsLimit {
		return r, w, runeProps[r] & 3
	}
	return r, w, slowClass(r)
}

// stableNFC: r is NFC on its own and cannot combine with a character before it.
func stableNFC(r rune) bool {
	return r < utf8.RuneSelf || r < propsLimit && runeProps[r]&propNFC != 0
}

// nfc returns the NFC form of s. Stretches of characters that are NFC on their own and cannot
// combine with what precedes them (most text) are kept as they are; only the segments around
// other characters go through norm.NFC, cut where such a character starts (a normalization
// boundary), so that the result is norm.NFC.String(s).
func nfc(s string, tmp *[]byte) string {
	var out []byte
	done := 0 // s[:done] is in out (when out != nil)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			// ASCII is stable: skip it eight bytes at a time (a chat's text is mostly ASCII).
			i++
			for i+8 <= len(s) && ascii8(s[i:]) {
				i += 8
			}
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 || stableNFC(r) {
			i += w
			continue
		}
		// A segment to normalize: from the start of the last stable character before i to the
		// next stable character after i.
		start := i
		for start > done {
			r, w := utf8.DecodeLastRuneInString(s[done:start])
			if r == utf8.RuneError && w == 1 {
				break // a byte that is not UTF-8 stays out of norm's way
			}
			start -= w
			if stableNFC(r) {
				break
			}
		}
		end := i + w
		for end < len(s) {
			r, w := utf8.DecodeRuneInString(s[end:])
			if r == utf8.RuneError && w == 1 || stableNFC(r) {
				break
			}
			end += w
		}
		if n := end - start; cap(*tmp) < n+n/4 {
			*tmp = make([]byte, 0, n+n/4) // NFC rarely grows text by more (norm's stream-safe CGJs)
		}
		*tmp = norm.NFC.AppendString((*tmp)[:0], s[start:end])
		if out == nil && string(*tmp) == s[start:end] {
			i = end // NFC after all (a combining mark that combines with nothing here, say)
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(s)+len(s)/8)
		}
		out = append(out, s[done:start]...)
		out = append(out, *tmp...)
		done, i = end, end
	}
	if out == nil {
		return s
	}
	return string(append(out, s[done:]...))
}

// run returns the end of the run of characters of class cls that starts at i.
func run(s string, i int, cls uint8) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiClass[c] != cls {
				return i
			}
			i++
			continue
		}
		_, w, c := next(s, i)
		if c != cls {
			return i
		}
		i += w
	}
	return i
}

// newlines returns the end of the run of \r and \n at i.
func newlines(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// contraction returns the length of 's|'t|'re|'ve|'m|'ll|'d after the apostrophe at i-1 (0: none),
// ASCII case-insensitively when fold (as (?i:...) in the Qwen and Llama patterns, and as
// transformers.js reads them; Oniguruma would also fold U+017F ſ to s).
func contraction(s string, i int, fold bool) int {
	lower := func(j int) byte {
		if j >= len(s) {
			return 0
		}
		c := s[j]
		if fold && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch lower(i) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(i+1) == 'e' {
			return 2
		}
	case 'l':
		if lower(i+1) == 'l' {
			return 2
		}
	}
	return 0
}

// whitespace handles the alternatives for a run of \s at i:
//
//	\s*[\r\n]+   (nl only) backtracking gives the run up to and including its last \r or \n;
//	\s+(?!\S)    the whole run at the end of the text, else the run less its last character
//	             when that leaves at least one;
//	\s+          the whole run.
func whitespace(s string, i int, nl bool) int {
	j, last, lastNL, count := i, i, -1, 0
	for j < len(s) {
		r, w, c := next(s, j)
		if c != clsSpace {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = j
		}
		last = j
		count++
		j += w
	}
	switch {
	case nl && lastNL >= 0:
		return lastNL + 1
	case j == len(s):
		return j
	case count >= 2:
		return last
	}
	return j
}

func scanQwen2(s string, i int) int  { return scanCL100k(s, i, 1) }
func scanLlama3(s string, i int) int { return scanCL100k(s, i, 3) }

// scanCL100k scans
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func scanCL100k(s string, i int, maxDigits int) int {
	r, w, c := next(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if n := contraction(s, i+1, true); n > 0 {
			return i + 1 + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return run(s, i+w, clsLetter)
	}
	if c != clsNumber && r != '\r' && r != '\n' && i+w < len(s) {
		if _, w2, c2 := next(s, i+w); c2 == clsLetter {
			return run(s, i+w+w2, clsLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if c == clsNumber {
		j := i + w
		for k := 1; k < maxDigits && j < len(s); k++ {
			_, w2, c2 := next(s, j)
			if c2 != clsNumber {
				break
			}
			j += w2
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if r == ' ' && i+1 < len(s) {
		if _, w2, c2 := next(s, i+1); c2 == clsOther {
			return newlines(s, run(s, i+1+w2, clsOther))
		}
	}
	if c == clsOther {
		return newlines(s, run(s, i+w, clsOther))
	}
	return whitespace(s, i, true)
}

// scanGPT2 scans 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func scanGPT2(s string, i int) int {
	r, w, c := next(s, i)
	if r == '\'' {
		if n := contraction(s, i+1, false); n > 0 {
			return i + 1 + n
		}
	}
	if r == ' ' && i+1 < len(s) {
		if _, w2, c2 := next(s, i+1); c2 != clsSpace {
			return run(s, i+1+w2, c2)
		}
	}
	if c != clsSpace {
		return run(s, i+w, c)
	}
	return whitespace(s, i, false)
}
