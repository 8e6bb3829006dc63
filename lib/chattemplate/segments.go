package chattemplate

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Segment is a piece of a render. Content marks text that came from the request (a message's
// content or reasoning, or special-token text anywhere in the request's strings): a tokenizer
// must not read special tokens in it, so that a user cannot forge a role boundary by typing
// "<|im_end|>". The segments of a render concatenate to exactly what Render returns; a tokenizer
// may tokenize across segment boundaries, it only has to leave Content segments' special-token
// text as plain text.
type Segment struct {
	Text    string
	Content bool
}

// SpecialTokens is the set of a tokenizer's special-token strings (its added tokens), indexed
// once for RenderSegments.
type SpecialTokens struct {
	byFirst [256][]string // by first byte, longest first
	n       int
	// only is the first byte of every token when they share one ('<' for most models), so
	// that find can jump from one to the next; -1 when they do not.
	only int
	// tails are the tokens' proper suffixes (all but the first byte, all but the first two,
	// ...), by first byte, each once: what a content could be the rest of (see inertContent).
	tails [256][]string
}

// NewSpecialTokens indexes tokens (empty strings are ignored).
func NewSpecialTokens(tokens []string) *SpecialTokens {
	s := &SpecialTokens{only: -1}
	for _, t := range tokens {
		if t == "" {
			continue
		}
		switch {
		case s.n == 0:
			s.only = int(t[0])
		case int(t[0]) != s.only:
			s.only = 256 // several first bytes
		}
		s.byFirst[t[0]] = append(s.byFirst[t[0]], t)
		s.n++
	}
	if s.only > 255 {
		s.only = -1
	}
	for i := range s.byFirst {
		l := s.byFirst[i]
		sort.SliceStable(l, func(a, b int) bool { return len(l[a]) > len(l[b]) })
	}
	seen := map[string]bool{}
	for _, l := range s.byFirst {
		for _, t := range l {
			for k := 1; k < len(t); k++ {
				if tail := t[k:]; !seen[tail] {
					seen[tail] = true
					s.tails[tail[0]] = append(s.tails[tail[0]], tail)
				}
			}
		}
	}
	return s
}

// starts reports whether str holds a byte that some token begins with.
func (s *SpecialTokens) starts(str string) bool {
	if s.only >= 0 {
		return strings.IndexByte(str, byte(s.only)) >= 0
	}
	for i := 0; i < len(str); i++ {
		if len(s.byFirst[str[i]]) > 0 {
			return true
		}
	}
	return false
}

// inertContent reports whether a message content (or reasoning) leaves a tokenizer's reading of
// the render the same whether its text is marked plain or not: no token can begin inside its
// core (the text RenderSegments marks, surrounding whitespace left out), and none can begin in
// the text before it and run into it, which would need the core to start with the rest of a
// token (a proper suffix of it) or to be the start of such a rest. The core is assumed to reach
// the render as it is (or not at all): a template that rewrote a content into token text
// (replace("[END]", "<|im_end|>")) would get its token read where the marks would have kept it
// plain, and no known template does so.
func (s *SpecialTokens) inertContent(str string) bool {
	lead := strings.IndexFunc(str, notSpace)
	if lead < 0 {
		return true // all whitespace: RenderSegments marks nothing
	}
	trail := strings.LastIndexFunc(str, notSpace)
	_, size := utf8.DecodeRuneInString(str[trail:])
	core := str[lead : trail+size]
	if s.starts(core) {
		return false
	}
	for _, tail := range s.tails[core[0]] {
		if strings.HasPrefix(core, tail) || strings.HasPrefix(tail, core) {
			return false
		}
	}
	return true
}

// match returns the longest special token at the start of s, or "".
func (s *SpecialTokens) match(str string) string {
	for _, t := range s.byFirst[str[0]] {
		if strings.HasPrefix(str, t) {
			return t
		}
	}
	return ""
}

// find reports whether str contains a special token.
func (s *SpecialTokens) find(str string) bool {
	if s == nil || s.n == 0 {
		return false
	}
	if s.only >= 0 {
		for i := 0; ; i++ {
			j := strings.IndexByte(str[i:], byte(s.only))
			if j < 0 {
				return false
			}
			if i += j; s.match(str[i:]) != "" {
				return true
			}
		}
	}
	for i := 0; i < len(str); i++ {
		if len(s.byFirst[str[i]]) > 0 && s.match(str[i:]) != "" {
			return true
		}
	}
	return false
}

// The marks RenderSegments puts into the request's strings: characters of Unicode's last
// private-use plane, which no tokenizer's special tokens and no sensible request contain (a
// request that does contain one is rendered without marks, see RenderSegments).
const (
	markOpen  = "\U0010FFF0" // markOpen ID markEnd: a content starts
	markClose = "\U0010FFF2" // markClose ID markEnd: it ends
	markEnd   = "\U0010FFF1"
	maskOpen  = "\U0010FFF3" // maskOpen ID markEnd: special-token text of the request
	markFirst = '\U0010FFF0'
)

func hasMarkRune(s string) bool {
	if !strings.Contains(s, "\xf4\x8f\xbf") { // the UTF-8 prefix of U+10FFC0..U+10FFFF
		return false
	}
	for _, r := range s {
		if r >= markFirst && r <= unicode.MaxRune {
			return true
		}
	}
	return false
}

// RenderSegments renders in as Render does and tells which parts of the result came from the
// request, so that special-token text inside message contents (or any other string of the
// request) is tokenized as plain text.
//
// How: it renders once more with every message content (and reasoning) wrapped in marks, its
// surrounding whitespace left outside them so that trim and strip see what they would have
// seen. If that render, marks removed, is byte-identical to the real one, each pair of marks
// delimits a Content segment. A template that cuts a content apart (Qwen3 splits an assistant's
// "<think>...</think>" from its answer) or inspects it (startswith, length) may lose marks or
// render differently; the contents concerned are then not marked, which is safe because of the
// second step.
//
// Safety does not rest on the marks: if any string of the request (contents, names, tool
// definitions and calls, documents, chat_template_kwargs, object keys included) contains a
// special token, a third render replaces each such occurrence with a placeholder; if that
// render, placeholders put back, is byte-identical to the real one (case aside: a template may
// upper-case a title), every placeholder's place is a
// Content segment. If it is not (the template's logic depends on the special-token text
// itself), the render is accepted only when it holds none of the special tokens the request
// contains; otherwise it is refused with an *InputError, never passed on with a forged
// boundary.
//
// What it cannot see: a special token formed across a boundary, a content ending in "<|im_" that
// the template follows with "end|>". No known template emits a special token's tail after a
// content.
func (t *Template) RenderSegments(ctx context.Context, in *Input, special *SpecialTokens) ([]Segment, error) {
	out, content, err := t.renderSpans(ctx, in, special, false)
	if err != nil {
		return nil, err
	}
	return segments(out, content), nil
}

// RenderSpans is RenderSegments for a tokenizer: the render, and the byte ranges of it that a
// tokenizer must read as plain text (tokenizer.Options.Plain; sorted, disjoint, not touching):
// those of the Content segments, without cutting the render into segments and joining them
// again. It renders once rather than twice when the ranges cannot change what a tokenizer
// reads, and then returns none: when no string of the request holds one of special's tokens,
// and no token can begin inside a content or run into one from the text before it (the
// content's text would have to begin with the rest of a token). For Qwen's and Llama's tokens,
// which all begin with '<', that is any request whose contents hold no '<' and do not begin
// with the tail of a token ("im_end|>", "|>").
func (t *Template) RenderSpans(ctx context.Context, in *Input, special *SpecialTokens) (string, [][2]int, error) {
	out, content, err := t.renderSpans(ctx, in, special, true)
	if err != nil {
		return "", nil, err
	}
	if len(content) == 0 {
		return out, nil, nil
	}
	plain := make([][2]int, 0, len(content))
	for _, r := range content {
		if k := len(plain); k > 0 && plain[k-1][1] == r[0] {
			plain[k-1][1] = r[1] // touching: one segment
			continue
		}
		plain = append(plain, r)
	}
	return out, plain, nil
}

// renderSpans renders in and returns the ranges of the render that came from the request;
// inert lets it return none, after one render, when the request's text is inert (RenderSpans).
func (t *Template) renderSpans(ctx context.Context, in *Input, special *SpecialTokens, inert bool) (string, []span, error) {
	var look *strMap
	if inert && special != nil && special.n > 0 {
		// The real render's variables, built with a look at each string on the way.
		look = &strMap{
			inspect: true,
			content: func(s string) string {
				inert = inert && special.inertContent(s)
				return s
			},
			other: func(s string) string {
				inert = inert && !special.find(s)
				return s
			},
		}
	}
	ds := t.getDicts()
	defer t.putDicts(ds)
	vars, err := t.variables(in, look, ds)
	if err != nil {
		return "", nil, err
	}
	out, err := t.render(ctx, vars)
	if err != nil || inert {
		return out, nil, err
	}
	var content []span // of out: from the request

	// Marks around contents; the same pass finds special tokens and mark characters in the
	// request's strings.
	var (
		cores     int
		found     bool // a special token in some string of the request
		collision bool // a mark character in some string of the request
	)
	scan := func(s string) {
		if !found && special.find(s) {
			found = true
		}
		if !collision && hasMarkRune(s) {
			collision = true
		}
	}
	sm := &strMap{
		content: func(s string) string {
			scan(s)
			lead := strings.IndexFunc(s, notSpace)
			if lead < 0 {
				return s // all whitespace: nothing to mark
			}
			trail := strings.LastIndexFunc(s, notSpace)
			_, size := utf8.DecodeRuneInString(s[trail:])
			trail += size
			id := strconv.Itoa(cores)
			cores++
			return s[:lead] + markOpen + id + markEnd + s[lead:trail] + markClose + id + markEnd + s[trail:]
		},
		other: func(s string) string { scan(s); return s },
	}
	ds.reset() // the render before is done with them
	if mvars, err := t.variables(in, sm, ds); err == nil && !collision && cores > 0 {
		if mout, err := t.render(ctx, mvars); err == nil {
			content = markContents(out, mout)
		} else if ctx.Err() != nil {
			return "", nil, err
		}
	}

	if found {
		if collision {
			return "", nil, &InputError{Param: "messages", Msg: "the request contains characters of Unicode's private-use plane 16 together with special-token text; remove either"}
		}
		var masked []string
		mask := func(s string) string {
			if !special.find(s) {
				return s
			}
			var b strings.Builder
			for i := 0; i < len(s); {
				if tok := special.match(s[i:]); tok != "" {
					b.WriteString(maskOpen + strconv.Itoa(len(masked)) + markEnd)
					masked = append(masked, tok)
					i += len(tok)
					continue
				}
				b.WriteByte(s[i])
				i++
			}
			return b.String()
		}
		ds.reset()
		kvars, err := t.variables(in, &strMap{content: mask, other: mask}, ds)
		if err != nil {
			return "", nil, err
		}
		kout, err := t.render(ctx, kvars)
		if err == nil {
			if spans, ok := unmask(out, kout, masked); ok {
				return out, union(content, spans), nil
			}
		}
		if ctx.Err() != nil {
			return "", nil, &RenderError{Err: ctx.Err()}
		}
		// The template reacts to the special-token text itself: accept the render only if it
		// holds none of the request's special tokens.
		for _, tok := range masked {
			if strings.Contains(out, tok) {
				return "", nil, inputErrorf("messages", "the request contains the special token %q, which this model's chat template interprets; remove it from the message contents", tok)
			}
		}
	}
	return out, content, nil
}

func notSpace(r rune) bool { return !unicode.IsSpace(r) && (r < 0x1c || r > 0x1f) }

// span is a byte range [start, end) of a render.
type span [2]int

// markContents returns the ranges of out that lie between a content's two marks in mout, in
// order and disjoint, provided mout without its marks is out; nil if it is not.
func markContents(out, mout string) []span {
	var ranges []span
	pos := 0     // in out
	open := -1   // in out, where the open content started
	openID := "" // its id
	for i := 0; i < len(mout); {
		j := strings.Index(mout[i:], "\xf4\x8f\xbf")
		if j < 0 {
			j = len(mout) - i
		}
		// mout[i:i+j] is plain text and must be out's next bytes.
		if pos+j > len(out) || mout[i:i+j] != out[pos:pos+j] {
			return nil
		}
		pos += j
		i += j
		if i == len(mout) {
			break
		}
		var closing bool
		switch {
		case strings.HasPrefix(mout[i:], markOpen):
		case strings.HasPrefix(mout[i:], markClose):
			closing = true
		default:
			return nil // a mark character the request did not have: give up
		}
		i += len(markOpen)
		k := strings.Index(mout[i:], markEnd)
		if k <= 0 {
			return nil
		}
		id := mout[i : i+k]
		i += k + len(markEnd)
		switch {
		case !closing:
			open, openID = pos, id // an unclosed earlier one (cut by the template) is dropped
		case open >= 0 && id == openID:
			if pos > open {
				ranges = append(ranges, span{open, pos})
			}
			open = -1
		default:
			open = -1 // a close without its open: the template cut the content
		}
	}
	if pos != len(out) {
		return nil
	}
	return ranges
}

// unmask matches kout against out, each placeholder standing for its token (or the token with
// its case changed: an upper filter), the text between placeholders matching exactly, and returns
// the placeholders' places in out, in order. False when kout does not match out so.
func unmask(out, kout string, masked []string) ([]span, bool) {
	var spans []span
	pos := 0
	for {
		j := strings.Index(kout, maskOpen)
		if j < 0 {
			j = len(kout)
		}
		if !strings.HasPrefix(out[pos:], kout[:j]) {
			return nil, false
		}
		pos += j
		if j == len(kout) {
			break
		}
		k := strings.Index(kout[j:], markEnd)
		if k < 0 {
			return nil, false
		}
		n, err := strconv.Atoi(kout[j+len(maskOpen) : j+k])
		if err != nil || n < 0 || n >= len(masked) {
			return nil, false
		}
		tok := masked[n]
		if len(out)-pos < len(tok) || !strings.EqualFold(out[pos:pos+len(tok)], tok) {
			return nil, false
		}
		spans = append(spans, span{pos, pos + len(tok)})
		pos += len(tok)
		kout = kout[j+k+len(markEnd):]
	}
	if pos != len(out) {
		return nil, false
	}
	return spans, true
}

// union merges two lists of ordered, disjoint, non-empty ranges into one.
func union(a, b []span) []span {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	all := make([]span, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		var r span
		if len(b) == 0 || len(a) > 0 && a[0][0] <= b[0][0] {
			r, a = a[0], a[1:]
		} else {
			r, b = b[0], b[1:]
		}
		if k := len(all); k > 0 && r[0] <= all[k-1][1] {
			all[k-1][1] = max(all[k-1][1], r[1])
			continue
		}
		all = append(all, r)
	}
	return all
}

// segments cuts out at the edges of the ranges (ordered, disjoint, non-empty), which become
// Content segments; ranges that touch make one segment.
func segments(out string, ranges []span) []Segment {
	if out == "" {
		return []Segment{{Text: ""}}
	}
	segs := make([]Segment, 0, 2*len(ranges)+1)
	pos := 0
	for i := 0; i < len(ranges); i++ {
		start, end := ranges[i][0], ranges[i][1]
		for i+1 < len(ranges) && ranges[i+1][0] == end {
			i++
			end = ranges[i][1]
		}
		if start > pos {
			segs = append(segs, Segment{Text: out[pos:start]})
		}
		segs = append(segs, Segment{Text: out[start:end], Content: true})
		pos = end
	}
	if pos < len(out) {
		segs = append(segs, Segment{Text: out[pos:]})
	}
	return segs
}
