package granite

import (
	"bytes"
	"unicode/utf8"
)

// A pass is one step of Parse's answer run on a stream (stream.answerPasses): fed, piece by
// piece, the text the step before it let out, it appends to dst what no continuation of that
// text can change in the step's result over the whole text, and keeps the rest for later.
// Each keeps at most a marker that may be completing, so the passes cost time linear in the
// text, whatever the pieces.
type pass interface {
	feed(dst, in []byte) []byte
}

// pending returns the bytes to work on: what was kept, then in (kept's buffer reused).
func pending(kept *[]byte, in []byte) []byte {
	if len(*kept) == 0 {
		return in
	}
	*kept = append(*kept, in...)
	return *kept
}

// keep keeps b[i:] for the next feed; b may be kept's own buffer.
func keep(kept *[]byte, b []byte, i int) {
	if len(*kept) > 0 {
		*kept = (*kept)[:copy(*kept, b[i:])]
		return
	}
	*kept = append((*kept)[:0], b[i:]...)
}

// runeAt is the rune b starts with and its length; ok false when b holds only its start.
func runeAt(b []byte) (r rune, n int, ok bool) {
	if b[0] < utf8.RuneSelf {
		return rune(b[0]), 1, true
	}
	if !utf8.FullRune(b) {
		return 0, 0, false
	}
	r, n = utf8.DecodeRune(b)
	return r, n, true
}

// skipSpaces returns the offset of the first rune of b at or after i that space rejects, and
// ok false when a rune cut in two comes first.
func skipSpaces(b []byte, i int, space func(rune) bool) (int, bool) {
	for i < len(b) {
		r, n, ok := runeAt(b[i:])
		if !ok {
			return i, false
		}
		if !space(r) {
			break
		}
		i += n
	}
	return i, true
}

// cut lets text through up to the first occurrence of any of its literals, and nothing after:
// the answer before its first section header (splitSections), a <response> section's end
// (responseSection), the section 3.3 leaks (reLeakedHeader).
type cut struct {
	lits [][]byte
	max  int // the longest literal's length
	kept []byte
	done bool
}

func newCut(lits ...string) *cut {
	c := &cut{}
	for _, l := range lits {
		c.lits = append(c.lits, []byte(l))
		c.max = max(c.max, len(l))
	}
	return c
}

func (c *cut) feed(dst, in []byte) []byte {
	if c.done {
		return dst
	}
	b := pending(&c.kept, in)
	end, found := len(b), false
	for _, l := range c.lits {
		if j := bytes.Index(b, l); j >= 0 && j < end {
			end, found = j, true
		}
	}
	// Before that, a suffix that may still become a literal (which would then come first).
	for p := max(0, len(b)-c.max+1); p < end; p++ {
		if c.couldBe(b[p:]) {
			end, found = p, false
			break
		}
	}
	dst = append(dst, b[:end]...)
	if found {
		c.done, c.kept = true, nil
		return dst
	}
	keep(&c.kept, b, end)
	return dst
}

// couldBe reports whether b is a proper prefix of a literal.
func (c *cut) couldBe(b []byte) bool {
	for _, l := range c.lits {
		if len(b) < len(l) && bytes.HasPrefix(l, b) {
			return true
		}
	}
	return false
}

// remove deletes every match of a marker, leftmost first, as strings.ReplaceAll does a literal
// (post ""), regexp.ReplaceAllLiteralString a template (pre, one or more ASCII digits, post),
// and removeCo 3.2's \s*<co>\d+</co>\s* (space: the whitespace around a match goes with it).
type remove struct {
	pre, post string
	space     bool
	kept      []byte
	eat       bool // space: a match just ended, and the whitespace after it goes too
	// A partial match that kept begins with, checked up to at: phase, where its marker
	// starts (after the whitespace), and where its digits and its tail start.
	at, phase, preAt, digitsAt, postAt int
}

const (
	phSpace = iota
	phPre
	phDigits
	phPost
)

// outcomes of remove.match
const (
	noMatch = iota
	partial
	whole
)

func (r *remove) feed(dst, in []byte) []byte {
	b := pending(&r.kept, in)
	resume := len(r.kept) > 0 && r.at > 0 // kept begins with a partial match
	i := 0
	for i < len(b) {
		if r.eat {
			c, n, ok := runeAt(b[i:])
			if !ok {
				break
			}
			if isPySpace(c) {
				i += n
				continue
			}
			r.eat = false
		}
		if !resume {
			j := r.next(b, i)
			dst = append(dst, b[i:j]...)
			if i = j; i == len(b) {
				break
			}
			r.at, r.phase, r.preAt = 0, phPre, 0
			if r.space {
				r.phase = phSpace
			}
		}
		resume = false
		switch n, st := r.match(b[i:]); st {
		case whole:
			i += n
			r.eat, r.at = r.space, 0
		case partial:
			keep(&r.kept, b, i)
			return dst
		default:
			dst = append(dst, b[i:i+n]...)
			i += n
			r.at = 0
		}
	}
	keep(&r.kept, b, i) // at most a rune cut in two, while eating whitespace
	return dst
}

// next is the offset of the first byte at or after i where a match may start.
func (r *remove) next(b []byte, i int) int {
	if !r.space {
		if j := bytes.IndexByte(b[i:], r.pre[0]); j >= 0 {
			return i + j
		}
		return len(b)
	}
	for i < len(b) {
		c := b[i]
		if c == r.pre[0] || c < utf8.RuneSelf && pySpaceASCII[c] {
			return i
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		rr, n, ok := runeAt(b[i:])
		if !ok || isPySpace(rr) {
			return i
		}
		i += n
	}
	return len(b)
}

// match says what b, which begins where a match may begin, is: a whole match (n its length,
// leading whitespace included), partial (it may still become one: the check resumes at r.at
// on the next feed), or no match, n the bytes no match starts in.
func (r *remove) match(b []byte) (n, outcome int) {
	i := r.at
	defer func() { r.at = i }()
	for {
		switch r.phase {
		case phSpace:
			var ok bool
			if i, ok = skipSpaces(b, i, isPySpace); !ok || i == len(b) {
				return 0, partial
			}
			r.phase, r.preAt = phPre, i
		case phPre:
			k, ok := r.literal(b, i, r.preAt, r.pre)
			if !ok {
				return max(r.preAt, 1), noMatch // the whitespace cannot start one either
			}
			if i = k; i-r.preAt < len(r.pre) {
				return 0, partial
			}
			if r.post == "" {
				return i, whole
			}
			r.phase, r.digitsAt = phDigits, i
		case phDigits:
			for i < len(b) && '0' <= b[i] && b[i] <= '9' {
				i++
			}
			switch {
			case i == len(b):
				return 0, partial
			case i == r.digitsAt:
				return max(r.preAt, 1), noMatch
			}
			r.phase, r.postAt = phPost, i
		case phPost:
			k, ok := r.literal(b, i, r.postAt, r.post)
			if !ok {
				return max(r.preAt, 1), noMatch
			}
			if i = k; i-r.postAt < len(r.post) {
				return 0, partial
			}
			return i, whole
		}
	}
}

// literal checks b[i:] against lit, which starts at b[from]: the offset reached, and false on a
// byte that differs.
func (r *remove) literal(b []byte, i, from int, lit string) (int, bool) {
	for i < len(b) && i-from < len(lit) {
		if b[i] != lit[i-from] {
			return i, false
		}
		i++
	}
	return i, true
}

// trimLeft drops the whitespace the text starts with (the strip of the answer's start).
type trimLeft struct {
	space func(rune) bool
	kept  []byte // a rune cut in two
	done  bool
}

func (t *trimLeft) feed(dst, in []byte) []byte {
	if t.done {
		return append(dst, in...)
	}
	b := pending(&t.kept, in)
	i, ok := skipSpaces(b, 0, t.space)
	if ok && i < len(b) {
		t.done = true
		dst = append(dst, b[i:]...)
		t.kept = nil
		return dst
	}
	keep(&t.kept, b, i)
	return dst
}

// responseGate lets through a Granite 3.3 answer's <response> section, from after its tag,
// once the answer (after whitespace) opens with the tag and one more character that does not
// begin its end. An answer that opens otherwise may still have a section further on, which
// would replace what comes before it; one whose section is empty is left whole: either is known
// only at Close, and the gate sets hold.
type responseGate struct{ gate }

// gate is what the gates below share: the answer kept until its start decides, and whether it
// did (open: let everything through; *hold: let nothing through until Close).
type gate struct {
	kept []byte
	skip int // kept[:skip] is whitespace
	open bool
	hold *bool
}

// take passes in through an open gate and drops it at a held one (decide false); otherwise it
// keeps in and returns the answer so far after its leading whitespace for the gate to decide on
// (decide false while the whitespace may go on).
func (g *gate) take(dst, in []byte) (out, lead []byte, decide bool) {
	if g.open {
		return append(dst, in...), nil, false
	}
	if *g.hold {
		return dst, nil, false
	}
	g.kept = append(g.kept, in...)
	var ok bool
	if g.skip, ok = skipSpaces(g.kept, g.skip, isPySpace); !ok {
		return dst, nil, false
	}
	return dst, g.kept[g.skip:], true
}

func (g *responseGate) feed(dst, in []byte) []byte {
	const openTag, closeTag = "<response>", "</response>"
	dst, lead, decide := g.take(dst, in)
	if !decide {
		return dst
	}
	if len(lead) <= len(openTag) {
		*g.hold = !bytes.HasPrefix([]byte(openTag), lead)
		return dst
	}
	after := lead[len(openTag):]
	switch {
	case !bytes.HasPrefix(lead, []byte(openTag)), bytes.HasPrefix(after, []byte(closeTag)):
		*g.hold = true
		return dst
	case len(after) < len(closeTag) && bytes.HasPrefix([]byte(closeTag), after):
		return dst
	}
	g.open = true
	dst = append(dst, after...)
	g.kept = nil
	return dst
}

// toolCallStarts are what parseToolCalls reads a tool call after (whitespace first).
var toolCallStarts = [...]string{"<|tool_call|>", "<tool_call>", "["}

// toolGate holds the answer until its start shows it is not a tool call, then lets it through
// whole; one that may be sets hold: tool calls come whole at Close.
type toolGate struct{ gate }

func (g *toolGate) feed(dst, in []byte) []byte {
	dst, lead, decide := g.take(dst, in)
	if !decide || len(lead) == 0 {
		return dst
	}
	for _, m := range toolCallStarts {
		if bytes.HasPrefix(lead, []byte(m)) {
			*g.hold = true
			return dst
		}
		if len(lead) < len(m) && bytes.HasPrefix([]byte(m), lead) {
			return dst
		}
	}
	g.open = true
	dst = append(dst, g.kept...)
	g.kept = nil
	return dst
}
