package granite

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The sentence splitter as it was before its ASCII fast paths: the reference FuzzParse holds
// splitSentences to.

const punktNonWordRef = `?!)";}]*:@'({[`

func splitSentencesRef(text string) []string {
	var out []string
	start := 0
	pos := 0
	for pos < len(text) {
		// Find the next run of non-space characters.
		rs := skipSpaceRef(text, pos)
		re := rs
		for re < len(text) {
			sp, n := spaceAtRef(text, re)
			if sp {
				break
			}
			re += n
		}
		if rs >= len(text) {
			break
		}
		// The rightmost end character in the run whose follower qualifies.
		end := -1
		for j := re - 1; j >= rs; j-- {
			c := text[j]
			if c != '.' && c != '?' && c != '!' {
				continue
			}
			if j+1 < re && strings.IndexByte(punktNonWordRef, text[j+1]) >= 0 {
				end = j
				break
			}
			if j+1 == re && hasTextAfterRef(text, re) {
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
			next = skipSpaceRef(text, re)
		}
		if isSentenceEndRef(text[rs:end+1], text[next:]) {
			out = append(out, text[start:end+1])
			start = next
		}
		pos = end + 1
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return realignRef(out)
}

func hasTextAfterRef(text string, i int) bool {
	return skipSpaceRef(text, i) < len(text)
}

func skipSpaceRef(text string, i int) int {
	for i < len(text) {
		sp, n := spaceAtRef(text, i)
		if !sp {
			break
		}
		i += n
	}
	return i
}

// spaceAtRef says whether text[i:] starts with a space character, and that character's size.
func spaceAtRef(text string, i int) (bool, int) {
	if c := text[i]; c < utf8.RuneSelf {
		return c == ' ' || (c >= '\t' && c <= '\r'), 1
	}
	r, n := utf8.DecodeRuneInString(text[i:])
	return unicode.IsSpace(r), n
}

// isSentenceEndRef decides whether tok (ending in . ? or !) ends a sentence, given what follows.
func isSentenceEndRef(tok, rest string) bool {
	last := tok[len(tok)-1]
	if last != '.' {
		return true
	}
	// The word is what follows the last punctuation that splits Punkt's words.
	word := tok[:len(tok)-1]
	if i := strings.LastIndexAny(word, punktNonWordRef); i >= 0 {
		word = word[i+1:]
	}
	word = strings.TrimLeft(word, "(\"`{[:;&#*@)}]-,")
	if strings.HasSuffix(word, ".") || word == "" {
		return startsUpperRef(rest) // an ellipsis: only before a capitalised word
	}
	lw := strings.ToLower(word)
	if punktAbbrevs[lw] {
		return false
	}
	if k := strings.LastIndexByte(lw, '-'); k >= 0 && punktAbbrevs[lw[k+1:]] {
		return false
	}
	if strings.Contains(lw, ".") && isLettersAndDotsRef(lw) {
		return false
	}
	if r, n := utf8.DecodeRuneInString(word); n == len(word) && unicode.IsLetter(r) {
		return false // an initial
	}
	if isPunktNumberRef(word) {
		return !nextNotStarterRef(rest)
	}
	return true
}

func startsUpperRef(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.IsUpper(r)
}

// nextNotStarterRef is Punkt's orthographic test answering "certainly not a sentence start".
func nextNotStarterRef(rest string) bool {
	if rest == "" {
		return false
	}
	if strings.IndexByte(";:,.!?", rest[0]) >= 0 {
		return true
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return unicode.IsLower(r)
}

func isLettersAndDotsRef(s string) bool {
	for _, r := range s {
		if r != '.' && !unicode.IsLetter(r) {
			return false
		}
	}
	return true
}

// isPunktNumberRef matches Punkt's number type: -?[.,]?\d[\d,.-]*\.?
func isPunktNumberRef(s string) bool {
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

// realignRef moves closing quotes and brackets that open a sentence onto the one before.
func realignRef(sents []string) []string {
	for i := 1; i < len(sents); i++ {
		s := sents[i]
		j := 0
		for j < len(s) && strings.IndexByte(`"')]}`, s[j]) >= 0 {
			j++
		}
		if j == 0 {
			continue
		}
		k := skipSpaceRef(s, j)
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
