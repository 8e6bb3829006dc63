package granite

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
)

var (
	cotStart32 = []string{"Here is my thought process:", "Here's my thought process:"}
	cotEnd32   = []string{"Here is my response:", "Here's my response:"}
	cotStart33 = []string{"<think>"}
	cotEnd33   = []string{"</think>"}
)

// Parse turns the model's completions back into assistant messages (granite-io's
// OutputProcessor.transform), one per completion. req is the request that produced them
// (nil: a plain chat request); it says what to look for: reasoning only when it asked for
// thinking, tool calls only when it offered tools. Parse never fails on model output: what
// cannot be parsed stays in Content, with ParseError saying why.
func (p *Processor) Parse(gens []Generation, req *ChatRequest) []Result {
	if req == nil {
		req = &ChatRequest{}
	}
	out := make([]Result, len(gens))
	for i, g := range gens {
		out[i].NextMessage = p.parseOne(g, req)
	}
	return out
}

func (p *Processor) parseOne(g Generation, req *ChatRequest) AssistantMessage {
	msg := AssistantMessage{Role: RoleAssistant, Raw: g.Text, StopReason: g.StopReason}
	text := g.Text
	thought := ""
	if req.Thinking {
		starts, ends := cotStart32, cotEnd32
		if p.version == V33 {
			starts, ends = cotStart33, cotEnd33
		}
		if reasoning, rest, ok := splitReasoning(text, starts, ends); ok {
			msg.ReasoningContent = &reasoning
			text = rest
			if p.version == V33 {
				if inner, ok := responseSection(text); ok {
					text = strings.TrimSpace(inner)
				}
			}
		} else if thoughtOpen(text, starts, ends) {
			thought = errThoughtOpen
		}
	}

	if len(req.Tools) > 0 {
		if calls, ok := parseToolCalls(text, p.newID); ok {
			msg.ToolCalls = calls
			text = ""
		}
	}

	// Past MaxOutputBytes the sections are not parsed (their parse is not linear in the text);
	// the answer still is, as it is for a streamed answer of any length.
	long := len(g.Text) > MaxOutputBytes
	var parsed parsedOutput
	var err error
	if p.version == V32 {
		parsed, err = parse32(text, req.Documents, long)
	} else {
		parsed, err = parse33(text, req, long)
	}
	msg.Content = parsed.response
	if err != nil {
		msg.ParseError = joinReasons(thought, err.Error())
		return msg
	}
	msg.ParseError = thought
	msg.Citations = parsed.citations
	msg.Documents = parsed.docs
	msg.Hallucinations = parsed.hallucinations
	return msg
}

// errThoughtOpen is the ParseError of a thought the model never closed (cut off by max_tokens,
// say): granite-io then splits nothing and the whole text is the content, which a stream that
// let the thought out as reasoning on the way cannot take back; the error says why the two differ.
const errThoughtOpen = "the thought is not closed: no end marker follows its start marker, so the text is the content"

// thoughtOpen reports whether text has a reasoning start marker and no end marker after it.
func thoughtOpen(text string, starts, ends []string) bool {
	_, s1 := findFirst(text, starts)
	if s1 < 0 {
		return false
	}
	for _, m := range ends {
		if strings.Contains(text[s1:], m) {
			return false
		}
	}
	return true
}

func joinReasons(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// splitReasoning finds the first start marker and the first end marker (each list tried in
// order); only when the end comes after the start is the text split. Text before the start
// marker stays in the answer, untrimmed, as granite-io keeps it.
func splitReasoning(text string, starts, ends []string) (reasoning, rest string, ok bool) {
	s0, s1 := findFirst(text, starts)
	e0, e1 := findFirst(text, ends)
	if s0 < 0 || e0 < 0 || e0 <= s1 {
		return "", text, false
	}
	return pyStrip(text[s1:e0]), text[:s0] + pyStrip(text[e1:]), true
}

func findFirst(text string, markers []string) (int, int) {
	for _, m := range markers {
		if i := strings.Index(text, m); i >= 0 {
			return i, i + len(m)
		}
	}
	return -1, -1
}

// responseSection returns what lies between the first <response> and the first </response>, as
// granite-io takes it: only when that close starts after that open ends. A section the model
// never closed (cut off by max_tokens) runs to the end of the text, where granite-io would keep
// the text whole, tag and all: a stream lets the section out as the model writes it, and the
// whole answer must be what the stream sent.
func responseSection(text string) (string, bool) {
	const open, close = "<response>", "</response>"
	o := strings.Index(text, open)
	if o < 0 {
		return "", false
	}
	c := strings.Index(text, close)
	switch {
	case c < 0:
		return text[o+len(open):], true
	case c <= o+len(open):
		return "", false
	}
	return text[o+len(open) : c], true
}

// parseToolCalls reads "<|tool_call|>[...]", "<tool_call>[...]" or a bare "[...]" list of
// {"name", "arguments", "id"?} objects. granite-io accepts only a leading "<tool_call>", which
// misses what the model is told to write and what servers that strip special tokens send;
// this follows vLLM's granite tool parser instead. Anything else is not a tool call.
func parseToolCalls(text string, newID func() string) ([]ToolCall, bool) {
	t := pyStrip(text)
	t = strings.TrimPrefix(t, "<|tool_call|>")
	t = strings.TrimPrefix(t, "<tool_call>")
	if !strings.HasPrefix(t, "[") {
		return nil, false
	}
	var raw []struct {
		ID        *string         `json:"id"`
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(t), &raw); err != nil || len(raw) == 0 {
		return nil, false
	}
	calls := make([]ToolCall, len(raw))
	for i, r := range raw {
		if r.Name == nil {
			return nil, false
		}
		args := bytes.TrimSpace(r.Arguments)
		if len(args) > 0 && string(args) != "null" && args[0] != '{' {
			return nil, false // granite-io's arguments are a dict or None
		}
		if string(args) == "null" {
			args = nil
		}
		calls[i] = ToolCall{Name: *r.Name, Arguments: json.RawMessage(args)}
		if r.ID != nil {
			calls[i].ID = *r.ID
		} else {
			calls[i].ID = newID()
		}
	}
	return calls, true
}

func randomUUID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// pyStrip is Python's str.strip(): Unicode whitespace plus the ASCII separators \x1c-\x1f.
func pyStrip(s string) string {
	return strings.TrimFunc(s, isPySpace)
}

func isPySpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680,
		0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}
