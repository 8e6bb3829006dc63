package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/openaiwire"
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

// toolCallOut is a tool call as chat_result writes it.
type toolCallOut = openaiwire.ToolCall

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
// it. The message is openaiwire's with the tensor writer's escaping (MinimalShort); Granite's
// members pass as the stage wrote them, not decoded and encoded again (BenchmarkChatResult).
func (r *chatResult) json() []byte {
	m := openaiwire.Message{Role: "assistant"}
	// The texts are r's bytes, not copies: they are only read, by the write below, and r is not
	// written while it runs.
	if len(r.content) > 0 || len(r.tools) == 0 {
		content := unsafe.String(unsafe.SliceData(r.content), len(r.content))
		m.Content = &content
	}
	if r.hasReasoning {
		reasoning := unsafe.String(unsafe.SliceData(r.reasoning), len(r.reasoning))
		m.ReasoningContent = &reasoning
	}
	if len(r.tools) > 0 {
		m.ToolCalls = slices.Clone(r.tools) // the ids defaulted in the copy: r may be added to again
		for i := range m.ToolCalls {
			if m.ToolCalls[i].ID == "" {
				m.ToolCalls[i].ID = "call_" + strconv.Itoa(i)
			}
		}
	}
	size := 128 + len(r.content) + len(r.reasoning) + len(r.citations) + len(r.documents) + len(r.hallucinations)
	b := m.AppendJSON(make([]byte, 0, size), openaiwire.Options{Esc: jsonwire.MinimalShort})
	// Granite's members follow the message's own, as the stage wrote them. They are written in
	// place of the object's closing brace rather than through Message.Extra, which would copy
	// them once more: they are most of the element's bytes.
	b = b[:len(b)-1]
	for _, x := range []struct {
		key string
		raw json.RawMessage
	}{{`,"citations":`, r.citations}, {`,"documents":`, r.documents}, {`,"hallucinations":`, r.hallucinations}} {
		if len(x.raw) > 0 {
			b = append(b, x.key...)
			// Valid JSON (the decoder took it), but it may hold bytes that are not UTF-8, which
			// strict parsers refuse: only inside strings, where U+FFFD keeps it valid.
			if utf8.Valid(x.raw) {
				b = append(b, x.raw...)
			} else {
				b = append(b, bytes.ToValidUTF8(x.raw, []byte("\ufffd"))...)
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
