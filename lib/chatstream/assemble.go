// Package chatstream converts between OpenAI's streamed and whole answers: an Assembler rebuilds
// the response a non-streamed request would have got from a stream's events (the response cache
// stores it, chat sessions append its message), and Replay splits a stored response back into
// the events a model would have streamed (a cache hit on a streamed request).
//
// Both speak chat completions (/v1/chat/completions: role, content, reasoning_content, tool
// calls) and text completions (/v1/completions). Log probabilities are not carried: an assembled
// response has none, so a caller must not serve it to a request that asked for them.
package chatstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/openaiwire"
)

// Path names the two APIs.
const (
	ChatPath       = "/v1/chat/completions"
	CompletionPath = "/v1/completions"
)

// maxChoices bounds the choices an Assembler keeps: a stream naming a higher index is refused,
// so an upstream cannot make it allocate per index.
const maxChoices = 128

// maxToolCalls bounds the tool calls of one choice, for the same reason.
const maxToolCalls = 128

// ErrTooLarge reports a stream whose text passed the Assembler's bound: the rest is not kept,
// and Result reports it incomplete.
var ErrTooLarge = errors.New("chatstream: the answer is larger than the bound")

// Assembler rebuilds a whole response from a stream's events. It is not safe for concurrent use.
type Assembler struct {
	chat     bool
	maxBytes int
	size     int // text bytes kept so far
	failed   error

	id, model   string
	fingerprint openaiwire.Raw
	created     int64
	choices     []*choice
	usage       json.RawMessage
}

type choice struct {
	seen      bool
	role      string
	content   strings.Builder
	reasoning strings.Builder
	tools     []*toolCall
	finish    string
	stop      json.RawMessage // vLLM's stop_reason, kept when present
}

type toolCall struct {
	id, typ, name string
	args          strings.Builder
}

// NewAssembler returns an Assembler for a stream of the API at path (ChatPath or
// CompletionPath) keeping at most maxBytes of text (content, reasoning and tool arguments
// together); maxBytes <= 0 means 1 MiB.
func NewAssembler(path string, maxBytes int) *Assembler {
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	return &Assembler{chat: path != CompletionPath, maxBytes: maxBytes}
}

// Add takes one event's data: the JSON after "data: " (not the closing [DONE]). An event that
// is not such a chunk, or one past the bound, is an error, and the Assembler keeps failing.
func (a *Assembler) Add(data []byte) error {
	if a.failed != nil {
		return a.failed
	}
	c, err := openaiwire.DecodeChunk(data)
	if err != nil {
		a.failed = fmt.Errorf("chatstream: an event is not a completion chunk: %w", err)
		return a.failed
	}
	if a.id == "" {
		a.id, a.model, a.created, a.fingerprint = c.ID, c.Model, c.Created, c.SystemFingerprint
	}
	if c.Usage != nil {
		a.usage = append(a.usage[:0], c.Usage.Raw...)
	}
	for i := range c.Choices {
		if err := a.addChoice(&c.Choices[i]); err != nil {
			a.failed = err
			return err
		}
	}
	return nil
}

func (a *Assembler) addChoice(cc *openaiwire.ChunkChoice) error {
	if cc.Index < 0 || cc.Index >= maxChoices {
		return fmt.Errorf("chatstream: choice index %d out of range", cc.Index)
	}
	for len(a.choices) <= cc.Index {
		a.choices = append(a.choices, &choice{})
	}
	ch := a.choices[cc.Index]
	ch.seen = true
	if cc.FinishReason != nil && *cc.FinishReason != "" {
		ch.finish = *cc.FinishReason
	}
	if len(cc.StopReason) > 0 && string(cc.StopReason) != "null" {
		ch.stop = append(ch.stop[:0], cc.StopReason...)
	}
	if !a.chat {
		if cc.Text != nil {
			return a.grow(&ch.content, *cc.Text)
		}
		return nil
	}
	d := cc.Delta
	if d == nil {
		return nil
	}
	if d.Role != "" {
		ch.role = d.Role
	}
	if d.Content != nil {
		if err := a.grow(&ch.content, *d.Content); err != nil {
			return err
		}
	}
	if r := d.ReasoningContent; r != nil { // or vLLM's reasoning (DecodeChunk)
		if err := a.grow(&ch.reasoning, *r); err != nil {
			return err
		}
	}
	for i := range d.ToolCalls {
		td := &d.ToolCalls[i]
		if td.Index < 0 || td.Index >= maxToolCalls {
			return fmt.Errorf("chatstream: tool call index %d out of range", td.Index)
		}
		for len(ch.tools) <= td.Index {
			ch.tools = append(ch.tools, &toolCall{})
		}
		tc := ch.tools[td.Index]
		if td.ID != "" {
			tc.id = td.ID
		}
		if td.Type != "" {
			tc.typ = td.Type
		}
		if td.Function.Name != "" {
			tc.name = td.Function.Name
		}
		if err := a.grow(&tc.args, td.Function.Arguments); err != nil {
			return err
		}
	}
	return nil
}

func (a *Assembler) grow(b *strings.Builder, s string) error {
	a.size += len(s)
	if a.size > a.maxBytes {
		return ErrTooLarge
	}
	b.WriteString(s)
	return nil
}

// Result returns the response a non-streamed request would have got, and whether the stream
// was whole: every event was understood, at least one choice came, every choice from 0 to the
// highest index seen has a finish_reason, and the text stayed within the bound. resp is nil
// when nothing usable came.
func (a *Assembler) Result() (resp []byte, ok bool) {
	if len(a.choices) == 0 {
		return nil, false
	}
	ok = a.failed == nil
	head := openaiwire.Header{ID: a.id, Object: "chat.completion", Created: a.created, Model: a.model,
		SystemFingerprint: a.fingerprint}
	if len(a.usage) > 0 {
		head.Usage = &openaiwire.Usage{Raw: a.usage}
	}
	if a.chat {
		out := openaiwire.ChatCompletion{Header: head}
		for i, ch := range a.choices {
			if !ch.seen || ch.finish == "" {
				ok = false
			}
			m := openaiwire.Message{Role: ch.role}
			if m.Role == "" {
				m.Role = "assistant"
			}
			// A tool-call answer's content is null unless the model also wrote text.
			if ch.content.Len() > 0 || len(ch.tools) == 0 {
				s := ch.content.String()
				m.Content = &s
			}
			if ch.reasoning.Len() > 0 {
				s := ch.reasoning.String()
				m.ReasoningContent = &s
			}
			for _, tc := range ch.tools {
				t := ToolCall{ID: tc.id, Type: tc.typ, Function: Function{Name: tc.name, Arguments: tc.args.String()}}
				if t.Type == "" {
					t.Type = "function"
				}
				m.ToolCalls = append(m.ToolCalls, t)
			}
			out.Choices = append(out.Choices, openaiwire.ChatChoice{Index: i, Message: m, FinishReason: finishOrNil(ch.finish), StopReason: ch.stop})
		}
		return out.AppendJSON(nil, openaiwire.Options{}), ok
	}
	head.Object = "text_completion"
	out := openaiwire.Completion{Header: head}
	for i, ch := range a.choices {
		if !ch.seen || ch.finish == "" {
			ok = false
		}
		out.Choices = append(out.Choices, openaiwire.CompletionChoice{Index: i, Text: ch.content.String(),
			FinishReason: finishOrNil(ch.finish), StopReason: ch.stop})
	}
	return out.AppendJSON(nil, openaiwire.Options{}), ok
}

func finishOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// fingerprint is a system_fingerprint the chat stream has as a string, as the writers want it:
// nil (left out) when empty, else the string as JSON.
func fingerprint(s string) openaiwire.Raw {
	if s == "" {
		return nil
	}
	return jsonwire.AppendString(nil, s, jsonwire.EncodingJSON)
}

// ToolCall is one tool call of an assistant message: openaiwire's, named here too because the
// Granite stage builds its answers' tool calls as chatstream's.
type ToolCall = openaiwire.ToolCall

// Function is a tool call's function and its arguments (a JSON text).
type Function = openaiwire.Function
