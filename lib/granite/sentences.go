package granite

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// splitSentences approximates NLTK's English Punkt tokenizer (sent_tokenize), which granite-io
// uses to find the sentence a citation marker belongs to. Punkt's English model is trained
// statistics; this keeps its rules that matter for model answers:
//
//   - a candidate end is the last '.', '?' or '!' of a run of non-space characters that is
//     followed by whitespace and more text, or by one of ?!)";}]*:@'({[ ;
//   - '?' and '!' always end a sentence;
//   - a period does not end one after a known abbreviation ("e.g.", "Dr.", "U.S.", any word
//     with an inner period), after a single-letter initial, or after a number when the next
//     word starts in lower case or with ,;:.!?;
//   - closing quotes and brackets after the end move to the sentence they close;
//   - sentences start at their first non-space character.
//
// It differs from NLTK on rare abbreviations the trained model knows and this list does not.
func splitSentences(text string) []string {
	if text == "" {
		return nil
	}
	out := make([]string, 0, 8+len(text)/64)
	start := 0
	pos := 0
	ends := [3]int{-2, -2, -2}
	for pos < len(text) {
		// Runs of non-space characters without an end character never end a sentence: go to
		// the next end character, and take the run around it (from pos at the earliest).
		p := nextEnd(text, pos, &ends)
		if p < 0 {
			break
		}
		rs := p
		for rs > pos {
			c := text[rs-1]
			if c < utf8.RuneSelf {
				if asciiSpace[c] {
					break
				}
				rs--
				continue
			}
			r, n := utf8.DecodeLastRuneInString(text[pos:rs])
			if unicode.IsSpace(r) {
				break
			}
			rs -= n
		}
		re := p + 1
		for re < len(text) {
			if c := text[re]; c < utf8.RuneSelf {
				if asciiSpace[c] {
					break
				}
				re++
				continue
			}
			sp, n := spaceAt(text, re)
			if sp {
				break
			}
			re += n
		}
		// The rightmost end character in the run whose follower qualifies.
		end := -1
		for j := re - 1; j >= rs; j-- {
			c := text[j]
			if c != '.' && c != '?' && c != '!' {
				continue
			}
			if j+1 < re && nonWord[text[j+1]] {
				end = j
				break
			}
			if j+1 == re && hasTextAfter(text, re) {
				end = j
				break
			}
		}
		if end < 0 {
			pos = re
			continue
		}
		next := end + 1
		if next == re {
			next = skipSpace(text, re)
		}
		if isSentenceEnd(text[rs:end+1], text[next:]) {
			out = append(out, text[start:end+1])
			start = next
		}
		pos = end + 1
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return realign(out)
}

// nextEnd is the index of the first '.', '?' or '!' at or after pos, or -1. ends caches each
// one's next index (-2: not looked for yet, -1: none left), so the text is searched once per
// character kind, with IndexByte.
func nextEnd(text string, pos int, ends *[3]int) int {
	p := -1
	for k, c := range [3]byte{'.', '?', '!'} {
		e := ends[k]
		if e == -2 || (e >= 0 && e < pos) {
			e = strings.IndexByte(text[pos:], c)
			if e >= 0 {
				e += pos
			}
			ends[k] = e
		}
		if e >= 0 && (p < 0 || e < p) {
			p = e
		}
	}
	return p
}

const punktNonWord = `?!)";}]*:@'({[`

// Byte sets of the splitter's ASCII classes, so its loops test a byte with one load.
var (
	asciiSpace = byteSet(" \t\n\v\f\r")
	nonWord    = byteSet(punktNonWord)
	wordTrim   = byteSet("(\"`{[:;&#*@)}]-,")
)

func byteSet(chars string) (t [256]bool) {
	for i := 0; i < len(chars); i++ {
		t[chars[i]] = true
	}
	return t
}

func hasTextAfter(text string, i int) bool {
	return skipSpace(text, i) < len(text)
}

func skipSpace(text string, i int) int {
	for i < len(text) {
		if c := text[i]; c < utf8.RuneSelf {
			if !asciiSpace[c] {
				break
			}
			i++
			continue
		}
		sp, n := spaceAt(text, i)
		if !sp {
			break
		}
		i += n
	}
	return i
}

// spaceAt says whether text[i:] starts with a space character, and that character's size.
func spaceAt(text string, i int) (bool, int) {
	if c := text[i]; c < utf8.RuneSelf {
		return c == ' ' || (c >= '\t' && c <= '\r'), 1
	}
	r, n := utf8.DecodeRuneInString(text[i:])
	return unicode.IsSpace(r), n
}

// isSentenceEnd decides whether tok (ending in . ? or !) ends a sentence, given what follows.
func isSentenceEnd(tok, rest string) bool {
	last := tok[len(tok)-1]
	if last != '.' {
		return true
	}
	// The word is what follows the last punctuation that splits Punkt's words.
	word := tok[:len(tok)-1]
	for i := len(word) - 1; i >= 0; i-- { // strings.LastIndexAny(word, punktNonWord)
		if nonWord[word[i]] {
			word = word[i+1:]
			break
		}
	}
	for len(word) > 0 && wordTrim[word[0]] {
		word = word[1:]
	}
	if strings.HasSuffix(word, ".") || word == "" {
		return startsUpper(rest) // an ellipsis: only before a capitalised word
	}
	lw := strings.ToLower(word)
	if isAbbrev(lw) {
		return false
	}
	if k := strings.LastIndexByte(lw, '-'); k >= 0 && isAbbrev(lw[k+1:]) {
		return false
	}
	if strings.Contains(lw, ".") && isLettersAndDots(lw) {
		return false
	}
	if r, n := utf8.DecodeRuneInString(word); n == len(word) && unicode.IsLetter(r) {
		return false // an initial
	}
	if isPunktNumber(word) {
		return !nextNotStarter(rest)
	}
	return true
}

func startsUpper(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.IsUpper(r)
}

// nextNotStarter is Punkt's orthographic test answering "certainly not a sentence start".
func nextNotStarter(rest string) bool {
	if rest == "" {
		return false
	}
	if strings.IndexByte(";:,.!?", rest[0]) >= 0 {
		return true
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return unicode.IsLower(r)
}

func isLettersAndDots(s string) bool {
	for _, r := range s {
		if r != '.' && !unicode.IsLetter(r) {
			return false
		}
	}
	return true
}

// isPunktNumber matches Punkt's number type: -?[.,]?\d[\d,.-]*\.?
func isPunktNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s != "" && (s[0] == '.' || s[0] == ',') {
		s = s[1:]
	}
	if s == "" || s[0] < '0' || s[0] > '9' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && c != ',' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// realign moves closing quotes and brackets that open a sentence onto the one before.
func realign(sents []string) []string {
	for i := 1; i < len(sents); i++ {
		s := sents[i]
		j := 0
		for j < len(s) && strings.IndexByte(`"')]}`, s[j]) >= 0 {
			j++
		}
		if j == 0 {
			continue
		}
		k := skipSpace(s, j)
		if k == j && k < len(s) && !strings.HasPrefix(s[k:], "--") {
			continue
		}
		sents[i-1] += s[:j]
		sents[i] = s[k:]
	}
	out := sents[:0]
	for _, s := range sents {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// isAbbrev says whether w is in punktAbbrevs; most words are longer than any abbreviation and
// skip the map.
func isAbbrev(w string) bool {
	return len(w) <= maxAbbrev && punktAbbrevs[w]
}

// maxAbbrev is the length of punktAbbrevs' longest key.
var maxAbbrev = func() (n int) {
	for k := range punktAbbrevs {
		n = max(n, len(k))
	}
	return n
}()

// Common English abbreviations from Punkt's trained list.
var punktAbbrevs = map[string]bool{
	"mr": true, "mrs": true, "ms": true, "dr": true, "prof": true, "sr": true, "jr": true,
	"st": true, "vs": true, "etc": true, "inc": true, "ltd": true, "co": true, "corp": true,
	"no": true, "vol": true, "fig": true, "gen": true, "gov": true, "sen": true, "rep": true,
	"rev": true, "lt": true, "col": true, "capt": true, "sgt": true, "mt": true, "ft": true,
	"jan": true, "feb": true, "mar": true, "apr": true, "jun": true, "jul": true, "aug": true,
	"sep": true, "sept": true, "oct": true, "nov": true, "dec": true, "approx": true,
	"dept": true, "est": true, "u.s": true, "e.g": true, "i.e": true, "a.m": true, "p.m": true,
}
