package tokenizer

import "unicode/utf8"

// mergeChars is merge for SentencePiece-style BPE (metaspace.go): the first symbols are the
// piece's characters, not its bytes. A character that is not a token becomes the tokens of its
// UTF-8 bytes, <0xXX>, with byte_fallback (when all of them are tokens, as the tokenizers library
// checks), else the unknown token, one for a run of such characters with fuse_unk, else nothing.
// A byte that is not UTF-8 is a character of its own, so with byte_fallback it comes back
// from the tokens. The merges then run as in merge: lowest rank first, leftmost among equals.
func (t *Tokenizer) mergeChars(piece string, sc *scratch) []int32 {
	m := t.spm
	syms := sc.syms[:0]
	unk := false // the last symbol is the unknown token for characters
	for i := 0; i < len(piece); {
		id, w := int32(-1), 1
		if c := piece[i]; c < utf8.RuneSelf {
			id = t.byteID[c]
		} else {
			var r rune
			r, w = utf8.DecodeRuneInString(piece[i:])
			if x, ok := m.charID[r]; ok && (r != utf8.RuneError || w > 1) {
				id = x
			}
		}
		switch {
		case id >= 0:
			syms = append(syms, id)
			unk = false
		case m.byteFallback && m.hasByteTokens(piece[i:i+w]):
			for k := i; k < i+w; k++ {
				syms = append(syms, m.byteTok[piece[k]])
			}
			unk = false
		case t.unkID >= 0:
			if !unk || !m.fuseUnk {
				syms = append(syms, t.unkID)
			}
			unk = true
		}
		i += w
	}
	sc.syms = syms
	if len(syms) < 2 {
		return syms
	}
	ranks := growU(sc.ranks, len(syms))
	for i := 0; i+1 < len(syms); i++ {
		ranks[i] = t.rank(syms[i], syms[i+1])
	}
	ranks[len(syms)-1] = noRank
	sc.ranks = ranks
	if len(syms) > 48 {
		return t.mergeLong(syms, ranks, sc)
	}
	return t.mergeShort(syms, ranks[:len(syms)-1])
}

func (m *sentencePiece) hasByteTokens(char string) bool {
	if m.allBytes {
		return true
	}
	for i := 0; i < len(char); i++ {
		if m.byteTok[char[i]] < 0 {
			return false
		}
	}
	return true
}

// mergeShort merges a short piece's symbols by scanning for the lowest rank, which is faster
// than a heap for a few dozen symbols; ranks[i] is the rank of merging syms[i] and syms[i+1]. It
// is merge's loop, kept apart so that the byte-level path stays as it is.
func (t *Tokenizer) mergeShort(syms []int32, ranks []uint32) []int32 {
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
