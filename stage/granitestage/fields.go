package granitestage

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/infergate/infergate/lib/granite"
)

// scanFields reads an object's members as json.Unmarshal into a map of raw values would, each
// value the input's own bytes; anything unusual (a non-ASCII name, deep nesting, an error) is
// false, for encoding/json. The request's own members come from its parsed view (Request.Fields),
// shared with the other stages; this reads objects inside it (chat_template_kwargs).
func scanFields(body []byte) (map[string]json.RawMessage, bool) {
	s := newScan(body)
	f := make(map[string]json.RawMessage, 8)
	ok := s.object(func(name []byte) bool {
		for _, c := range name {
			if c >= utf8.RuneSelf {
				return false // encoding/json's keys replace invalid UTF-8
			}
		}
		v, ok := s.rawValue()
		f[string(name)] = v
		return ok
	})
	if !ok || !s.end() {
		return nil, false
	}
	return f, true
}

var (
	messageNames  = []string{"role", "content", "tool_calls", "tool_call_id"}
	documentNames = []string{"text", "doc_id", "score"}
	controlNames  = []string{"citations", "hallucinations", "length", "originality"}
)

// scanControls reads a request's controls object as json.Unmarshal into granite.Controls
// would; anything unusual is false (left to encoding/json).
func scanControls(raw []byte) (*granite.Controls, bool) {
	s := newScan(raw)
	c := &granite.Controls{}
	ok := s.known(controlNames, func(f int) bool {
		if f == 2 {
			return s.stringPtr(&c.Length)
		}
		if f == 3 {
			return s.stringPtr(&c.Originality)
		}
		b := &c.Citations
		if f == 1 {
			b = &c.Hallucinations
		}
		if s.ReadNull() {
			return true
		}
		v, err := s.ReadBool()
		*b = v
		return err == nil
	})
	if !ok || !s.end() {
		return nil, false
	}
	return c, true
}

// scanMessages reads a request's messages as json.Unmarshal into []wireMessage would, for the
// common shapes: a message with tool calls, or anything unusual, is false (left to
// encoding/json).
func scanMessages(raw []byte) ([]wireMessage, bool) {
	s := newScan(raw)
	out := make([]wireMessage, 0, 4)
	ok := objects(&s, &out, messageNames, func(m *wireMessage, f int) bool {
		switch f {
		case 0:
			return s.stringValue(&m.Role)
		case 1:
			var ok bool
			m.Content, ok = s.rawValue()
			return ok
		case 2:
			return s.ReadNull()
		}
		return s.stringValue(&m.ToolCallID)
	})
	if !ok || !s.end() {
		return nil, false
	}
	return out, true
}

// scanDocuments reads a request's documents as json.Unmarshal into []granite.Document would,
// for the common shapes; anything unusual is false (left to encoding/json).
func scanDocuments(raw []byte) ([]granite.Document, bool) {
	s := newScan(raw)
	out := make([]granite.Document, 0, 4)
	ok := objects(&s, &out, documentNames, func(d *granite.Document, f int) bool {
		if f == 0 {
			return s.stringValue(&d.Text)
		}
		if s.ReadNull() {
			return true
		}
		if f == 1 {
			v, ok := s.rawValue()
			id := &granite.DocID{}
			if !ok || id.UnmarshalJSON(v) != nil {
				return false
			}
			d.DocID = id
			return true
		}
		t, err := s.ReadNumber()
		if err != nil {
			return false
		}
		x, err := strconv.ParseFloat(string(t.Raw(s.Input())), 64)
		if err != nil {
			return false
		}
		d.Score = &x
		return true
	})
	if !ok || !s.end() {
		return nil, false
	}
	return out, true
}
