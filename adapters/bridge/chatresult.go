package bridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/infergate/infergate/adapters/llm/granite/granitestage"
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
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatResultJSON is one chat_result element: the assistant message as the Granite stage answers
// it on /v1/chat/completions, with parse_error when the model's output could not be parsed.
type chatResultJSON struct {
	Role             string          `json:"role"`
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallOut   `json:"tool_calls,omitempty"`
	Citations        json.RawMessage `json:"citations,omitempty"`
	Documents        json.RawMessage `json:"documents,omitempty"`
	Hallucinations   json.RawMessage `json:"hallucinations,omitempty"`
	ParseError       string          `json:"parse_error,omitempty"`
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
			n += 32
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

// json encodes r as its chat_result element. The content is null only for an answer that is
// tool calls and nothing else, as the stage answers it.
func (r *chatResult) json() ([]byte, error) {
	out := chatResultJSON{Role: "assistant", ToolCalls: r.tools, Citations: r.citations, Documents: r.documents,
		Hallucinations: r.hallucinations, ParseError: strings.Join(r.parseErrors, "; ")}
	if len(r.content) > 0 || len(r.tools) == 0 {
		s := string(r.content)
		out.Content = &s
	}
	if r.hasReasoning {
		s := string(r.reasoning)
		out.ReasoningContent = &s
	}
	for i := range out.ToolCalls {
		if out.ToolCalls[i].ID == "" {
			out.ToolCalls[i].ID = "call_" + strconv.Itoa(i)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // Granite's outputs are full of <...>: keep them readable
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("encoding chat_result: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
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
