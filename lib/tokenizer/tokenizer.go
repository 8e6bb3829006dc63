package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is a BPE tokenizer (byte-level, or SentencePiece-style: metaspace.go) loaded from a
// tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	// texts holds what each token stands for, as bytes (tokBytes[id] while loading, packed
	// when loaded: strtable.go); known[id] whether id is a token.
	tokBytes []string
	texts    tokenTexts
	known    []bool
	// special[id]: an added token marked special (skipped by Decode when asked).
	special []bool
	// pieces maps the bytes of every byte-level vocabulary token to its id (pieceID while
	// loading, packed when loaded).
	pieceID map[string]int32
	pieces  *strTable
	// short holds the whole tokens of up to shortMax bytes, for a quicker lookup (nil: none).
	short *shortVocab
	// whole[id]: the BPE of the token's own bytes is the token itself, so a piece equal to a
	// vocabulary token needs no merging (not computed with ignore_merges: then any is looked up).
	whole []bool
	// byteID[b] is the token of the single byte b (-1: none).
	byteID [256]int32
	unkID  int32
	// merges maps a pair of token ids to the rank of their merge, and the rank to the result.
	merges pairTable
	// bytePairs[a<<8|b] is the rank of merging the tokens of bytes a and b (nil unless every
	// byte has a token): the first lookups of every piece, from a table that stays in cache.
	bytePairs    []uint32
	ignoreMerges bool

	added   []addedToken
	addedID map[string]int32
	// first[b]: some added token starts with byte b.
	first [256]bool
	// onlyFirst is the byte every added token starts with, when they share one (-1: not so), so
	// that the scan for them can jump from one such byte to the next.
	onlyFirst int
	trie      []trieNode
	norm      normalizer
	pre       []preStep
	preEnd    int   // pre[preEnd:] neither split nor prefix a space
	prefix    []int // post-processor tokens before and after the sequence
	suffix    []int
	cfg       Config
	scratch   sync.Pool
	cache     *pieceCache
	// spm is set for SentencePiece-style BPE (metaspace.go), nil for byte-level BPE.
	spm *sentencePiece
}

type addedToken struct {
	content                    string
	id                         int32
	special                    bool
	lstrip, rstrip, singleWord bool
}

// Options says how Encode treats its text.
type Options struct {
	// ParseSpecial: text that spells an added token (special ones such as <|im_start|> and
	// others such as Qwen's <think>) becomes that token, as Hugging Face's tokenizers and vLLM
	// do by default. Leave it false for text from users or tools, which is then plain text,
	// encoded byte by byte, so that it cannot forge a role boundary; set it for text a chat
	// template wrote.
	ParseSpecial bool
	// AddSpecialTokens: the post-processor's tokens around the text (Llama 3's
	// <|begin_of_text|>; none for Qwen).
	AddSpecialTokens bool
	// Plain, with ParseSpecial, lists byte ranges [start, end) of the text, sorted and not
	// overlapping, where added tokens are not recognised: a chat template's render with the
	// request's text marked, encoded in one pass, so the BPE sees the same text it would in the
	// whole render while a user's "<|im_end|>" stays plain text. A match that overlaps a range is
	// no match.
	Plain [][2]int
}

// MaxPieceBytes bounds the pre-tokenizer pieces that the BPE merges as a whole. A longer piece
// (a run of one character class: 40 KB of letters without a space, or of punctuation) is merged
// in chunks of at most this many bytes, cut at character boundaries, so that the work and
// memory of the BPE stay linear in the text, and the scratch memory of one encode under 1 MB.
// Within the bound ids are exactly Hugging Face's; beyond it they may differ from Hugging
// Face's at the cuts (tokenizers merges the whole run).
const MaxPieceBytes = 16 << 10

// Config returns what tokenizer_config.json and generation_config.json said.
func (t *Tokenizer) Config() Config { return t.cfg }

// VocabSize is one more than the largest token id.
func (t *Tokenizer) VocabSize() int { return len(t.known) }

// TokenID returns the id of an added token (by its content, such as "<|im_end|>") or of a
// vocabulary token, spelt as in tokenizer.json's vocabulary (byte-level: "Ġhello" for " hello").
func (t *Tokenizer) TokenID(s string) (int, bool) {
	if id, ok := t.addedID[s]; ok {
		return int(id), true
	}
	if t.spm != nil {
		id, ok := t.pieces.get(s) // keyed by the vocabulary's spelling
		return int(id), ok
	}
	if b, ok := byteLevelDecode(s); ok {
		if id, ok := t.pieces.get(b); ok {
			return int(id), true
		}
	}
	return 0, false
}

// AddedTokens lists the contents of the added tokens (special ones such as "<|im_end|>" and
// others such as Qwen's "<think>"): the text a chat template's render may hold as tokens.
func (t *Tokenizer) AddedTokens() []string {
	out := make([]string, len(t.added))
	for i, a := range t.added {
		out[i] = a.content
	}
	return out
}

// TokenString is the token's spelling as tokenizer.json's vocabulary writes it (byte-level:
// "Ġhello" for " hello"; an added token's content as is), as Hugging Face's
// convert_ids_to_tokens gives it; "" for an id that is not a token.
func (t *Tokenizer) TokenString(id int) string {
	if id < 0 || id >= len(t.known) || !t.known[id] {
		return ""
	}
	for _, a := range t.added {
		if int(a.id) == id {
			return a.content
		}
	}
	if t.spm != nil {
		return t.spm.spelling[id]
	}
	var b strings.Builder
	tb := t.texts.get(id)
	for i := 0; i < len(tb); i++ {
		b.WriteString(byteLevelAlphabet[tb[i]])
	}
	return b.String()
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.special) && t.special[id]
}

// Encode returns the ids of text. Text that is not valid UTF-8 is encoded byte by byte where it
// is invalid (each such byte is a character of its own for the pre-tokenizer), so Decode gives
// the same bytes back.
func (t *Tokenizer) Encode(text string, opts Options) []int {
	extra := len(t.prefix) + len(t.suffix)
	if len(text) <= 64<<10 {
		return t.AppendEncode(make([]int, 0, len(text)/3+extra+1), text, opts)
	}
	// A long text: collect the ids in blocks and copy them once into a slice of the right size,
	// rather than growing one slice by copies (five times the ids' size for 10 MB of NULs).
	var blocks [][]int
	cur := make([]int, 0, 1<<16)
	n := t.each(text, opts, func(ids []int) {
		for len(ids) > 0 {
			if len(cur) == cap(cur) {
				blocks = append(blocks, cur)
				cur = make([]int, 0, 1<<16)
			}
			k := copy(cur[len(cur):cap(cur)], ids)
			cur, ids = cur[:len(cur)+k], ids[k:]
		}
	})
	out := make([]int, 0, n)
	for _, b := range blocks {
		out = append(out, b...)
	}
	return append(out, cur...)
}

// AppendEncode appends the ids of text to dst.
func (t *Tokenizer) AppendEncode(dst []int, text string, opts Options) []int {
	t.each(text, opts, func(ids []int) { dst = append(dst, ids...) })
	return dst
}

// MaxTokens is an upper bound of Count(text, opts) found without encoding (a scan for non-ASCII
// bytes at most), or -1 where this package knows no cheap bound (SentencePiece-style BPE). In a
// byte-level BPE every token stands for at least one byte of the normalized text: an added token
// for its own bytes, a vocabulary token for the bytes it merged. Normalization changes no ASCII
// text and grows other text by at most a factor (Unicode's bounds for UTF-8, UAX #15: NFC and
// NFD 3, the compatibility forms 11; 4 and 18 are taken here), and a pre-tokenizer that prefixes
// a space adds at most one byte per section (a section ends at an added token, itself a byte or
// more and one token).
//
// A check that needs no exact count (does this prompt fit the context?) can skip the encoding
// when the bound is already small enough.
func (t *Tokenizer) MaxTokens(text string, opts Options) int {
	if t.spm != nil {
		return -1
	}
	n := len(text)
	if t.norm != normNone && !isASCII(text) {
		switch t.norm {
		case normNFC:
			n *= 3
		case normNFD:
			n *= 4
		default:
			n *= 18
		}
	}
	if slices.ContainsFunc(t.pre, func(p preStep) bool { return p.prefixSpace }) {
		n = 2*n + 1
	}
	if opts.AddSpecialTokens {
		n += len(t.prefix) + len(t.suffix)
	}
	return n
}

// isASCII reports whether s has no byte above 0x7F, eight bytes at a time.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if !ascii8(s[i:]) {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// ascii8 reports whether the first eight bytes of s (it has eight) are ASCII.
func ascii8(s string) bool { return load8(s)&0x8080808080808080 == 0 }

// load8 is the first eight bytes of s (it has eight) as a little-endian word: the compiler
// makes one load of them.
func load8(s string) uint64 {
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// Count returns len(Encode(text, opts)) without keeping the ids.
func (t *Tokenizer) Count(text string, opts Options) int {
	return t.each(text, opts, func([]int) {})
}

// each gives emit the ids of text in batches and returns how many there were.
func (t *Tokenizer) each(text string, opts Options, emit func([]int)) int {
	n := 0
	out := func(ids []int) {
		n += len(ids)
		emit(ids)
	}
	if opts.AddSpecialTokens && len(t.prefix) > 0 {
		out(t.prefix)
	}
	sc := t.getScratch()
	first := true // nothing before this section (Metaspace's prepend_scheme "first")
	t.eachSection(text, opts.ParseSpecial, opts.Plain, func(section string, id int32) {
		atStart := first
		first = false
		if id >= 0 {
			sc.one[0] = int(id)
			out(sc.one[:])
			return
		}
		if t.spm != nil {
			section = t.spm.normalize(section, atStart)
		}
		t.encodeSection(section, sc, out)
	})
	t.putScratch(sc)
	if opts.AddSpecialTokens && len(t.suffix) > 0 {
		out(t.suffix)
	}
	return n
}

// eachSection splits text at added tokens (when parseSpecial) and calls f with each added
// token's id, or with a stretch of text between them and id -1.
func (t *Tokenizer) eachSection(text string, parseSpecial bool, plain [][2]int, f func(section string, id int32)) {
	if !parseSpecial || len(t.added) == 0 {
		if text != "" {
			f(text, -1)
		}
		return
	}
	start, i := 0, 0 // the text before i from start on is not an added token
	for i < len(text) {
		for len(plain) > 0 && plain[0][1] <= i {
			plain = plain[1:]
		}
		if len(plain) > 0 && plain[0][0] <= i {
			i = plain[0][1] // inside a plain range: no added token starts here
			continue
		}
		if !t.first[text[i]] {
			if t.onlyFirst < 0 {
				i++
				continue
			}
			j := strings.IndexByte(text[i+1:], byte(t.onlyFirst))
			if j < 0 {
				break
			}
			i += 1 + j
			continue
		}
		a, n := t.matchAdded(text, i)
		if a == nil || len(plain) > 0 && i+n > plain[0][0] {
			i++
			continue
		}
		end := i + n
		before := text[start:i]
		if a.lstrip {
			before = strings.TrimRightFunc(before, unicode.IsSpace)
		}
		if before != "" {
			f(before, -1)
		}
		f("", a.id)
		if a.rstrip {
			end += len(text[end:]) - len(strings.TrimLeftFunc(text[end:], unicode.IsSpace))
		}
		start, i = end, end
	}
	if start < len(text) {
		f(text[start:], -1)
	}
}

// trieNode is a node of the added tokens' byte trie (keys[i] leads to kids[i]).
type trieNode struct {
	keys  []byte
	kids  []int32
	token int32 // index into added, -1 if no token ends here
}

func (t *Tokenizer) buildAddedMatcher() {
	t.trie = []trieNode{{token: -1}}
	t.onlyFirst = -1
	mixed := false
	for ai, a := range t.added {
		n := 0
		for k := 0; k < len(a.content); k++ {
			c := a.content[k]
			child := int32(-1)
			for j, key := range t.trie[n].keys {
				if key == c {
					child = t.trie[n].kids[j]
				}
			}
			if child < 0 {
				child = int32(len(t.trie))
				t.trie = append(t.trie, trieNode{token: -1})
				t.trie[n].keys = append(t.trie[n].keys, c)
				t.trie[n].kids = append(t.trie[n].kids, child)
			}
			n = int(child)
		}
		t.trie[n].token = int32(ai)
		t.first[a.content[0]] = true
		if c := int(a.content[0]); ai == 0 {
			t.onlyFirst = c
		} else if c != t.onlyFirst {
			mixed = true
		}
	}
	if mixed {
		t.onlyFirst = -1
	}
}

// matchAdded returns the longest added token at text[i:] (leftmost-longest, as Hugging Face's
// Aho-Corasick matcher), or nil.
func (t *Tokenizer) matchAdded(text string, i int) (*addedToken, int) {
	n, best, bestLen := 0, int32(-1), 0
	for j := i; j < len(text); j++ {
		c := text[j]
		child := int32(-1)
		node := &t.trie[n]
		for k, key := range node.keys {
			if key == c {
				child = node.kids[k]
				break
			}
		}
		if child < 0 {
			break
		}
		n = int(child)
		if tok := t.trie[n].token; tok >= 0 {
			a := &t.added[tok]
			if !a.singleWord || t.wordBoundary(text, i, j+1) {
				best, bestLen = tok, j+1-i
			}
		}
	}
	if best < 0 {
		return nil, 0
	}
	return &t.added[best], bestLen
}

// wordBoundary: the match text[i:j] is not inside a word (for single_word added tokens).
func (t *Tokenizer) wordBoundary(text string, i, j int) bool {
	isWord := func(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }
	if i > 0 {
		if r, _ := utf8.DecodeLastRuneInString(text[:i]); isWord(r) {
			return false
		}
	}
	if j < len(text) {
		if r, _ := utf8.DecodeRuneInString(text[j:]); isWord(r) {
			return false
		}
	}
	return true
}

// ---- normalization and pre-tokenization ---------------------------------------------------------

type normalizer uint8

const (
	normNone normalizer = iota
	normNFC
	normNFD
	normNFKC
	normNFKD
)

func (n normalizer) apply(s string, tmp *[]byte) string {
	switch n {
	case normNFC:
		return nfc(s, tmp)
	case normNFD:
		return norm.NFD.String(s)
	case normNFKC:
		return norm.NFKC.String(s)
	case normNFKD:
		return norm.NFKD.String(s)
	}
	return s
}

// encodeSection normalizes, pre-tokenizes and BPE-encodes a stretch of text between added tokens,
// giving emit the ids in bounded batches.
func (t *Tokenizer) encodeSection(s string, sc *scratch, emit func([]int)) {
	s = t.norm.apply(s, &sc.norm)
	ids := sc.ids[:0]
	t.pretokenize(s, 0, func(piece string) {
		for len(piece) > MaxPieceBytes {
			cut := MaxPieceBytes
			for cut > 0 && !utf8.RuneStart(piece[cut]) {
				cut--
			}
			if cut == 0 {
				cut = MaxPieceBytes
			}
			ids = t.bpe(ids, piece[:cut], sc)
			piece = piece[cut:]
			if len(ids) >= 4096 {
				emit(ids)
				ids = ids[:0]
			}
		}
		ids = t.bpe(ids, piece, sc)
		if len(ids) >= 4096 {
			emit(ids)
			ids = ids[:0]
		}
	})
	if len(ids) > 0 {
		emit(ids)
	}
	sc.ids = ids[:0]
}

// pretokenize applies the pre-tokenizer steps from step on to s, calling f with each piece.
// Steps after the last that splits or prefixes a space (Qwen's ByteLevel after its Split) do
// nothing here and are not visited.
func (t *Tokenizer) pretokenize(s string, step int, f func(string)) {
	if step >= t.preEnd {
		if s != "" {
			f(s)
		}
		return
	}
	p := &t.pre[step]
	if p.prefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if p.split == nil {
		t.pretokenize(s, step+1, f)
		return
	}
	last := step+1 >= t.preEnd
	for i := 0; i < len(s); {
		j := p.split(s, i)
		if last {
			f(s[i:j])
		} else {
			t.pretokenize(s[i:j], step+1, f)
		}
		i = j
	}
}

// ---- the BPE ----------------------------------------------------------------------------------

const noRank = ^uint32(0)

// scratch holds the buffers of one Encode call.
type scratch struct {
	one   [1]int
	ids   []int
	norm  []byte
	syms  []int32
	ranks []uint32
	// for long pieces
	prev, nextI []int32
	heap        []heapItem
}

// heapItem is a candidate merge, rank<<32 | position: ordered by rank, then position.
type heapItem uint64

func (h heapItem) rank() uint32 { return uint32(h >> 32) }
func (h heapItem) pos() int32   { return int32(uint32(h)) }

func item(rank uint32, pos int32) heapItem { return heapItem(uint64(rank)<<32 | uint64(uint32(pos))) }

func (t *Tokenizer) getScratch() *scratch {
	if sc, ok := t.scratch.Get().(*scratch); ok {
		return sc
	}
	return &scratch{}
}

// putScratch returns sc to the pool, less any buffer that a long input grew beyond what
// ordinary inputs need, so that one 10 MB prompt does not pin its buffers.
func (t *Tokenizer) putScratch(sc *scratch) {
	const keep = 64 << 10
	if cap(sc.norm) > keep {
		sc.norm = nil
	}
	if cap(sc.ids) > keep {
		sc.ids = nil
	}
	t.scratch.Put(sc)
}

// rank returns the rank of merging a and b, noRank if they do not merge.
func (t *Tokenizer) rank(a, b int32) uint32 { return t.merges.get(a, b) }

// bpe appends the ids of one piece.
func (t *Tokenizer) bpe(dst []int, piece string, sc *scratch) []int {
	if len(piece) == 1 {
		if id := t.byteID[piece[0]]; id >= 0 {
			return append(dst, int(id))
		}
	}
	if len(piece) <= shortMax && t.short != nil {
		if id, ok := t.short.get(piece); ok {
			return append(dst, int(id))
		}
		// Not a whole token: short holds them all.
	} else if id, ok := t.pieces.get(piece); ok && (t.ignoreMerges || t.whole[id]) {
		return append(dst, int(id))
	}
	var h uint64
	if len(piece) <= cacheMaxPiece {
		var ids []int32
		if ids, h = t.cache.get(piece); ids != nil {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	syms := t.merge(piece, sc)
	if len(piece) <= cacheMaxPiece {
		t.cache.put(h, piece, syms)
	}
	for _, id := range syms {
		dst = append(dst, int(id))
	}
	return dst
}

// merge runs the BPE merges over the bytes of piece and returns the resulting ids (in scratch
// memory). It merges the pair of lowest rank first, the leftmost among equals, as Hugging Face's
// tokenizers do.
func (t *Tokenizer) merge(piece string, sc *scratch) []int32 {
	if t.spm != nil {
		return t.mergeChars(piece, sc)
	}
	syms := sc.syms[:0]
	for i := 0; i < len(piece); i++ {
		if id := t.byteID[piece[i]]; id >= 0 {
			syms = append(syms, id)
		} else if t.unkID >= 0 {
			syms = append(syms, t.unkID)
		}
	}
	sc.syms = syms
	if len(syms) < 2 {
		return syms
	}
	// ranks[i] is the rank of merging syms[i] and syms[i+1]; ranks[len-1] is noRank.
	ranks := growU(sc.ranks, len(syms))
	if t.bytePairs != nil && len(syms) == len(piece) {
		for i := 0; i+1 < len(piece); i++ {
			ranks[i] = t.bytePairs[int(piece[i])<<8|int(piece[i+1])]
		}
	} else {
		for i := 0; i+1 < len(syms); i++ {
			ranks[i] = t.rank(syms[i], syms[i+1])
		}
	}
	ranks[len(ranks)-1] = noRank
	sc.ranks = ranks
	if len(syms) > 48 {
		return t.mergeLong(syms, ranks, sc)
	}
	// Short pieces: a scan for the lowest rank is faster than a heap.
	ranks = ranks[:len(ranks)-1]
	for len(syms) > 1 {
		best, at := noRank, -1
		for i, r := range ranks {
			if r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		syms[at] = t.merges.into[best]
		syms = append(syms[:at+1], syms[at+2:]...)
		ranks = append(ranks[:at], ranks[at+1:]...)
		if at > 0 {
			ranks[at-1] = t.rank(syms[at-1], syms[at])
		}
		if at+1 < len(syms) {
			ranks[at] = t.rank(syms[at], syms[at+1])
		}
	}
	return syms
}

// mergeLong is merge for long pieces: a linked list of symbols and a min-heap of candidate
// merges by (rank, position), O(n log n).
func (t *Tokenizer) mergeLong(syms []int32, ranks []uint32, sc *scratch) []int32 {
	n := len(syms)
	prev, nxt := grow(sc.prev, n), grow(sc.nextI, n)
	h := sc.heap[:0]
	for i := range n {
		prev[i], nxt[i] = int32(i-1), int32(i+1)
		if ranks[i] != noRank {
			h = append(h, item(ranks[i], int32(i)))
		}
	}
	nxt[n-1] = -1
	heapInit(h)
	for len(h) > 0 {
		top := h[0]
		h = heapPop(h)
		i := top.pos()
		if syms[i] < 0 || ranks[i] != top.rank() {
			continue // stale
		}
		j := nxt[i]
		syms[i] = t.merges.into[top.rank()]
		syms[j] = -1 // deleted
		nxt[i] = nxt[j]
		if k := nxt[j]; k >= 0 {
			prev[k] = i
		}
		ranks[j] = noRank
		// The pair (i, next) and (prev, i) are new.
		ranks[i] = noRank
		if k := nxt[i]; k >= 0 {
			ranks[i] = t.rank(syms[i], syms[k])
			if ranks[i] != noRank {
				h = heapPush(h, item(ranks[i], i))
			}
		}
		if p := prev[i]; p >= 0 {
			ranks[p] = t.rank(syms[p], syms[i])
			if ranks[p] != noRank {
				h = heapPush(h, item(ranks[p], p))
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = nxt[i] {
		out = append(out, syms[i])
	}
	sc.prev, sc.nextI, sc.heap = prev, nxt, h
	return out
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func growU(s []uint32, n int) []uint32 {
	if cap(s) < n {
		return make([]uint32, n)
	}
	return s[:n]
}

func heapInit(h []heapItem) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		heapDown(h, i)
	}
}

func heapDown(h []heapItem, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r] < h[l] {
			m = r
		}
		if h[m] >= h[i] {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func heapPush(h []heapItem, x heapItem) []heapItem {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[i] >= h[p] {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []heapItem) []heapItem {
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	heapDown(h, 0)
	return h
}

// computeWholeTokens marks the vocabulary tokens whose BPE is themselves, so that a piece equal
// to one is looked up instead of merged (the common case for words).
func (t *Tokenizer) computeWholeTokens() {
	t.bytePairs = make([]uint32, 1<<16)
	for a := range 256 {
		for b := range 256 {
			if t.byteID[a] < 0 || t.byteID[b] < 0 {
				t.bytePairs = nil
				break
			}
			t.bytePairs[a<<8|b] = t.rank(t.byteID[a], t.byteID[b])
		}
		if t.bytePairs == nil {
			break
		}
	}
	t.whole = make([]bool, len(t.known))
	defer t.buildShortVocab()
	if t.ignoreMerges {
		return
	}
	sc := &scratch{}
	for b, id := range t.pieces.all() {
		if len(b) == 1 {
			t.whole[id] = true
			continue
		}
		syms := t.merge(b, sc)
		t.whole[id] = len(syms) == 1 && syms[0] == id
	}
}

// buildShortVocab puts the whole tokens of up to shortMax bytes into t.short.
func (t *Tokenizer) buildShortVocab() {
	short := func(b string, id int32) bool { return len(b) <= shortMax && (t.ignoreMerges || t.whole[id]) }
	n := 0
	for b, id := range t.pieces.all() {
		if short(b, id) {
			n++
		}
	}
	t.short = newShortVocab(n, func(add func(string, int32)) {
		for b, id := range t.pieces.all() {
			if short(b, id) {
				add(b, id)
			}
		}
	})
}
