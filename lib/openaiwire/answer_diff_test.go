package openaiwire

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/jsonwire"
)

// The structs below are the writers this package replaced, as they were (tagged structs given
// to json.Marshal), kept as the specification of their bytes: each new writer must write what
// json.Marshal wrote for them. They are test code only.

// lib/chatstream assemble.go: a whole answer assembled from a stream.
type oldChatResponse struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint string          `json:"system_fingerprint,omitempty"`
	Choices           []oldChatChoice `json:"choices"`
	Usage             json.RawMessage `json:"usage,omitempty"`
}

type oldChatChoice struct {
	Index        int             `json:"index"`
	Message      oldMessage      `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

type oldMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

type oldCompletionResponse struct {
	ID                string                `json:"id"`
	Object            string                `json:"object"`
	Created           int64                 `json:"created"`
	Model             string                `json:"model"`
	SystemFingerprint string                `json:"system_fingerprint,omitempty"`
	Choices           []oldCompletionChoice `json:"choices"`
	Usage             json.RawMessage       `json:"usage,omitempty"`
}

type oldCompletionChoice struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

func (c oldChatChoice) MarshalJSON() ([]byte, error) {
	type plain oldChatChoice
	if c.Logprobs == nil {
		c.Logprobs = json.RawMessage("null")
	}
	return json.Marshal(plain(c))
}

func (c oldCompletionChoice) MarshalJSON() ([]byte, error) {
	type plain oldCompletionChoice
	if c.Logprobs == nil {
		c.Logprobs = json.RawMessage("null")
	}
	return json.Marshal(plain(c))
}

// lib/chatstream replay.go: the chunks of a replayed answer.
type oldReplayChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint string            `json:"system_fingerprint,omitempty"`
	Choices           []oldReplayChoice `json:"choices"`
	Usage             json.RawMessage   `json:"usage,omitempty"`
}

type oldReplayChoice struct {
	Index        int             `json:"index"`
	Text         *string         `json:"text,omitempty"`
	Delta        *oldReplayDelta `json:"delta,omitempty"`
	Logprobs     *struct{}       `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

type oldReplayDelta struct {
	Role             string              `json:"role,omitempty"`
	Content          *string             `json:"content,omitempty"`
	ReasoningContent *string             `json:"reasoning_content,omitempty"`
	ToolCalls        []oldReplayToolCall `json:"tool_calls,omitempty"`
}

type oldReplayToolCall struct {
	Index    int      `json:"index"`
	ID       string   `json:"id,omitempty"`
	Type     string   `json:"type,omitempty"`
	Function Function `json:"function"`
}

// stage/tokeninput tokeninput.go and stream.go: a completion's answer and chunks turned into
// a chat completion's, the fingerprint last and the usage typed.
type oldUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

type oldTIMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type oldTIChatChoice struct {
	Index        int             `json:"index"`
	Message      oldTIMessage    `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

type oldTIChatAnswer struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	Choices           []oldTIChatChoice `json:"choices"`
	Usage             *oldUsage         `json:"usage,omitempty"`
	SystemFingerprint json.RawMessage   `json:"system_fingerprint,omitempty"`
}

type oldTIDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type oldTIChunkChoice struct {
	Index        int             `json:"index"`
	Delta        oldTIDelta      `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

type oldTIChunk struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []oldTIChunkChoice `json:"choices"`
	Usage             *oldUsage          `json:"usage,omitempty"`
	SystemFingerprint json.RawMessage    `json:"system_fingerprint,omitempty"`
}

// sample is what one differential case is made of: the strings and the raw value every writer
// puts somewhere, and bits that choose which optional parts are present.
type sample struct {
	id, model, text, reasoning, fp, args string
	raw                                  []byte // a JSON value (or nil): usage, stop_reason, fingerprint
	bits                                 uint64
}

func (s *sample) bit(i uint) bool { return s.bits>>i&1 != 0 }

// rawOr is s.raw when bit i is set and it is JSON, else nil.
func (s *sample) rawOr(i uint) json.RawMessage {
	if s.bit(i) && json.Valid(s.raw) {
		return s.raw
	}
	return nil
}

func (s *sample) ptr(i uint, v string) *string {
	if s.bit(i) {
		return &v
	}
	return nil
}

// checkSame fails unless new is old's json.Marshal.
func checkSame(t *testing.T, what string, old any, got []byte) {
	t.Helper()
	want, err := json.Marshal(old)
	if err != nil {
		t.Fatalf("%s: json.Marshal: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:\nnew %s\nold %s", what, got, want)
	}
}

// checkWriters compares every writer with the struct it replaced on one sample.
func checkWriters(t *testing.T, s *sample) {
	t.Helper()
	nchoices := int(s.bits>>20) % 3
	if s.bit(19) {
		nchoices = -1 // a nil list
	}
	var fpRaw Raw
	if s.fp != "" {
		fpRaw = jsonStringRaw(s.fp)
	}
	var usageRaw *Usage
	if u := s.rawOr(1); u != nil {
		usageRaw = &Usage{Raw: u}
	}

	// chatstream's whole chat answer.
	{
		old := oldChatResponse{ID: s.id, Object: "chat.completion", Created: int64(s.bits >> 7), Model: s.model,
			SystemFingerprint: s.fp, Usage: s.rawOr(1)}
		nw := ChatCompletion{Header: Header{ID: s.id, Object: "chat.completion", Created: int64(s.bits >> 7), Model: s.model,
			SystemFingerprint: fpRaw, Usage: usageRaw}}
		for i := range nchoices {
			m := oldMessage{Role: s.model, Content: s.ptr(2, s.text), ReasoningContent: s.ptr(3, s.reasoning)}
			if s.bit(4) {
				m.ToolCalls = []ToolCall{{ID: s.id, Type: "function", Function: Function{Name: s.model, Arguments: s.args}}, {Function: Function{Arguments: s.text}}}
			}
			fin := s.ptr(5, s.reasoning)
			old.Choices = append(old.Choices, oldChatChoice{Index: i, Message: m, FinishReason: fin, StopReason: s.rawOr(6)})
			nw.Choices = append(nw.Choices, ChatChoice{Index: i, Message: Message{Role: m.Role, Content: m.Content,
				ReasoningContent: m.ReasoningContent, ToolCalls: m.ToolCalls}, FinishReason: fin, StopReason: s.rawOr(6)})
		}
		if nchoices < 0 {
			old.Choices, nw.Choices = nil, nil
		}
		checkSame(t, "chatstream chat answer", old, nw.AppendJSON(nil, Options{}))
	}

	// chatstream's whole text completion.
	{
		old := oldCompletionResponse{ID: s.id, Object: "text_completion", Created: -int64(s.bits), Model: s.model,
			SystemFingerprint: s.fp, Usage: s.rawOr(1)}
		nw := Completion{Header: Header{ID: s.id, Object: "text_completion", Created: -int64(s.bits), Model: s.model,
			SystemFingerprint: fpRaw, Usage: usageRaw}}
		for i := range nchoices {
			fin := s.ptr(5, s.reasoning)
			old.Choices = append(old.Choices, oldCompletionChoice{Index: i, Text: s.text, FinishReason: fin, StopReason: s.rawOr(6)})
			nw.Choices = append(nw.Choices, CompletionChoice{Index: i, Text: s.text, TokenIDs: []int{1}, FinishReason: fin, StopReason: s.rawOr(6)})
		}
		if nchoices < 0 {
			old.Choices, nw.Choices = nil, nil
		}
		checkSame(t, "chatstream completion", old, nw.AppendJSON(nil, Options{}))
	}

	// chatstream's replayed chunks: chat deltas, completion texts, the usage chunk.
	{
		old := oldReplayChunk{ID: s.id, Object: "chat.completion.chunk", Created: 42, Model: s.model, SystemFingerprint: s.fp}
		nw := Chunk{Header: Header{ID: s.id, Object: "chat.completion.chunk", Created: 42, Model: s.model, SystemFingerprint: fpRaw}}
		switch {
		case nchoices < 0:
		case s.bit(8): // the usage chunk
			old.Choices, old.Usage = []oldReplayChoice{}, s.rawOr(1)
			nw.Choices, nw.Usage = []ChunkChoice{}, usageRaw
		default:
			oc := oldReplayChoice{Index: nchoices, Text: s.ptr(9, s.text), FinishReason: s.ptr(5, s.reasoning), StopReason: s.rawOr(6)}
			nc := ChunkChoice{Index: nchoices, Text: oc.Text, FinishReason: oc.FinishReason, StopReason: oc.StopReason}
			if s.bit(10) {
				d := oldReplayDelta{Content: s.ptr(2, s.text), ReasoningContent: s.ptr(3, s.reasoning)}
				nd := Delta{Content: d.Content, ReasoningContent: d.ReasoningContent}
				if s.bit(11) {
					d.Role, nd.Role = s.model, s.model
				}
				if s.bit(4) {
					id, typ := "", ""
					if s.bit(12) {
						id, typ = s.id, "function"
					}
					d.ToolCalls = []oldReplayToolCall{{Index: 3, ID: id, Type: typ, Function: Function{Name: s.model, Arguments: s.args}}}
					nd.ToolCalls = []ToolCallDelta{{Index: 3, ID: id, Type: typ, Function: Function{Name: s.model, Arguments: s.args}}}
				}
				oc.Delta, nc.Delta = &d, &nd
			}
			old.Choices, nw.Choices = []oldReplayChoice{oc}, []ChunkChoice{nc}
		}
		checkSame(t, "chatstream replay chunk", old, nw.AppendJSON(nil, Options{}))
	}

	// tokeninput's whole answer and chunks: typed usage, the fingerprint raw and last.
	{
		var ou *oldUsage
		var nu *Usage
		if s.bit(13) {
			ou = &oldUsage{int64(s.bits >> 1), int64(s.bits >> 2), -int64(s.bits)}
			nu = &Usage{ou.PromptTokens, ou.CompletionTokens, ou.TotalTokens, nil}
		}
		fp := s.rawOr(14)
		old := oldTIChatAnswer{ID: s.id, Object: "chat.completion", Created: 7, Model: s.model, Usage: ou, SystemFingerprint: fp}
		nw := ChatCompletion{Header: Header{ID: s.id, Object: "chat.completion", Created: 7, Model: s.model, Usage: nu, SystemFingerprint: fp}}
		oc := oldTIChunk{ID: s.id, Object: "chat.completion.chunk", Created: 8, Model: s.model, Usage: ou, SystemFingerprint: fp}
		nc := Chunk{Header: Header{ID: s.id, Object: "chat.completion.chunk", Created: 8, Model: s.model, Usage: nu, SystemFingerprint: fp}}
		for i := range nchoices {
			fin := s.ptr(5, s.reasoning)
			old.Choices = append(old.Choices, oldTIChatChoice{Index: i, Message: oldTIMessage{"assistant", s.text},
				Logprobs: json.RawMessage("null"), FinishReason: fin, StopReason: s.rawOr(6)})
			text := s.text
			nw.Choices = append(nw.Choices, ChatChoice{Index: i, Message: Message{Role: "assistant", Content: &text},
				Logprobs: Raw("null"), FinishReason: fin, StopReason: s.rawOr(6)})
			d := oldTIDelta{Content: s.ptr(2, s.text)}
			if s.bit(11) {
				d.Role = "assistant"
			}
			oc.Choices = append(oc.Choices, oldTIChunkChoice{Index: i, Delta: d, Logprobs: json.RawMessage("null"), FinishReason: fin, StopReason: s.rawOr(6)})
			nc.Choices = append(nc.Choices, ChunkChoice{Index: i, Delta: &Delta{Role: d.Role, Content: d.Content},
				Logprobs: Raw("null"), FinishReason: fin, StopReason: s.rawOr(6)})
		}
		if nchoices < 0 {
			old.Choices, nw.Choices, oc.Choices, nc.Choices = nil, nil, nil, nil
		}
		checkSame(t, "tokeninput answer", old, nw.AppendJSON(nil, Options{FingerprintLast: true}))
		checkSame(t, "tokeninput chunk", oc, nc.AppendJSON(nil, Options{FingerprintLast: true}))
	}
}

// jsonStringRaw is s as a JSON string, as json.Marshal writes it: how a writer whose
// fingerprint is a string (the chat stream assembler, a replay) hands it to Header.
func jsonStringRaw(s string) Raw {
	b, _ := json.Marshal(s)
	return b
}

var samples = []sample{
	{id: "chatcmpl-1", model: "m", text: "Hello, wörld!", reasoning: "stop", raw: []byte(`{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}`), bits: 1<<20 | 0b110_0110},
	{id: "c", model: "granite<&>", text: "", args: `{"city":"Paris"}`, fp: "fp_<1>", raw: []byte(" [ \"###\" , 1 ] "), bits: 2<<20 | 0xFFFFF},
	{id: "x\u2028y", model: "\xff", text: "a\tb\"c\\\u2029", reasoning: "", fp: "\x01", raw: []byte(`null`), bits: 0x7FFFF},
	{id: "", model: "", text: "", raw: nil, bits: 1 << 19},
	{id: "u", model: "m", text: " hi", raw: []byte(`{"a" : "<b>\u0041"}`), bits: 1<<8 | 1<<1 | 1<<13 | 1<<14},
	{id: "t", model: "m", text: "x", raw: []byte(`"fp-\u00e9"`), bits: 1<<20 | 1<<10 | 1<<11 | 1<<2 | 1<<14 | 1<<6},
	{id: "t", model: "m", text: "x", raw: []byte(`not json`), bits: 0xFFFFFFFF},
}

// TestWritersAreMarshal: each writer writes what json.Marshal wrote for the struct it replaced,
// in both layouts (FuzzWritersAreMarshal runs the same on any strings).
func TestWritersAreMarshal(t *testing.T) {
	for i := range samples {
		checkWriters(t, &samples[i])
	}
}

func FuzzWritersAreMarshal(f *testing.F) {
	for _, s := range samples {
		f.Add(s.id, s.model, s.text, s.reasoning, s.fp, s.args, s.raw, s.bits)
	}
	// The events of lib/chatstream's and stage/tokeninput's tests and fuzz seeds, their values as
	// strings and raw members.
	f.Add("cmpl-1", "qwen", "Hello EN", "D x", "", "", []byte(`{"prompt_tokens":3}`), uint64(0x1FFFFF))
	f.Add("c", "m", "think", " a  b", "", "{}", []byte(`"###"`), uint64(1<<21|0x7F))
	f.Fuzz(func(t *testing.T, id, model, text, reasoning, fp, args string, raw []byte, bits uint64) {
		checkWriters(t, &sample{id, model, text, reasoning, fp, args, raw, bits})
	})
}

// TestOptionsEsc: the escaping reaches every string and raw value; the zero Options are
// EncodingJSON's.
func TestOptionsEsc(t *testing.T) {
	s := "<\u2028>"
	m := Message{Role: "assistant", Content: &s, ToolCalls: []ToolCall{{ID: s, Type: "function", Function: Function{Name: s, Arguments: s}}},
		Extra: []byte(`,"parse_error":"x"`)}
	c := ChatCompletion{Header: Header{ID: s, Object: s, Model: s, SystemFingerprint: Raw(`"<"`), Usage: &Usage{Raw: Raw(`{"k":"<"}`)}},
		Choices: []ChatChoice{{Message: m, StopReason: Raw(`"\u2028"`)}}}
	got := string(c.AppendJSON(nil, Options{Esc: jsonwire.MinimalShort}))
	want := `{"id":"<` + "\u2028" + `>","object":"<` + "\u2028" + `>","created":0,"model":"<` + "\u2028" + `>","system_fingerprint":"<","choices":[{"index":0,"message":{"role":"assistant","content":"<` + "\u2028" + `>","tool_calls":[{"id":"<` + "\u2028" + `>","type":"function","function":{"name":"<` + "\u2028" + `>","arguments":"<` + "\u2028" + `>"}}],"parse_error":"x"},"logprobs":null,"finish_reason":null,"stop_reason":"\u2028"}],"usage":{"k":"<"}}`
	if got != want {
		t.Fatalf("MinimalShort:\n%s\nwant\n%s", got, want)
	}
	if enc := c.AppendJSON(nil, Options{}); !utf8.Valid(enc) || bytes.ContainsAny(enc, "<\u2028") {
		t.Fatalf("the zero Options do not escape as encoding/json: %s", enc)
	}
	d := Delta{Extra: []byte(`,"citations":[]`)}
	if got := string(d.AppendJSON(nil, Options{})); got != `{"citations":[]}` {
		t.Fatalf("a delta of extras only: %s", got)
	}
}
