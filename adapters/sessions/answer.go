package sessions

import (
	"bytes"
	"encoding/json"
	"errors"
)

// eventSplitter cuts a stream's bytes, as they pass by, into server-sent events' data, the way
// pipeline.Events reads them (lines end with "\n", trailing "\r"s are dropped, "data:" lines of
// one event are joined with "\n", comments and other fields are skipped), without holding the
// stream up. A line longer than limit, or an event of type error, fails it.
type eventSplitter struct {
	limit  int
	line   []byte // the current line, up to its "\n"
	data   []byte // the current event's data
	have   bool   // the current event has a data line
	done   bool   // "[DONE]" came
	failed error
	emit   func(data []byte) error
}

var errEventTooLong = errors.New("sessions: a streamed event is over the bound")

// write takes the next bytes of the stream.
func (s *eventSplitter) write(p []byte) {
	for len(p) > 0 && s.failed == nil {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.line = append(s.line, p...)
			if len(s.line) > s.limit {
				s.failed = errEventTooLong
			}
			return
		}
		s.line = append(s.line, p[:i]...)
		p = p[i+1:]
		if len(s.line) > s.limit {
			s.failed = errEventTooLong
			return
		}
		s.endLine(bytes.TrimRight(s.line, "\r"))
		s.line = s.line[:0]
	}
}

// end is the stream's end: an event not closed by a blank line still counts, as
// pipeline.Events has it.
func (s *eventSplitter) end() {
	if s.failed == nil && len(s.line) > 0 {
		s.endLine(bytes.TrimRight(s.line, "\r"))
	}
	s.endLine(nil)
}

func (s *eventSplitter) endLine(line []byte) {
	switch {
	case len(line) == 0:
		if !s.have {
			return
		}
		if string(s.data) == "[DONE]" {
			s.done = true
		} else if !s.done {
			if err := s.emit(s.data); err != nil {
				s.failed = err
			}
		}
		s.data, s.have = s.data[:0], false
	case line[0] == ':': // a comment
	default:
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if s.have {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			s.have = true
			if len(s.data) > s.limit {
				s.failed = errEventTooLong
			}
		case "event":
			if string(value) == "error" {
				s.failed = errors.New("sessions: the stream carried an error event")
			}
		}
	}
}

// assistantMessage is the message of choice 0 of a whole chat completion response, ready to be
// sent back as history: its role, content, tool calls, name, refusal and legacy function call,
// and nothing else (reasoning is not fed back to models, and servers reject fields of answers,
// such as annotations, in requests). ok is false when the response has no such choice with a
// finish_reason.
func assistantMessage(resp []byte) (json.RawMessage, bool) {
	var r struct {
		Choices []struct {
			Index        int                        `json:"index"`
			Message      map[string]json.RawMessage `json:"message"`
			FinishReason *string                    `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(resp, &r) != nil {
		return nil, false
	}
	for _, c := range r.Choices {
		if c.Index != 0 {
			continue
		}
		if c.FinishReason == nil || *c.FinishReason == "" || c.Message == nil {
			return nil, false
		}
		// Written by hand, role first: role() reads such a message without decoding it.
		content, ok := c.Message["content"]
		if !ok {
			content = json.RawMessage("null")
		}
		b := append([]byte(`{"role":"assistant","content":`), content...)
		for _, k := range []string{"tool_calls", "name", "refusal", "function_call"} {
			if v, ok := c.Message[k]; ok && !isEmpty(v) {
				b = append(b, `,"`+k+`":`...)
				b = append(b, v...)
			}
		}
		return append(b, '}'), true
	}
	return nil, false
}

// isEmpty: null, or an empty array.
func isEmpty(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if string(v) == "null" {
		return true
	}
	if len(v) >= 2 && v[0] == '[' {
		return len(bytes.TrimSpace(v[1:len(v)-1])) == 0
	}
	return false
}
