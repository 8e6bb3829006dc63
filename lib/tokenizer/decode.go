package tokenizer

import (
	"unicode/utf8"
)

// Decode returns the text of ids: the bytes each token stands for, with every ill-formed UTF-8
// sequence (a character cut between tokens, say) replaced by U+FFFD, one per maximal subpart as
// Rust's String::from_utf8_lossy and the WHATWG decoder do. Ids that are not tokens are skipped,
// and so are special tokens when skipSpecial. It does not apply clean_up_tokenization_spaces.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	n := 0
	for _, id := range ids {
		if t.keep(id, skipSpecial) {
			n += len(t.texts.get(id))
		}
	}
	buf := make([]byte, 0, n)
	for _, id := range ids {
		if t.keep(id, skipSpecial) {
			buf = append(buf, t.texts.get(id)...)
		}
	}
	buf = t.trimStart(buf)
	if utf8.Valid(buf) {
		return string(buf)
	}
	out, _ := appendValid(make([]byte, 0, len(buf)+8), buf, true)
	return string(out)
}

func (t *Tokenizer) keep(id int, skipSpecial bool) bool {
	return id >= 0 && id < len(t.known) && t.known[id] && !(skipSpecial && t.special[id])
}

// StreamDecoder turns ids into text one at a time, holding back a character whose bytes are cut
// between tokens until the rest arrives. The concatenation of what Add and Flush return is
// Decode of all the ids. It is not safe for concurrent use.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte // at most 3 bytes: the start of an incomplete character
	out         []byte
	strip       int  // how many more of the decoder's Strip may go from the text's start
	continuing  bool // the ids continue a text (Continuing): nothing is stripped
}

// NewDecoder returns a streaming decoder; skipSpecial as in Decode.
func (t *Tokenizer) NewDecoder(skipSpecial bool) *StreamDecoder {
	d := &StreamDecoder{t: t, skipSpecial: skipSpecial}
	if t.spm != nil {
		d.strip = t.spm.stripN
	}
	return d
}

// Continuing makes d decode ids that continue a text, such as a model's output after its
// prompt: a SentencePiece-style decoder's Strip of the text's start does not apply, so an
// output's first word keeps its leading space ("▁Hello" is " Hello"), as vLLM's incremental
// detokenizer, primed with the prompt's last tokens, gives it. It returns d. Byte-level
// tokenizers have no Strip, and decode the same either way.
func (d *StreamDecoder) Continuing() *StreamDecoder {
	d.continuing, d.strip = true, 0
	return d
}

// Add returns the text that id completes ("" while a character is incomplete).
func (d *StreamDecoder) Add(id int) string {
	if !d.t.keep(id, d.skipSpecial) {
		return ""
	}
	b := d.t.texts.get(id)
	if len(d.pending) == 0 && utf8.ValidString(b) {
		if d.strip > 0 {
			return d.trim(b)
		}
		return b // the common case: a token of whole characters
	}
	d.pending = append(d.pending, b...)
	var rest int
	d.out, rest = appendValid(d.out[:0], d.pending, false)
	n := copy(d.pending, d.pending[len(d.pending)-rest:])
	d.pending = d.pending[:n]
	if d.strip > 0 {
		return d.trim(string(d.out))
	}
	return string(d.out)
}

// Flush returns what is held back, as U+FFFD (the stream ended inside a character), and resets
// the decoder for a new text.
func (d *StreamDecoder) Flush() string {
	if d.t.spm != nil && !d.continuing {
		d.strip = d.t.spm.stripN
	}
	if len(d.pending) == 0 {
		return ""
	}
	d.out, _ = appendValid(d.out[:0], d.pending, true)
	d.pending = d.pending[:0]
	return string(d.out)
}

// appendValid appends src to dst with each maximal subpart of an ill-formed sequence replaced by
// U+FFFD. Unless final, a trailing incomplete (but so far well-formed) character is not appended:
// rest is its length.
func appendValid(dst, src []byte, final bool) ([]byte, int) {
	for i := 0; i < len(src); {
		c := src[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, w := utf8.DecodeRune(src[i:])
		if r != utf8.RuneError || w > 1 {
			dst = append(dst, src[i:i+w]...)
			i += w
			continue
		}
		n, complete := maximalSubpart(src[i:])
		if !complete && !final {
			return dst, len(src) - i
		}
		dst = append(dst, "\uFFFD"...)
		i += n
	}
	return dst, 0
}

// maximalSubpart returns the length of the ill-formed sequence at the start of p (which
// utf8.DecodeRune rejected): the longest prefix that could begin a well-formed character, at
// least 1. complete is false when that prefix runs to the end of p, so that more bytes could
// still make it well-formed.
func maximalSubpart(p []byte) (n int, complete bool) {
	b0 := p[0]
	need, lo, hi := 0, byte(0x80), byte(0xBF)
	switch {
	case b0 >= 0xC2 && b0 <= 0xDF:
		need = 2
	case b0 == 0xE0:
		need, lo = 3, 0xA0
	case b0 == 0xED:
		need, hi = 3, 0x9F
	case b0 >= 0xE1 && b0 <= 0xEF:
		need = 3
	case b0 == 0xF0:
		need, lo = 4, 0x90
	case b0 == 0xF4:
		need, hi = 4, 0x8F
	case b0 >= 0xF1 && b0 <= 0xF3:
		need = 4
	default:
		return 1, true
	}
	i := 1
	if i == len(p) {
		return 1, false
	}
	if p[i] < lo || p[i] > hi {
		return 1, true
	}
	i++
	for i < need && i < len(p) && p[i] >= 0x80 && p[i] <= 0xBF {
		i++
	}
	// i < need: either p ended (incomplete) or a bad byte followed.
	return i, i < len(p)
}
