package granite

import (
	"strings"
	"unicode"
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
	// not yet let out, the whole parse, and, should what was streamed not be a prefix of the
	// whole parse, why (the rest of that field is then not sent). What was let out is a prefix
	// of the whole parse for any text, so mismatch is "" unless this package has a bug; the one
	// difference a stream may show is reasoning let out for a thought the model never closed,
	// which the whole parse has as content (its ParseError says so).
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
	stStart   = iota // deciding: a reasoning start marker may still come
	stReason         // inside the thought section
	stContent        // the answer
	stHold           // nothing more is let out before Close
)

// stream is the Processor's OutputStream. It lets out only what no continuation of the text
// can change in Parse's answer, so that what it let out plus Close's rest is the whole answer,
// whatever the model writes (FuzzStreamParse holds the two equal):
//
//   - The reasoning, when thinking was asked for and the completion opens (after whitespace)
//     with the start marker Parse looks for first: the text after it, up to any suffix that may
//     begin an end marker and less trailing whitespace (the final reasoning is stripped). A
//     thought the model never closes has no reasoning in the whole parse (granite-io's rule):
//     what was let out stays, and the whole answer's ParseError says why it is content there.
//     A completion that opens otherwise is held whole until Close, as is one whose thought ends
//     with a marker a later one may replace (3.2's "Here's my response:", since Parse prefers a
//     "Here is my response:" anywhere after it).
//   - The answer: the text after the thought (or all of it) runs through the steps of Parse's
//     answer as passes, each fed what the one before let out and letting out what no
//     continuation can change: Granite 3.3's <response> section (the answer must open with it;
//     otherwise a later one would replace what came before, and the answer is held), a lead that
//     may be a tool call (held whole), the cut at the first section header, and the removal of
//     citation markers, plugin tokens and stray document ids. What the last pass lets out goes
//     out but for trailing whitespace, which a marker or the final strip may remove.
//
// It holds the completion's text (Close parses it whole, as Parse does an unstreamed answer;
// the caller bounds it: granitestage at its MaxAnswerBytes), what it let out of the answer, and a
// few bytes per pass (a marker that may be completing: its head, digits and tail).
type stream struct {
	p   *Processor
	req *ChatRequest

	text  strings.Builder
	state int

	// The thought: text[reasonAt:] up to the first end marker. text[rFrom:rTo] was let out
	// (rFrom -1: nothing yet); runes were classified up to rScan, and rSpace starts the
	// trailing whitespace (-1: none).
	reasonAt, scanned         int
	rFrom, rTo, rScan, rSpace int
	fed                       int // text[:fed] went into the answer's passes
	passes                    []pass
	buf                       [2][]byte // the passes' input and output, reused
	hold                      bool      // a pass found that the answer is known only at Close
	answer                    strings.Builder
	aOut, aScan, aSpace       int // answer[:aOut] was let out; aScan, aSpace as rScan, rSpace
}

// ParseStream returns an OutputStream for one completion of req (nil: a plain chat request).
func (p *Processor) ParseStream(req *ChatRequest) OutputStream {
	if req == nil {
		req = &ChatRequest{}
	}
	return &stream{p: p, req: req, rFrom: -1, rSpace: -1, aSpace: -1}
}

func (s *stream) startMarkers() []string {
	if s.p.version == V33 {
		return cotStart33
	}
	return cotStart32
}

func (s *stream) endMarkers() []string {
	if s.p.version == V33 {
		return cotEnd33
	}
	return cotEnd32
}

func (s *stream) Write(piece string) Delta {
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
			d.Reasoning = s.stepReason()
		case stContent:
			d.Content = s.stepContent()
		}
		if s.state == before {
			return d
		}
	}
}

// decide picks the state from how the completion opens.
func (s *stream) decide() {
	t := s.text.String()
	if !s.req.Thinking {
		s.state, s.passes = stContent, s.answerPasses(false)
		return
	}
	lead := strings.TrimLeftFunc(t, isPySpace)
	starts := s.startMarkers()
	switch {
	case strings.HasPrefix(lead, starts[0]):
		// Parse takes the first occurrence of its first marker: this one.
		s.state, s.reasonAt = stReason, len(t)-len(lead)+len(starts[0])
		s.scanned, s.rScan = s.reasonAt, s.reasonAt
	case lead == "" || anyHasPrefix(starts, lead) || !utf8.FullRuneInString(lead):
		// may still become the marker (or whitespace before it)
	default:
		// No marker, or one Parse may pass over for a later one: known only at Close.
		s.state = stHold
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

func longest(ms []string) int {
	n := 0
	for _, m := range ms {
		n = max(n, len(m))
	}
	return n
}

// stepReason lets out reasoning, or moves to the answer when an end marker is complete. It
// searches only text it has not searched, so a long thought costs linear time.
func (s *stream) stepReason() string {
	t := s.text.String()
	ends := s.endMarkers()
	from := max(s.reasonAt, s.scanned-longest(ends)+1)
	end, which := -1, 0
	for i, m := range ends {
		if j := strings.Index(t[from:], m); j >= 0 && (end < 0 || from+j < end) {
			end, which = from+j, i
		}
	}
	s.scanned = len(t)
	safe := len(t)
	if end >= 0 {
		safe = end
	} else {
		// Hold back a suffix that may begin an end marker.
		for i := max(from, len(t)-longest(ends)+1); i < len(t); i++ {
			if anyHasPrefix(ends, t[i:]) {
				safe = i
				break
			}
		}
	}
	out := s.letReasoning(t, safe)
	switch {
	case end < 0:
	case which > 0 || end == s.reasonAt:
		// Parse prefers the first marker wherever it comes, which it still may; and an end
		// right at the start is no split at all.
		s.state = stHold
	default:
		s.state, s.fed, s.passes = stContent, end+len(ends[which]), s.answerPasses(true)
	}
	return out
}

// letReasoning lets out the thought up to safe, but for its leading and trailing whitespace.
func (s *stream) letReasoning(t string, safe int) string {
	for s.rScan < safe {
		space, n, ok := runeSpace(t[s.rScan:safe], isPySpace)
		if !ok {
			break // a rune cut in two: it may be whitespace
		}
		switch {
		case !space:
			if s.rFrom < 0 {
				s.rFrom, s.rTo = s.rScan, s.rScan
			}
			s.rSpace = -1
		case s.rFrom >= 0 && s.rSpace < 0:
			s.rSpace = s.rScan
		}
		s.rScan += n
	}
	end := s.rScan
	if s.rSpace >= 0 {
		end = s.rSpace
	}
	if s.rFrom < 0 || end <= s.rTo {
		return ""
	}
	out := t[s.rTo:end]
	s.rTo = end
	return out
}

// runeSpace classifies the rune s starts with: whether space says it is whitespace, and its
// length; ok false when s holds only the start of a rune.
func runeSpace(s string, space func(rune) bool) (isSpace bool, n int, ok bool) {
	if c := s[0]; c < utf8.RuneSelf {
		return space(rune(c)), 1, true
	}
	if !utf8.FullRuneInString(s) {
		return false, 0, false
	}
	r, n := utf8.DecodeRuneInString(s)
	return space(r), n, true
}

// answerPasses are the steps of Parse's answer for this request, from the text after the
// thought (afterThought) or the whole completion.
func (s *stream) answerPasses(afterThought bool) []pass {
	var ps []pass
	if afterThought && s.p.version == V33 {
		// responseSection, then strings.TrimSpace
		ps = append(ps, &responseGate{gate{hold: &s.hold}}, newCut("</response>"), &trimLeft{space: unicode.IsSpace})
	}
	if len(s.req.Tools) > 0 {
		ps = append(ps, &toolGate{gate{hold: &s.hold}})
	}
	switch {
	case s.p.version == V32:
		ps = append(ps, newCut(citeHeader32, hallucHeader32), &remove{pre: "<co>", post: "</co>", space: true},
			&trimLeft{space: isPySpace})
	case s.req.Controls != nil:
		ps = append(ps, newCut(citeHeader33, hallucHeader33),
			&remove{pre: pluginStart}, &remove{pre: pluginEnd}, &remove{pre: pluginStart}, &remove{pre: pluginEnd},
			&remove{pre: `<|start_of_cite|>{"document_id": "`, post: `"}<|end_of_cite|>`}, &trimLeft{space: isPySpace})
	default:
		ps = append(ps, &remove{pre: ` {"document_id": "`, post: `"}`}, newCut(`{"id": "citation"}`, `{"id": "hallucination"}`))
	}
	return ps
}

// stepContent runs the text not yet fed through the answer's passes and lets out what the
// last one let out, but for trailing whitespace.
func (s *stream) stepContent() string {
	t := s.text.String()
	if s.fed >= len(t) {
		return ""
	}
	data, spare := append(s.buf[0][:0], t[s.fed:]...), s.buf[1]
	s.fed = len(t)
	for _, p := range s.passes {
		out := p.feed(spare[:0], data)
		data, spare = out, data
	}
	s.buf[0], s.buf[1] = data, spare
	if s.hold {
		s.state = stHold
		return ""
	}
	s.answer.Write(data)
	a := s.answer.String()
	for s.aScan < len(a) {
		space, n, ok := runeSpace(a[s.aScan:], isPySpace)
		if !ok {
			break
		}
		switch {
		case !space:
			s.aSpace = -1
		case s.aSpace < 0:
			s.aSpace = s.aScan
		}
		s.aScan += n
	}
	end := s.aScan
	if s.aSpace >= 0 {
		end = s.aSpace
	}
	if end <= s.aOut {
		return ""
	}
	out := a[s.aOut:end]
	s.aOut = end
	return out
}

func (s *stream) Close(stopReason string) (Delta, AssistantMessage, string) {
	t := s.text.String()
	msg := s.p.parseOne(Generation{Text: t, StopReason: stopReason}, s.req)
	var d Delta
	var why []string
	sent := ""
	if s.rFrom >= 0 {
		sent = t[s.rFrom:s.rTo]
	}
	switch r := msg.ReasoningContent; {
	case r != nil && strings.HasPrefix(*r, sent):
		d.Reasoning = (*r)[len(sent):]
	case r == nil && msg.ParseError != "":
		// A thought never closed: the whole parse has its text as content, and says why.
	case sent != "":
		why = append(why, "the streamed reasoning is not the whole answer's")
	}
	if sent := s.answer.String()[:s.aOut]; strings.HasPrefix(msg.Content, sent) {
		d.Content = msg.Content[len(sent):]
	} else {
		why = append(why, "the streamed content is not the whole answer's")
	}
	return d, msg, strings.Join(why, "; ")
}
