package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/stage/granitestage"
)

// toolCallDelta is a tool call as a chat message carries it (whole, its place in the list is its
// index) or as a chat chunk's delta carries it (with its index; arguments may come in pieces).
type toolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatResult gathers one choice's assistant message, from a whole answer's message or from the
// deltas of a stream, for the chat_result output.
type chatResult struct {
	content, reasoning []byte
	hasReasoning       bool
	tools              []toolCallOut
	// Granite's members, as the stage wrote them (the last non-null one wins: a stream sends
	// them once, on its finish chunk).
	citations, documents, hallucinations json.RawMessage
	parseErrors                          []string
}

type toolCallOut struct {
	ID, Type string
	Function struct{ Name, Arguments string }
}

// add merges a message or a delta into r and returns how many bytes r grew by (what the caller
// bounds). A member of the wrong type is an error, as is a tool call index out of
// [0, maxChoices): it would size the list.
func (r *chatResult) add(d *delta) (int, error) {
	n := 0
	if d.Content != nil {
		r.content = append(r.content, *d.Content...)
		n += len(*d.Content)
	}
	var reasoning, perr *string
	var tools []toolCallDelta
	for _, m := range []struct {
		name string
		raw  json.RawMessage
		dst  any
	}{{"reasoning_content", d.ReasoningContent, &reasoning}, {"tool_calls", d.ToolCalls, &tools}, {"parse_error", d.ParseError, &perr}} {
		if len(m.raw) > 0 {
			if err := json.Unmarshal(m.raw, m.dst); err != nil {
				return n, fmt.Errorf("a message whose %s cannot be read: %w", m.name, err)
			}
		}
	}
	if reasoning != nil {
		r.reasoning = append(r.reasoning, *reasoning...)
		r.hasReasoning = true
		n += len(*reasoning)
	}
	for i := range tools {
		tc := &tools[i]
		x := i
		if tc.Index != nil {
			x = *tc.Index
		}
		if x < 0 || x >= maxChoices {
			return n, fmt.Errorf("tool call index %d is out of range [0, %d)", x, maxChoices)
		}
		for len(r.tools) <= x {
			r.tools = append(r.tools, toolCallOut{Type: "function"})
			n += int(unsafe.Sizeof(toolCallOut{})) // what an index alone makes it hold
		}
		t := &r.tools[x]
		if tc.ID != "" {
			t.ID = tc.ID
		}
		if tc.Type != "" {
			t.Type = tc.Type
		}
		if tc.Function.Name != "" {
			t.Function.Name = tc.Function.Name
		}
		t.Function.Arguments += tc.Function.Arguments
		n += len(tc.ID) + len(tc.Type) + len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	for _, m := range []struct {
		dst *json.RawMessage
		src json.RawMessage
	}{{&r.citations, d.Citations}, {&r.documents, d.Documents}, {&r.hallucinations, d.Hallucinations}} {
		if len(m.src) > 0 && !bytes.Equal(m.src, []byte("null")) {
			*m.dst = m.src
			n += len(m.src)
		}
	}
	if perr != nil && *perr != "" {
		r.parseErrors = append(r.parseErrors, *perr)
		n += len(*perr)
	}
	return n, nil
}

// json encodes r as its chat_result element: the assistant message as the Granite stage answers
// it on /v1/chat/completions, with parse_error when the model's output could not be parsed. The
// content is null only for an answer that is tool calls and nothing else, as the stage answers
// it. Written by hand: Granite's members pass as the stage wrote them, not decoded and encoded
// again (BenchmarkChatResult).
func (r *chatResult) json() []byte {
	b := make([]byte, 0, 128+len(r.content)+len(r.reasoning)+len(r.citations)+len(r.documents)+len(r.hallucinations))
	b = append(b, `{"role":"assistant","content":`...)
	if len(r.content) > 0 || len(r.tools) == 0 {
		b = tensor.AppendJSONString(b, r.content)
	} else {
		b = append(b, "null"...)
	}
	if r.hasReasoning {
		b = append(b, `,"reasoning_content":`...)
		b = tensor.AppendJSONString(b, r.reasoning)
	}
	if len(r.tools) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, t := range r.tools {
			if i > 0 {
				b = append(b, ',')
			}
			id := t.ID
			if id == "" {
				id = "call_" + strconv.Itoa(i)
			}
			b = append(b, `{"id":`...)
			b = tensor.AppendJSONString(b, id)
			b = append(b, `,"type":`...)
			b = tensor.AppendJSONString(b, t.Type)
			b = append(b, `,"function":{"name":`...)
			b = tensor.AppendJSONString(b, t.Function.Name)
			b = append(b, `,"arguments":`...)
			b = tensor.AppendJSONString(b, t.Function.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	for _, m := range []struct {
		key string
		raw json.RawMessage
	}{{`,"citations":`, r.citations}, {`,"documents":`, r.documents}, {`,"hallucinations":`, r.hallucinations}} {
		if len(m.raw) > 0 {
			b = append(b, m.key...)
			// Valid JSON (the decoder took it), but it may hold bytes that are not UTF-8, which
			// strict parsers refuse: only inside strings, where U+FFFD keeps it valid.
			if utf8.Valid(m.raw) {
				b = append(b, m.raw...)
			} else {
				b = append(b, bytes.ToValidUTF8(m.raw, []byte("\ufffd"))...)
			}
		}
	}
	if len(r.parseErrors) > 0 {
		b = append(b, `,"parse_error":`...)
		b = tensor.AppendJSONString(b, strings.Join(r.parseErrors, "; "))
	}
	return append(b, '}')
}

// headerParseErrors reads the parse problems the Granite stage reports in a header of a whole
// (or replayed) answer, one value "choice <i>: <problem>" per choice, and calls add for each
// one whose choice index is in range; other values are ignored.
func headerParseErrors(h http.Header, add func(choice int, problem string)) {
	for _, v := range h.Values(granitestage.ParseErrorHeader) {
		rest, ok := strings.CutPrefix(v, "choice ")
		if !ok {
			continue
		}
		num, problem, ok := strings.Cut(rest, ": ")
		i, err := strconv.Atoi(num)
		if !ok || err != nil || i < 0 || i >= maxChoices || problem == "" {
			continue
		}
		add(i, strings.ToValidUTF8(problem, "\ufffd"))
	}
}

// validKwargs checks the chat_template_kwargs input (one JSON object, UTF-8) and returns it
// compacted, to be written into the chat request as it is.
func validKwargs(raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, invalid("%s must be UTF-8 JSON", InputChatTemplateKwargs)
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return nil, invalid("%s must be a JSON object", InputChatTemplateKwargs)
	}
	var c bytes.Buffer
	if err := json.Compact(&c, t); err != nil {
		return nil, invalid("%s is not valid JSON: %v", InputChatTemplateKwargs, err)
	}
	return c.Bytes(), nil
}
