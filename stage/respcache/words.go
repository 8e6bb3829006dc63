package respcache

import (
	"strings"
	"unicode"

	"github.com/infergate/infergate/lib/embed"
)

// The word check of semantic hits with a lexical embedder.
//
// A lexical embedder's similarity counts the features two texts share, so in a long prompt one
// changed word is a small share of them: "highest" for "lowest", Italy for Spain, an inserted
// "not" score 0.93-0.97 at 25 words and up to 0.999 at 200, above any threshold that still lets
// a short question's rewording through. It also cannot see what it does not embed: "2+2" and "2-2" are
// the same words to it. So with any embedder but an embeddings model (ModelEmbedder), an entry
// keeps its prompt's words (wordsOf) and a semantic hit also needs sameWords: the same words in
// the same order up to case, punctuation and spacing, at any length.

// wordsOf returns the words of text as sameWords compares them, separated by single spaces:
//
//   - A word is a run of letters, digits and marks, lower-cased (ς as σ). A letter of a script
//     written without spaces (Han, Hiragana, Katakana, Hangul) is a word of its own, as the
//     lexical embedder has it. An apostrophe between letters is dropped ("don't" is "dont", as
//     the embedder has it; "do not" stays two words).
//   - Spacing does not count, nor do format characters (zero-width spaces and joiners, soft
//     hyphens, direction marks).
//   - Punctuation between words does not count: full stops, commas, colons, question and
//     exclamation marks, quotes, brackets and dashes, in any script ("why?" is "why ?", "「a」"
//     is "a", "well-known" is "well known"). Where it touches a number or a symbol it is part of
//     an expression and counts, as its own word: "3.5" is "3 . 5", not "35"; "5 - 3", "-5",
//     "2*(3+4)", "x != 1" keep their signs and brackets.
//   - Every other character (symbols such as + < = $ %, and # & * / @ \) counts, as its own
//     word, so that spacing around it does not.
//
// Text in other normalisation forms (a decomposed "é") has other words: a miss.
func wordsOf(text string) string {
	// The characters that count, each with its class, each run of spaces as one space: a
	// character's neighbours are then cs[i±1], and its nearest ones that are not spaces at most
	// two away. For a text of up to 1,024 bytes they need no allocation.
	var buf [1024]classed
	cs := buf[:0]
	if len(text) > len(buf) {
		cs = make([]classed, 0, len(text)) // no more characters than bytes
	}
	for _, r := range text {
		switch c := classOf(r); {
		case c == cIgnored:
		case c == cSpace:
			if len(cs) > 0 && cs[len(cs)-1].class() != cSpace {
				cs = append(cs, classed(cSpace)<<classShift)
			}
		default:
			cs = append(cs, classed(r)|classed(c)<<classShift)
		}
	}
	var b strings.Builder
	b.Grow(len(text))
	in := false // inside a word
	for i, x := range cs {
		c := x.class()
		switch {
		case c == cSpace:
			in = false
			continue
		case c == cLetter || c == cNumber:
			if in {
				writeFolded(&b, x.rune())
				continue
			}
			in = true
		case c == cApostrophe && at(cs, i-1) == cLetter && at(cs, i+1) == cLetter:
			continue // dropped inside a word, which goes on
		case c.soft() && !keepSoft(cs, i):
			in = false
			continue
		default: // a character that is a word of its own
			in = false
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		writeFolded(&b, x.rune())
	}
	return b.String()
}

// A class is what a character is to wordsOf.
type class uint8

const (
	cSign       class = iota // a symbol, or punctuation that is not soft: its own word, always
	cIgnored                 // a format character: as if absent
	cSpace                   // between words
	cLetter                  // a letter or a mark, in a word
	cIsolating               // a letter that is a word of its own
	cNumber                  // a digit or other number, in a word
	cApostrophe              // ' or ’: dropped between letters, else soft like a quote
	cDash                    // soft: a hyphen or dash
	cBracket                 // soft: an opening or closing bracket
	cStop                    // soft: any other punctuation between words (. , : ; ? ! quotes)
)

// soft reports whether the class is punctuation that separates words, unless it touches a
// number or a symbol (keepSoft).
func (c class) soft() bool { return c >= cApostrophe }

func (c class) letter() bool { return c == cLetter || c == cIsolating }

func (c class) word() bool { return c.letter() || c == cNumber }

// hard reports whether the class makes soft punctuation next to it count: a number or a sign.
func (c class) hard() bool { return c == cNumber || c == cSign }

// classed is a character (21 bits) with its class above it.
type classed int32

const classShift = 24

func (x classed) rune() rune   { return rune(x & (1<<classShift - 1)) }
func (x classed) class() class { return class(x >> classShift) }

// at is the class of cs[i]; a space outside cs.
func at(cs []classed, i int) class {
	if i < 0 || i >= len(cs) {
		return cSpace
	}
	return cs[i].class()
}

// asciiClass is classOf for ASCII, which most prompts are made of.
var asciiClass = func() (t [0x80]class) {
	for r := range rune(0x80) {
		t[r] = classOfUnicode(r)
	}
	return t
}()

func classOf(r rune) class {
	if r < 0x80 {
		return asciiClass[r]
	}
	return classOfUnicode(r)
}

func classOfUnicode(r rune) class {
	switch {
	case unicode.IsSpace(r):
		return cSpace
	case unicode.Is(unicode.Cf, r):
		return cIgnored
	case embed.Isolating(r):
		return cIsolating
	case unicode.IsLetter(r) || unicode.IsMark(r):
		return cLetter
	case unicode.IsNumber(r):
		return cNumber
	case r == '\'' || r == '\u2019':
		return cApostrophe
	case !unicode.IsPunct(r): // symbols (the minus sign among them), controls
		return cSign
	case unicode.Is(unicode.Pd, r):
		return cDash
	case unicode.In(r, unicode.Ps, unicode.Pe):
		return cBracket
	case unicode.In(r, unicode.Pi, unicode.Pf, unicode.Terminal_Punctuation, unicode.Quotation_Mark) ||
		r == '¡' || r == '¿' || r == '…':
		return cStop
	}
	return cSign // # % & * / @ \ and the like
}

// writeFolded writes r in lower case (ς as σ: the final sigma is σ at a word's end).
func writeFolded(b *strings.Builder, r rune) {
	if r < 0x80 {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		b.WriteByte(byte(r))
		return
	}
	if r = unicode.ToLower(r); r == 'ς' {
		r = 'σ'
	}
	b.WriteRune(r)
}

// keepSoft reports whether the soft punctuation cs[i] counts: when it belongs to an expression
// rather than to the sentence.
func keepSoft(cs []classed, i int) bool {
	prev, next := at(cs, i-1), at(cs, i+1)
	prevNear, nextNear := prev, next // the nearest that are not spaces
	if prev == cSpace {
		prevNear = at(cs, i-2)
	}
	if next == cSpace {
		nextNear = at(cs, i+2)
	}
	switch cs[i].class() {
	case cDash:
		if prev.letter() && next.letter() {
			return false // a hyphenated word: "well-known" is "well known"
		}
		// A minus: "5 - 3", "-5", "-x".
		return prevNear.hard() || nextNear.hard() || next.letter() && !prev.word()
	case cBracket:
		return prevNear.hard() || nextNear.hard() // "2*(3+4)", not "(see above)"
	default:
		// "3.5", "1,000", "1:30", ".5", "!=", but not "2+2?" nor "costs $5, or".
		return prevNear.hard() && nextNear.hard() || next.hard() && !prev.word() || next == cSign
	}
}

// sameWords reports whether a prompt whose words (wordsOf) are a may be answered with the
// answer to a prompt whose words are b: the same words, in the same order. No words are never
// the same.
//
// No typo is forgiven, however unlikely it looks. A slip of one letter is often another word,
// and nothing here can tell which: measured on the 73,445 words of Debian's wamerican
// 2020.12.07 list, even at 8 letters 0.3% of words become another by swapping two inner letters
// (complaint, compliant), 2.1% by doubling or undoubling one (scraping, scrapping), 22% by
// changing one (medication, meditation); in scripts written without spaces a whole sentence is
// one such "word". A typo costs a miss: the model answers, and the answer is stored for the
// next time the prompt comes as written.
func sameWords(a, b string) bool { return a == b && a != "" }
