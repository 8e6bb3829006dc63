package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// SentencePiece-style BPE: the tokenizer.json files that Hugging Face's converters write for
// models whose tokenizer SentencePiece trained with its BPE algorithm (Llama 2, Mistral 7B v0.1
// and v0.2, TinyLlama, CodeLlama). They differ from byte-level BPE in four places:
//
//   - The BPE runs over characters, not bytes. Spaces become "▁" (U+2581): in the older files by
//     the normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], applied to each stretch of text
//     between added tokens (so a stretch after <s> starts with "▁" too), with no pre-tokenizer;
//     in newer ones by the Metaspace pre-tokenizer, which prepends "▁" only to the first stretch
//     (prepend_scheme "first") and may split before each "▁".
//   - A character that is not a token becomes the tokens of its UTF-8 bytes, <0x00> to <0xFF>
//     (byte_fallback), else the unknown token (one for a run of such characters with fuse_unk).
//     That is in bytefallback.go.
//   - With no pre-tokenizer a whole stretch is one word for the BPE. It is cut before each "▁"
//     that follows a character no vocabulary token has right before a "▁" (found at Load; in
//     Mistral 7B's vocabulary only "▁" itself is): no merge can join across such a cut, so the
//     pieces' merges are the word's, while each piece is short enough for the piece cache and the
//     whole-token lookup.
//   - The decoder, Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)], turns "▁"
//     back into spaces and <0xXX> tokens into their bytes, and removes the space the normalizer
//     put at the very start of the text.

// sentencePiece is what a SentencePiece-style file says beyond the vocabulary and the merges.
type sentencePiece struct {
	// prepend is the Prepend normalizer's text (with a Replace normalizer after it applied),
	// added before each non-empty stretch between added tokens; "" when there is none.
	prepend string
	// from and to are the Replace normalizer: every from becomes to ("" from: none).
	from, to string

	// meta: a Metaspace pre-tokenizer, which turns spaces into rep and prepends rep as scheme
	// says, and with split cuts the text before each rep.
	meta   bool
	rep    string
	scheme prependScheme
	split  bool

	// cut is the character before which a word may be cut into pieces ("" never); joins holds
	// the characters that some vocabulary token has right before cut, where it may not be cut
	// (unless split, which cuts before every rep as the pre-tokenizer does).
	cut   string
	joins map[rune]bool

	// charID maps each character of more than one byte that is a token to its id (ASCII ones
	// are in Tokenizer.byteID); byteTok[b] is the id of <0xBB> (-1: none).
	charID       map[rune]int32
	byteTok      [256]int32
	allBytes     bool // every byteTok is a token
	byteFallback bool
	fuseUnk      bool

	// strip is the decoder's Strip content: up to stripN of it are removed from the start of the
	// text.
	strip  string
	stripN int

	// spelling[id] is the vocabulary token as tokenizer.json writes it ("▁hello", "<0x0A>").
	spelling []string
}

// maxReplaceGrowth bounds how much a Replace (normalizer or decoder) may lengthen what it
// replaces, and maxPrepend the Prepend normalizer's text, so that a hostile file cannot make the
// decoded vocabulary, or a normalized prompt, many times larger than the file or the prompt (real
// files replace " " by "▁", three bytes, and back).
const (
	maxReplaceGrowth = 4
	maxPrepend       = 16
)

type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// sentencePieceStyle reports whether a file is to be read as SentencePiece-style BPE: its
// pre_tokenizer has no ByteLevel step (SentencePiece's is none or Metaspace; others are refused
// by parsePreTokenizer).
func sentencePieceStyle(raw json.RawMessage) bool {
	if isNull(raw) {
		return true
	}
	var p componentJSON
	if json.Unmarshal(raw, &p) != nil {
		return false // the byte-level path reports the error
	}
	switch p.Type {
	case "ByteLevel":
		return false
	case "Sequence":
		for _, r := range p.PreTokenizers {
			if !sentencePieceStyle(r) {
				return false
			}
		}
	}
	return true
}

// buildSentencePiece reads the normalizer, pre-tokenizer and decoder of a SentencePiece-style
// file, and replaces what buildModel derived from the vocabulary for byte-level BPE (the tokens'
// bytes, pieceID, byteID) with what characters and <0xXX> tokens need.
func (t *Tokenizer) buildSentencePiece(f *fileJSON) error {
	m := t.spm
	if err := m.parsePreTokenizer(f.PreTokenizer); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	if err := m.parseNormalizer(f.Normalizer); err != nil {
		return fmt.Errorf("normalizer: %w", err)
	}
	var dec spmDecoder
	if err := dec.parse(f.Decoder); err != nil {
		return fmt.Errorf("decoder: %w", err)
	}
	m.strip, m.stripN = dec.strip, dec.stripN
	if m.prepend != "" || m.from != "" {
		// A normalized added token is matched in the normalized text, after the Prepend and
		// Replace, which this package's matcher (on the text as given) does not do.
		for i, a := range f.AddedTokens {
			if a.Normalized {
				return fmt.Errorf("added_tokens[%d] %q: normalized added tokens are not supported with a Prepend or Replace normalizer", i, a.Content)
			}
		}
	}

	m.byteFallback, m.fuseUnk = f.Model.ByteFallback, f.Model.FuseUnk
	m.spelling = make([]string, len(t.known))
	m.charID = make(map[rune]int32)
	t.pieceID = make(map[string]int32, len(f.Model.Vocab))
	for i := range t.byteID {
		t.byteID[i], m.byteTok[i] = -1, -1
	}
	for tok, id := range f.Model.Vocab {
		m.spelling[id] = tok
		t.pieceID[tok] = int32(id)
		t.tokBytes[id] = dec.token(tok)
		if r, w := utf8.DecodeRuneInString(tok); w == len(tok) && w > 0 && !(r == utf8.RuneError && w == 1) {
			if r < utf8.RuneSelf {
				t.byteID[r] = int32(id)
			} else {
				m.charID[r] = int32(id)
			}
		}
		// The encoder looks the bytes up as tokenizers spells them, <0x0A> (upper case).
		if b, ok := byteToken(tok); ok && tok == fmt.Sprintf("<0x%02X>", b) {
			m.byteTok[b] = int32(id)
		}
	}
	m.allBytes = true
	for _, id := range m.byteTok {
		m.allBytes = m.allBytes && id >= 0
	}
	for _, a := range f.AddedTokens {
		m.spelling[a.ID] = a.Content
		t.tokBytes[a.ID] = dec.token(a.Content)
	}
	m.setCut(f.Model.Vocab, f.Model.IgnoreMerges)
	t.pre = []preStep{{split: m.piece}}
	return nil
}

// parseNormalizer reads a Prepend normalizer, a Replace one with a String pattern, or a Sequence
// of them (Llama 2's: Prepend("▁") then Replace(" ", "▁")).
func (m *sentencePiece) parseNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Prepend     *string           `json:"prepend"`
		Pattern     *patternJSON      `json:"pattern"`
		Content     *string           `json:"content"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return err
	}
	switch n.Type {
	case "Sequence":
		for _, r := range n.Normalizers {
			if err := m.parseNormalizer(r); err != nil {
				return err
			}
		}
		return nil
	case "Prepend":
		if n.Prepend == nil || *n.Prepend == "" || m.prepend != "" || m.from != "" {
			return errors.New("Prepend: only one, with a text, before any Replace, is supported")
		}
		if len(*n.Prepend) > maxPrepend {
			return fmt.Errorf("Prepend: a text of more than %d bytes is not supported", maxPrepend)
		}
		m.prepend = *n.Prepend
		return nil
	case "Replace":
		if n.Pattern == nil || n.Pattern.String == nil || *n.Pattern.String == "" || n.Content == nil {
			return errors.New("Replace: only a non-empty String pattern with a content is supported")
		}
		if m.from != "" {
			return errors.New("Replace: only one is supported")
		}
		if len(*n.Content) > maxReplaceGrowth*len(*n.Pattern.String) {
			return fmt.Errorf("Replace: a content more than %d times as long as the pattern is not supported", maxReplaceGrowth)
		}
		m.from, m.to = *n.Pattern.String, *n.Content
		// The Prepend before it is replaced too, as the sequence applies one after the other.
		m.prepend = strings.ReplaceAll(m.prepend, m.from, m.to)
		return nil
	}
	return fmt.Errorf("type %q is not supported with SentencePiece-style BPE (Prepend, Replace and a Sequence of them are)", n.Type)
}

// parsePreTokenizer reads none or Metaspace (alone or as the one step of a Sequence), with the
// fields as the tokenizers library reads them: add_prefix_space false means prepend_scheme
// "never", prepend_scheme defaults to "always" and split to true.
func (m *sentencePiece) parsePreTokenizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var p struct {
		Type           string            `json:"type"`
		PreTokenizers  []json.RawMessage `json:"pretokenizers"`
		Replacement    string            `json:"replacement"`
		AddPrefixSpace *bool             `json:"add_prefix_space"`
		PrependScheme  *string           `json:"prepend_scheme"`
		Split          *bool             `json:"split"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	switch p.Type {
	case "Sequence":
		for _, r := range p.PreTokenizers {
			if err := m.parsePreTokenizer(r); err != nil {
				return err
			}
		}
		return nil
	case "Metaspace":
		if m.meta {
			return errors.New("Metaspace: only one is supported")
		}
		if utf8.RuneCountInString(p.Replacement) != 1 {
			return fmt.Errorf("Metaspace: replacement %q is not one character", p.Replacement)
		}
		m.meta, m.rep, m.scheme, m.split = true, p.Replacement, prependAlways, p.Split == nil || *p.Split
		if p.PrependScheme != nil {
			switch *p.PrependScheme {
			case "always":
			case "first":
				m.scheme = prependFirst
			case "never":
				m.scheme = prependNever
			default:
				return fmt.Errorf("Metaspace: prepend_scheme %q is not always, first or never", *p.PrependScheme)
			}
		}
		if p.AddPrefixSpace != nil && !*p.AddPrefixSpace {
			if m.scheme != prependNever && p.PrependScheme != nil {
				return errors.New("Metaspace: add_prefix_space false contradicts prepend_scheme")
			}
			m.scheme = prependNever
		}
		return nil
	}
	return fmt.Errorf("type %q is not supported: with no ByteLevel step, so not a byte-level BPE, only SentencePiece-style BPE's Metaspace (or none) is", p.Type)
}

// setCut chooses where a stretch may be cut into pieces: before every rep with Metaspace's
// split, else before the character spaces became where no vocabulary token joins it to the
// character before. With ignore_merges a whole word that is a token is one token, so a word is
// not cut at all; nor when that character is not a token (unknown characters could fuse across
// the cut).
func (m *sentencePiece) setCut(vocab map[string]int, ignoreMerges bool) {
	if m.meta && m.split {
		m.cut = m.rep
		return
	}
	c := m.to
	if m.meta {
		c = m.rep
	}
	if _, ok := vocab[c]; !ok || ignoreMerges || utf8.RuneCountInString(c) != 1 {
		return
	}
	m.cut, m.joins = c, make(map[rune]bool)
	for tok := range vocab {
		for i := strings.Index(tok, c); i >= 0; {
			if i > 0 {
				r, _ := utf8.DecodeLastRuneInString(tok[:i])
				m.joins[r] = true
			}
			j := strings.Index(tok[i+len(c):], c)
			if j < 0 {
				break
			}
			i += len(c) + j
		}
	}
}

// normalize applies the Prepend and Replace normalizers and Metaspace's replacement and prepend
// to one stretch of text between added tokens (never empty); first says that it starts the
// text.
func (m *sentencePiece) normalize(s string, first bool) string {
	if m.prepend != "" || m.from != "" {
		s = prependReplace(m.prepend, s, m.from, m.to)
	}
	if m.meta {
		pre := ""
		if (m.scheme == prependAlways || m.scheme == prependFirst && first) &&
			!strings.HasPrefix(s, " ") && !strings.HasPrefix(s, m.rep) {
			pre = m.rep
		}
		s = prependReplace(pre, s, " ", m.rep)
	}
	return s
}

// prependReplace returns pre + s with every from in s replaced by to, in one allocation (none
// when there is nothing to do).
func prependReplace(pre, s, from, to string) string {
	n := 0
	if from != "" {
		n = strings.Count(s, from)
	}
	if n == 0 && pre == "" {
		return s
	}
	var b strings.Builder
	b.Grow(len(pre) + len(s) + n*(len(to)-len(from)))
	b.WriteString(pre)
	for ; n > 0; n-- {
		i := strings.Index(s, from)
		b.WriteString(s[:i])
		b.WriteString(to)
		s = s[i+len(from):]
	}
	b.WriteString(s)
	return b.String()
}

// piece is the pre-tokenizer's split function: the end of the piece of s that starts at i, at
// the next cut.
func (m *sentencePiece) piece(s string, i int) int {
	if m.cut == "" {
		return len(s)
	}
	// A match of cut (valid UTF-8) cannot start inside a character, so stepping one byte is
	// enough to move past a cut at i.
	for j := i + 1; j < len(s); j += len(m.cut) {
		k := strings.Index(s[j:], m.cut)
		if k < 0 {
			break
		}
		j += k
		if m.split {
			return j
		}
		if r, _ := utf8.DecodeLastRuneInString(s[:j]); !m.joins[r] {
			return j
		}
	}
	return len(s)
}

// spmDecoder is a SentencePiece-style decoder: Replace steps on each token, then ByteFallback,
// Fuse, and a Strip of the fused text's start.
type spmDecoder struct {
	replace      [][2]string
	byteFallback bool
	fused        bool
	strip        string
	stripN       int
}

func (d *spmDecoder) parse(raw json.RawMessage) error {
	if isNull(raw) {
		return errors.New("none: a Sequence of Replace, ByteFallback, Fuse and Strip is required")
	}
	var p struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
		Pattern  *patternJSON      `json:"pattern"`
		Content  *string           `json:"content"`
		Start    int               `json:"start"`
		Stop     int               `json:"stop"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	// The order is Llama 2's, the one whose result Decode and the streaming decoder can give:
	// Replace acts on the tokens' text before ByteFallback turns <0xXX> into bytes, and Strip
	// on the whole text after Fuse.
	switch p.Type {
	case "Sequence":
		if len(p.Decoders) == 0 {
			return errors.New("an empty Sequence")
		}
		for _, r := range p.Decoders {
			if err := d.parse(r); err != nil {
				return err
			}
		}
		return nil
	case "Replace":
		if p.Pattern == nil || p.Pattern.String == nil || *p.Pattern.String == "" || p.Content == nil {
			return errors.New("Replace: only a non-empty String pattern with a content is supported")
		}
		if d.byteFallback || d.fused {
			return errors.New("Replace after ByteFallback or Fuse is not supported")
		}
		if len(*p.Content) > maxReplaceGrowth*len(*p.Pattern.String) || len(d.replace) >= 4 {
			return fmt.Errorf("Replace: more than 4, or a content more than %d times as long as the pattern, is not supported", maxReplaceGrowth)
		}
		d.replace = append(d.replace, [2]string{*p.Pattern.String, *p.Content})
		return nil
	case "ByteFallback":
		if d.fused {
			return errors.New("ByteFallback after Fuse is not supported")
		}
		d.byteFallback = true
		return nil
	case "Fuse":
		d.fused = true
		return nil
	case "Strip":
		if !d.fused || d.strip != "" {
			return errors.New("Strip: only one, after Fuse, is supported")
		}
		if p.Content == nil || utf8.RuneCountInString(*p.Content) != 1 || *p.Content == "\uFFFD" {
			return errors.New("Strip: content is not one character")
		}
		if p.Stop != 0 || p.Start < 0 {
			return fmt.Errorf("Strip: start %d, stop %d: only stripping the start is supported", p.Start, p.Stop)
		}
		d.strip, d.stripN = *p.Content, p.Start
		return nil
	}
	return fmt.Errorf("type %q is not supported with SentencePiece-style BPE (a Sequence of Replace, ByteFallback, Fuse and Strip is)", p.Type)
}

// token returns the bytes a token (as spelt in tokenizer.json) decodes to.
func (d *spmDecoder) token(tok string) string {
	for _, r := range d.replace {
		tok = strings.ReplaceAll(tok, r[0], r[1])
	}
	if d.byteFallback {
		if b, ok := byteToken(tok); ok {
			return string([]byte{b})
		}
	}
	return tok
}

// byteToken reads a byte-fallback token, <0xXX> with two hex digits of either case, as the
// ByteFallback decoder does.
func byteToken(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(tok[3])
	lo, ok2 := hexDigit(tok[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// trimStart removes the decoder's Strip from the start of a decoded text.
func (t *Tokenizer) trimStart(b []byte) []byte {
	if t.spm == nil {
		return b
	}
	for k := 0; k < t.spm.stripN && bytes.HasPrefix(b, []byte(t.spm.strip)); k++ {
		b = b[len(t.spm.strip):]
	}
	return b
}

// trim removes what is left of the decoder's Strip from the start of the stream's text: the
// Strip applies to the start of the whole text only, however it is cut into pieces.
func (d *StreamDecoder) trim(s string) string {
	for d.strip > 0 && s != "" {
		if !strings.HasPrefix(s, d.t.spm.strip) {
			d.strip = 0
			break
		}
		s = s[len(d.t.spm.strip):]
		d.strip--
	}
	return s
}
