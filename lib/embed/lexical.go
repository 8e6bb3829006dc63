package embed

import (
	"context"
	"fmt"
	"math"
	"unicode"
	"unicode/utf8"
)

// LexicalVersion names the lexical feature set. Vectors made by another
// version or dimension are incomparable, so anything that stores vectors
// (the cache's Redis entries) keys them by Lexical.Name, which includes it.
// Bump it on any change to tokenising, features, weights or hashing.
const LexicalVersion = "lex1"

// DefaultLexicalDim is the dimension NewLexical uses for 0.
const DefaultLexicalDim = 512

// Feature weights (before L2 normalisation). Bigrams carry word order and
// short-range context (so "not safe" differs from "safe"); character
// trigrams make a typo or an inflection a partial rather than a total
// mismatch. See the package tests for the similarities they give.
const (
	wUnigram = 1.0
	wBigram  = 1.0
	wTrigram = 0.35
)

// Lexical is a feature-hashing embedder: lowercased Unicode words and their
// bigrams, plus character trigrams within words, each hashed (64-bit FNV-1a,
// then mixed) to a signed bucket, summed and L2-normalised. It catches
// near-duplicate wording (case, punctuation, spacing, a typo), not
// paraphrase: "how do I reset my password" and "I forgot my password, what
// now" share little. Vectors depend only on the text, the dimension and
// LexicalVersion, so they are the same in every process and replica.
//
// Words are runs of letters, digits and combining marks; apostrophes inside
// a word are dropped ("don't" = "dont"); each Han, Hiragana, Katakana or
// Hangul character is a word of its own, so unspaced scripts still get
// unigrams and bigrams. A text with no word gets the zero vector, which is
// similar to nothing.
type Lexical struct {
	dim int
}

// NewLexical returns a Lexical embedder of dimension dim (DefaultLexicalDim
// when dim <= 0).
func NewLexical(dim int) *Lexical {
	if dim <= 0 {
		dim = DefaultLexicalDim
	}
	return &Lexical{dim: dim}
}

// Name identifies the vector space, for cache keys: "lexical/lex1/512".
func (l *Lexical) Name() string { return fmt.Sprintf("lexical/%s/%d", LexicalVersion, l.dim) }

// Dim returns the vectors' length.
func (l *Lexical) Dim() int { return l.dim }

// Embed returns one vector per text. It fails only when ctx has ended.
func (l *Lexical) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	// One backing array for the whole batch: one allocation, not one per text.
	buf := make([]float32, len(texts)*l.dim)
	for i, t := range texts {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("lexical embed: %w", err)
		}
		v := buf[i*l.dim : (i+1)*l.dim : (i+1)*l.dim]
		l.embed(t, v)
		out[i] = v
	}
	return out, nil
}

// Feature kinds, hashed in first (words, bigrams) or set as the top bit
// (trigrams) so that features of different kinds land in unrelated buckets.
const (
	kindWord    = 'w'
	kindBigram  = 'b'
	kindTrigram = 1 // the top bit of a packed trigram; see trigram
)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
	// Boundary runes for trigrams; outside Unicode so no text collides.
	bow = 0x110000
	eow = 0x110001
)

func fnvRune(h uint64, r rune) uint64 {
	var b [4]byte
	if r > unicode.MaxRune { // a boundary marker: hash its value directly
		h = (h ^ uint64(r&0xff)) * fnvPrime
		return (h ^ uint64(r>>8&0xff)) * fnvPrime
	}
	n := utf8.EncodeRune(b[:], r)
	for _, c := range b[:n] {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

// trigram packs three runes (21 bits each, markers included) into one
// exact key; mix, a bijection, then spreads it.
func trigram(a, b, c rune) uint64 {
	return (uint64(a)<<42 | uint64(b)<<21 | uint64(c)) ^ kindTrigram<<63
}

// mix is a 64-bit finaliser (splitmix64's): FNV's low bits are weak, and
// the bucket and sign come from different bits of the mixed value.
func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// add puts weight w for feature hash h into v: the bucket from the high 32
// bits (multiply-shift, no modulo bias for any dim), the sign from bit 0.
func add(v []float32, h uint64, w float32) {
	h = mix(h)
	i := (h >> 32) * uint64(len(v)) >> 32
	if h&1 != 0 {
		w = -w
	}
	v[i] += w
}

// Isolating reports whether r forms a word on its own (scripts written
// without spaces between words: Han, Hiragana, Katakana, Hangul), as the
// lexical embedder splits text; the response cache's word check splits so too.
func Isolating(r rune) bool {
	return r >= 0x2E80 && (unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r))
}

func wordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r)
}

// embed writes the L2-normalised features of t into v (zeroed here).
func (l *Lexical) embed(t string, v []float32) {
	clear(v)
	var (
		word, prev uint64 // hashes of the current and previous word (0: none)
		in         bool   // inside a word
		r1, r2     rune   // the two runes before the current one, for trigrams
		n          int    // features added
	)
	endWord := func() {
		if !in {
			return
		}
		in = false
		// Trigram ending at the end-of-word marker.
		add(v, trigram(r1, r2, eow), wTrigram)
		add(v, word, wUnigram)
		if prev != 0 {
			add(v, fnvRune(prev^word*fnvPrime, kindBigram), wBigram)
		}
		prev = word
		n++
	}
	startWord := func() {
		in = true
		word = fnvRune(fnvOffset, kindWord)
		r1, r2 = 0, bow
	}
	push := func(r rune) {
		r = unicode.ToLower(r)
		word = fnvRune(word, r)
		if r1 != 0 {
			add(v, trigram(r1, r2, r), wTrigram)
		}
		r1, r2 = r2, r
	}
	for i, r := range t {
		switch {
		case Isolating(r):
			endWord()
			startWord()
			push(r)
			endWord()
		case wordRune(r):
			if !in {
				startWord()
			}
			push(r)
		case (r == '\'' || r == '\u2019') && in && i+utf8.RuneLen(r) < len(t):
			// An apostrophe between letters is dropped without ending the
			// word; elsewhere it is punctuation.
			next, _ := utf8.DecodeRuneInString(t[i+utf8.RuneLen(r):])
			if !wordRune(next) || Isolating(next) {
				endWord()
			}
		default:
			endWord()
		}
	}
	endWord()
	if n == 0 {
		return
	}
	var s float64
	for _, f := range v {
		s += float64(f) * float64(f)
	}
	if s == 0 {
		return
	}
	k := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= k
	}
}
