package respcache

// A stand-in for adapters/llm/chatstream (the lead's), with its API, until it is on main. At
// merge this file becomes:
//
//	type assembler = chatstream.Assembler
//	type replayOptions = chatstream.ReplayOptions
//
//	func newAssembler(path string, maxBytes int) *assembler { return chatstream.NewAssembler(path, maxBytes) }
//	func replay(path string, resp []byte, o replayOptions) ([][]byte, error) { return chatstream.Replay(path, resp, o) }

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// assembler rebuilds a streamed answer as the non-streamed response JSON.
type assembler struct {
	chat     bool
	maxBytes int
	n        int
	id       string
	object   string
	model    string
	created  int64
	usage    json.RawMessage
	choices  map[int]*asmChoice
}

type asmChoice struct {
	role, text strings.Builder
	finish     *string
	tools      map[int]*asmTool
}

type asmTool struct {
	id, typ, name string
	args          strings.Builder
}

func newAssembler(path string, maxBytes int) *assembler {
	return &assembler{chat: strings.HasSuffix(path, "/chat/completions"), maxBytes: maxBytes, choices: map[int]*asmChoice{}}
}

type streamChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Error   json.RawMessage `json:"error"`
	Usage   json.RawMessage `json:"usage"`
	Choices []struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

var errAsmTooLarge = errors.New("chatstream: assembled answer over its bound")

func (a *assembler) Add(data []byte) error {
	var c streamChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("chatstream: chunk: %w", err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return errors.New("chatstream: an error event")
	}
	a.n += len(data)
	if a.n > a.maxBytes {
		return errAsmTooLarge
	}
	if a.id == "" {
		a.id, a.object, a.model, a.created = c.ID, c.Object, c.Model, c.Created
	}
	if len(c.Usage) > 0 && string(c.Usage) != "null" {
		a.usage = append(a.usage[:0], c.Usage...)
	}
	for _, ch := range c.Choices {
		if ch.Index < 0 || ch.Index > 127 {
			return errors.New("chatstream: choice index out of range")
		}
		s := a.choices[ch.Index]
		if s == nil {
			s = &asmChoice{tools: map[int]*asmTool{}}
			a.choices[ch.Index] = s
		}
		s.role.WriteString(ch.Delta.Role)
		s.text.WriteString(ch.Text)
		s.text.WriteString(ch.Delta.Content)
		for _, tc := range ch.Delta.ToolCalls {
			if tc.Index < 0 || tc.Index > 127 {
				return errors.New("chatstream: tool call index out of range")
			}
			t := a.tools(s, tc.Index)
			if tc.ID != "" {
				t.id = tc.ID
			}
			if tc.Type != "" {
				t.typ = tc.Type
			}
			t.name += tc.Function.Name
			t.args.WriteString(tc.Function.Arguments)
		}
		if ch.FinishReason != nil {
			s.finish = ch.FinishReason
		}
	}
	return nil
}

func (a *assembler) tools(s *asmChoice, i int) *asmTool {
	t := s.tools[i]
	if t == nil {
		t = &asmTool{}
		s.tools[i] = t
	}
	return t
}

func (a *assembler) Result() ([]byte, bool) {
	if len(a.choices) == 0 {
		return nil, false
	}
	idx := make([]int, 0, len(a.choices))
	for i := range a.choices {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	ok := true
	choices := make([]map[string]any, 0, len(idx))
	for _, i := range idx {
		s := a.choices[i]
		if s.finish == nil {
			ok = false
		}
		c := map[string]any{"index": i, "finish_reason": s.finish, "logprobs": nil}
		if a.chat {
			role := s.role.String()
			if role == "" {
				role = "assistant"
			}
			msg := map[string]any{"role": role, "content": s.text.String()}
			if len(s.tools) > 0 {
				var tis []int
				for ti := range s.tools {
					tis = append(tis, ti)
				}
				sort.Ints(tis)
				var calls []map[string]any
				for _, ti := range tis {
					t := s.tools[ti]
					calls = append(calls, map[string]any{"id": t.id, "type": cmpOr(t.typ, "function"),
						"function": map[string]any{"name": t.name, "arguments": t.args.String()}})
				}
				msg["tool_calls"] = calls
			}
			c["message"] = msg
		} else {
			c["text"] = s.text.String()
		}
		choices = append(choices, c)
	}
	obj := "text_completion"
	if a.chat {
		obj = "chat.completion"
	}
	resp := map[string]any{"id": a.id, "object": obj, "created": a.created, "model": a.model, "choices": choices}
	if a.usage != nil {
		resp["usage"] = a.usage
	}
	b, err := json.Marshal(resp)
	return b, ok && err == nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type replayOptions struct {
	ID           string
	Created      int64
	IncludeUsage bool
}

type replayResponse struct {
	Model   string          `json:"model"`
	Usage   json.RawMessage `json:"usage"`
	Choices []struct {
		Index        int             `json:"index"`
		Text         string          `json:"text"`
		FinishReason *string         `json:"finish_reason"`
		Message      json.RawMessage `json:"message"`
	} `json:"choices"`
}

// replay splits resp into the chunks a model would have streamed: the role, the text a word at
// a time, the tool calls, the finish reason, and the usage when asked for.
func replay(path string, resp []byte, o replayOptions) ([][]byte, error) {
	var r replayResponse
	if err := json.Unmarshal(resp, &r); err != nil {
		return nil, fmt.Errorf("chatstream: replay: %w", err)
	}
	chat := strings.HasSuffix(path, "/chat/completions")
	obj := "text_completion"
	if chat {
		obj = "chat.completion.chunk"
	}
	var out [][]byte
	emit := func(choices any, usage json.RawMessage) error {
		m := map[string]any{"id": o.ID, "object": obj, "created": o.Created, "model": r.Model, "choices": choices}
		if usage != nil {
			m["usage"] = usage
		}
		b, err := json.Marshal(m)
		out = append(out, b)
		return err
	}
	for _, c := range r.Choices {
		var msg struct {
			Role      string            `json:"role"`
			Content   *string           `json:"content"`
			ToolCalls []json.RawMessage `json:"tool_calls"`
		}
		text := c.Text
		if chat && len(c.Message) > 0 {
			if err := json.Unmarshal(c.Message, &msg); err != nil {
				return nil, fmt.Errorf("chatstream: replay: %w", err)
			}
			if msg.Content != nil {
				text = *msg.Content
			}
			if err := emit([]any{map[string]any{"index": c.Index, "delta": map[string]any{"role": cmpOr(msg.Role, "assistant"), "content": ""}, "finish_reason": nil}}, nil); err != nil {
				return nil, err
			}
		}
		for _, piece := range words(text) {
			var ch map[string]any
			if chat {
				ch = map[string]any{"index": c.Index, "delta": map[string]any{"content": piece}, "finish_reason": nil}
			} else {
				ch = map[string]any{"index": c.Index, "text": piece, "finish_reason": nil}
			}
			if err := emit([]any{ch}, nil); err != nil {
				return nil, err
			}
		}
		if len(msg.ToolCalls) > 0 {
			var calls []map[string]any
			for i, tc := range msg.ToolCalls {
				var m map[string]any
				if err := json.Unmarshal(tc, &m); err != nil {
					return nil, fmt.Errorf("chatstream: replay: %w", err)
				}
				m["index"] = i
				calls = append(calls, m)
			}
			if err := emit([]any{map[string]any{"index": c.Index, "delta": map[string]any{"tool_calls": calls}, "finish_reason": nil}}, nil); err != nil {
				return nil, err
			}
		}
		last := map[string]any{"index": c.Index, "finish_reason": c.FinishReason}
		if chat {
			last["delta"] = map[string]any{}
		} else {
			last["text"] = ""
		}
		if err := emit([]any{last}, nil); err != nil {
			return nil, err
		}
	}
	if o.IncludeUsage && len(r.Usage) > 0 {
		if err := emit([]any{}, r.Usage); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// words splits s after each run of spaces, as a tokenizer's pieces roughly go.
func words(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s, ' ')
		if i < 0 {
			out = append(out, s)
			break
		}
		for i < len(s) && s[i] == ' ' {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}
