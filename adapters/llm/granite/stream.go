package granite

import (
	"strings"
	"unicode/utf8"
)

// Delta is what an OutputStream lets out of a completion so far: text that is certain to be
// part of the final reasoning or content.
type Delta struct {
	Reasoning, Content string
}

// OutputStream parses one completion as it is generated (see Processor.ParseStream).
type OutputStream interface {
	// Write adds the next piece of the completion's text and returns what is now certain.
	Write(text string) Delta
	// Close ends the completion: it parses the whole text as Parse does and returns what was
	// not yet let out, the whole parse, and, when what was streamed turned out not to be a
	// prefix of the whole parse, why (the rest of that field is then not sent).
	Close(stopReason string) (rest Delta, msg AssistantMessage, mismatch string)
}

// StreamOutputProcessor is an OutputProcessor that can also parse incrementally.
type StreamOutputProcessor interface {
	OutputProcessor
	ParseStream(req *ChatRequest) OutputStream
}

var _ StreamOutputProcessor = (*Processor)(nil)

// stream states
const (
	stStart   = iota // deciding: a reasoning start marker or a tool call may still come
	stReason         // inside the thought section
	stContent        // the answer
	stHold           // nothing more is let out before Close
)

// holdWindow bounds how far back a marker that may still be completing is looked for. Markers
// are shorter; one longer (a citation id of many digits) may be cut, and Close then reports the
// mismatch.
const holdWindow = 96

// maxIDDigits is the longest citation id a partial marker is recognized with.
const maxIDDigits = 20

// stream is the Processor's OutputStream. It keeps the whole text (bounded by MaxOutputBytes:
// beyond that it lets nothing more out) and derives what is certain from it:
//
//   - With thinking asked for, a start marker must open the completion (after whitespace), as
//     vLLM's streaming reasoning parsers expect; then reasoning is let out up to any suffix that
//     may begin an end marker, and trailing whitespace (the final reasoning is stripped). A
//     completion that does not open with the marker is held whole until Close.
//   - With tools offered, a completion that opens (after whitespace) with <|tool_call|>,
//     <tool_call> or "[" is held whole until Close: tool calls arrive complete.
//   - The answer is what Parse makes of the text up to a safe cut: before any suffix that may
//     still become a citation marker, section header or closing tag, and before trailing
//     whitespace (which a marker or the final strip may remove). Once a section header or
//     </response> is seen the answer cannot grow and nothing more is let out before Close.
//
// For Granite 3.3 an answer opening with <response> is streamed as if it will be closed. What
// was let out is a prefix of the whole parse whenever the model closes what it opens; when it
// does not (a thought or response section cut off, a marker written twice, output Parse fails
// on), Close reports the mismatch.
type stream struct {
	p   *Processor
	req *ChatRequest

	text      strings.Builder
	state     int
	reasonAt  int // offset of the reasoning, after the start marker
	contentAt int // offset of the answer (after the end marker)
	cut       int // the text up to cut has been turned into content
	rcut      int // the text up to rcut has been let out as reasoning (0: none yet)
	scanned   int // the reasoning has been searched for an end marker up to here
	parsed    int // bytes parsed for the answer so far, and the length the next parse waits for
	nextParse int
	fixed     bool
	respKnown bool // 3.3 thinking: whether the answer opens with <response> is known
	respOpen  bool // ...and it does, and </response> has not come yet
	respAt    int  // offset after that <response>

	reasoning, content strings.Builder // what was let out
}

// ParseStream returns an OutputStream for one completion of req (nil: a plain chat request).
func (p *Processor) ParseStream(req *ChatRequest) OutputStream {
	if req == nil {
		req = &ChatRequest{}
	}
	return &stream{p: p, req: req}
}

func (s *stream) starts() []string {
	if s.p.version == V33 {
		return cotStart33
	}
	return cotStart32
}

func (s *stream) ends() []string {
	if s.p.version == V33 {
		return cotEnd33
	}
	return cotEnd32
}

func (s *stream) Write(piece string) Delta {
	if s.text.Len()+len(piece) > MaxOutputBytes {
		s.state = stHold // Parse leaves such text unparsed; so does Close
	}
	s.text.WriteString(piece)
	if s.state == stHold || piece == "" {
		return Delta{}
	}
	var d Delta
	for {
		before := s.state
		switch s.state {
		case stStart:
			s.decide()
		case stReason:
			d.Reasoning += s.stepReason()
		case stContent:
			d.Content += s.stepContent()
		}
		if s.state == before {
			return d
		}
	}
}

// decide picks the state from how the completion opens.
func (s *stream) decide() {
	t := s.text.String()
	lead := strings.TrimLeftFunc(t, isPySpace)
	off := len(t) - len(lead)
	switch {
	case s.req.Thinking:
		for _, m := range s.starts() {
			if strings.HasPrefix(lead, m) {
				s.state, s.reasonAt = stReason, off+len(m)
				return
			}
		}
		if lead == "" || anyHasPrefix(s.starts(), lead) {
			return
		}
		s.state = stHold
	case len(s.req.Tools) > 0:
		for _, m := range []string{"<|tool_call|>", "<tool_call>", "["} {
			if strings.HasPrefix(lead, m) {
				s.state = stHold
				return
			}
		}
		if lead == "" || strings.HasPrefix("<|tool_call|>", lead) || strings.HasPrefix("<tool_call>", lead) {
			return
		}
		s.state = stContent
	default:
		s.state = stContent
	}
}

func anyHasPrefix(markers []string, s string) bool {
	for _, m := range markers {
		if strings.HasPrefix(m, s) {
			return true
		}
	}
	return false
}

// stepReason lets out reasoning, or moves to the answer when an end marker is complete. It
// works on offsets, searching only text it has not searched, so a long thought costs linear time.
func (s *stream) stepReason() string {
	t := s.text.String()
	from := max(s.reasonAt, s.scanned-longest(s.ends()))
	end, endLen := -1, 0
	for _, m := range s.ends() {
		if i := strings.Index(t[from:], m); i >= 0 && (end < 0 || from+i < end) {
			end, endLen = from+i, len(m)
		}
	}
	s.scanned = len(t)
	safe := len(t)
	if end >= 0 {
		safe = end
		s.state, s.contentAt, s.cut = stContent, end+endLen, end+endLen
	} else {
		// Hold back a suffix that may begin an end marker.
		for i := max(from, len(t)-longest(s.ends())); i < len(t); i++ {
			if anyHasPrefix(s.ends(), t[i:]) {
				safe = i
				break
			}
		}
	}
	// The final reasoning is stripped: skip leading whitespace, hold back trailing whitespace.
	start := s.rcut
	if start == 0 {
		start = s.reasonAt
		for start < safe {
			r, n := utf8.DecodeRuneInString(t[start:safe])
			if !isPySpace(r) {
				break
			}
			start += n
		}
	}
	for safe > start {
		r, n := utf8.DecodeLastRuneInString(t[start:safe])
		if !isPySpace(r) {
			break
		}
		safe -= n
	}
	if safe <= start {
		return ""
	}
	s.rcut = safe
	s.reasoning.WriteString(t[start:safe])
	return t[start:safe]
}

func longest(ms []string) int {
	n := 0
	for _, m := range ms {
		n = max(n, len(m))
	}
	return n
}

// markers the answer's parse reacts to, as templates: a literal, or pre + digits + post.
type marker struct{ pre, post string }

var (
	markers32 = []marker{{"<co>", "</co>"}, {citeHeader32, ""}, {hallucHeader32, ""}}
	markers33 = []marker{{`<|start_of_cite|>{"document_id": "`, `"}<|end_of_cite|>`}, {pluginStart, ""}, {pluginEnd, ""},
		{` {"document_id": "`, `"}`}, {citeHeader33, ""}, {hallucHeader33, ""}, {"</response>", ""}, {"<response>", ""}}
)

// couldBecome reports whether s is a proper prefix of some text the marker matches.
func (m marker) couldBecome(s string) bool {
	if len(s) < len(m.pre) {
		return strings.HasPrefix(m.pre, s)
	}
	if m.post == "" || !strings.HasPrefix(s, m.pre) {
		return false
	}
	rest := s[len(m.pre):]
	i := 0
	for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == len(rest) {
		return true
	}
	return i > 0 && len(rest[i:]) < len(m.post) && strings.HasPrefix(m.post, rest[i:])
}

// holdFrom returns the earliest offset p >= from at which the rest of t may still become one
// of ms (len(t) if none): for each marker only the last few offsets can start a literal's
// prefix, and only the last occurrence of a template's head can start a partial template.
func holdFrom(t string, from int, ms []marker) int {
	c := len(t)
	for _, m := range ms {
		for p := max(from, len(t)-len(m.pre)+1); p < c; p++ {
			if t[p] == m.pre[0] && strings.HasPrefix(m.pre, t[p:]) {
				c = p
				break
			}
		}
		if m.post == "" {
			continue
		}
		// A partial template is its head, digits and part of its tail: it starts within the
		// last len(pre)+len(post)+maxIDDigits bytes (longer ids are cut; Close reports it).
		lo := max(from, len(t)-len(m.pre)-len(m.post)-maxIDDigits)
		if q := strings.LastIndex(t[lo:], m.pre); q >= 0 && lo+q < c && m.couldBecome(t[lo+q:]) {
			c = lo + q
		}
	}
	return c
}

func startsWithSpace(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isPySpace(r)
}

// stepContent lets out the answer up to the safe cut.
func (s *stream) stepContent() string {
	if s.fixed {
		return ""
	}
	t := s.text.String()
	ms := markers32
	if s.p.version == V33 {
		ms = markers33
	}
	// The safe cut: before the earliest suffix that may still become a marker...
	c := holdFrom(t, max(s.contentAt, len(t)-holdWindow), ms)
	// ...and before trailing whitespace.
	for c > s.contentAt {
		r, n := utf8.DecodeLastRuneInString(t[:c])
		if !isPySpace(r) {
			break
		}
		c -= n
	}
	if s.p.version == V33 && s.req.Thinking && !s.respKnown {
		lead := strings.TrimLeftFunc(t[s.contentAt:], isPySpace)
		if lead == "" || strings.HasPrefix("<response>", lead) && lead != "<response>" {
			return "" // <response> may be coming
		}
		s.respKnown, s.respOpen = true, strings.HasPrefix(lead, "<response>")
		s.respAt = len(t) - len(lead) + len("<response>")
	}
	if s.respOpen {
		if strings.Contains(t[max(s.respAt, s.cut-len("</response>")):], "</response>") {
			s.respOpen = false // closed: Parse extracts it as it is
		} else if c <= s.respAt {
			return "" // Parse extracts a response only once it has a character
		}
	}
	if c <= s.cut {
		return ""
	}
	if s.cut > s.contentAt && s.content.Len() > 0 && !strings.ContainsAny(t[s.cut:c], "<#{") &&
		!(t[s.cut-1] == '>' && startsWithSpace(t[s.cut:c])) {
		// Plain text after the answer so far: Parse would append it as it is. (Whitespace
		// right after a marker is the exception: a 3.2 citation marker takes it along.)
		piece := t[s.cut:c]
		s.cut = c
		s.content.WriteString(piece)
		return piece
	}
	// Parsing the text again costs its length; past a budget of a few times the text's length,
	// parse only when the text grew by an eighth, so the total stays linear.
	if s.parsed > 16*len(t)+1<<16 && len(t) < s.nextParse {
		return ""
	}
	text := t[:c]
	if s.respOpen {
		text += "</response>"
	}
	s.parsed += len(text)
	s.nextParse = len(t) + len(t)/8
	msg := s.p.parseOne(Generation{Text: text}, s.req)
	if msg.ParseError != "" || msg.ReasoningContent == nil && s.req.Thinking || len(msg.ToolCalls) > 0 {
		return ""
	}
	s.cut = c
	s.fixed = s.sectionsStarted(t[s.contentAt:c])
	done := s.content.String()
	if !strings.HasPrefix(msg.Content, done) {
		return ""
	}
	s.content.WriteString(msg.Content[len(done):])
	return msg.Content[len(done):]
}

// sectionsStarted reports whether the answer has reached a part after which its content cannot
// grow: a citations or hallucinations header, a leaked one (3.3), or </response>.
func (s *stream) sectionsStarted(answer string) bool {
	if s.p.version == V32 {
		return strings.Contains(answer, citeHeader32) || strings.Contains(answer, hallucHeader32)
	}
	return strings.Contains(answer, citeHeader33) || strings.Contains(answer, hallucHeader33) ||
		s.req.Thinking && strings.Contains(answer, "</response>")
}

func (s *stream) Close(stopReason string) (Delta, AssistantMessage, string) {
	msg := s.p.parseOne(Generation{Text: s.text.String(), StopReason: stopReason}, s.req)
	var d Delta
	var why []string
	r := ""
	if msg.ReasoningContent != nil {
		r = *msg.ReasoningContent
	}
	if done := s.reasoning.String(); strings.HasPrefix(r, done) {
		d.Reasoning = r[len(done):]
	} else {
		why = append(why, "the streamed reasoning is not the whole answer's")
	}
	if done := s.content.String(); strings.HasPrefix(msg.Content, done) {
		d.Content = msg.Content[len(done):]
	} else {
		why = append(why, "the streamed content is not the whole answer's")
	}
	return d, msg, strings.Join(why, "; ")
}
