package granitestage

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/lib/openaiwire"
)

// The structs below are the stage's answer and chunk structs as they were before it wrote
// through openaiwire (tagged structs given to json.Marshal), kept as the specification of its
// bytes: what the stage writes must be what json.Marshal wrote for them. newAnswer and newChunk
// build the values the stage now writes from them, as the stage builds them.

// oldHead is what the former answer and chunk began with (an embedded struct's members are
// written where it stands).
type oldHead struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// oldExtras are Granite's members, which the former message and delta both ended with.
type oldExtras struct {
	Citations      []granite.Citation      `json:"citations,omitempty"`
	Documents      []granite.CitedDocument `json:"documents,omitempty"`
	Hallucinations []granite.Hallucination `json:"hallucinations,omitempty"`
	ParseError     string                  `json:"parse_error,omitempty"`
}

type oldChatMessage struct {
	Role             string                `json:"role"`
	Content          *string               `json:"content"`
	ReasoningContent *string               `json:"reasoning_content,omitempty"`
	ToolCalls        []openaiwire.ToolCall `json:"tool_calls,omitempty"`
	oldExtras
}

type oldChatChoice struct {
	Index        int             `json:"index"`
	Message      oldChatMessage  `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type oldUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

type oldChatAnswer struct {
	oldHead
	Choices           []oldChatChoice `json:"choices"`
	Usage             *oldUsage       `json:"usage,omitempty"`
	SystemFingerprint json.RawMessage `json:"system_fingerprint,omitempty"`
}

type oldChunk struct {
	oldHead
	SystemFingerprint json.RawMessage  `json:"system_fingerprint,omitempty"`
	Choices           []oldChunkChoice `json:"choices"`
	Usage             json.RawMessage  `json:"usage,omitempty"`
}

type oldChunkChoice struct {
	Index        int             `json:"index"`
	Delta        oldChunkDelta   `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

type oldChunkDelta struct {
	Role             string             `json:"role,omitempty"`
	Content          *string            `json:"content,omitempty"`
	ReasoningContent *string            `json:"reasoning_content,omitempty"`
	ToolCalls        []oldToolCallDelta `json:"tool_calls,omitempty"`
	oldExtras
}

type oldToolCallDelta struct {
	Index    int                 `json:"index"`
	ID       string              `json:"id"`
	Type     string              `json:"type"`
	Function openaiwire.Function `json:"function"`
}

// header is h as the stage now holds it.
func (h *oldHead) header() openaiwire.Header {
	return openaiwire.Header{ID: h.ID, Object: h.Object, Created: h.Created, Model: h.Model}
}

// extra is e as the stage now writes it: a message's or delta's Extra.
func (e *oldExtras) extra() []byte {
	return appendExtras(nil, e.Citations, e.Documents, e.Hallucinations, e.ParseError)
}

// newAnswer is a as the stage now builds it (answer): Granite's members as the message's Extra,
// the finish reason a pointer, logprobs nil (null, as the stage always had them).
func newAnswer(a *oldChatAnswer) *openaiwire.ChatCompletion {
	n := &openaiwire.ChatCompletion{Header: a.header()}
	n.SystemFingerprint = a.SystemFingerprint
	if a.Usage != nil {
		n.Usage = &openaiwire.Usage{PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens, TotalTokens: a.Usage.TotalTokens}
	}
	if a.Choices != nil {
		n.Choices = make([]openaiwire.ChatChoice, len(a.Choices))
	}
	for i, c := range a.Choices {
		m := c.Message
		finish := c.FinishReason
		n.Choices[i] = openaiwire.ChatChoice{Index: c.Index, FinishReason: &finish, Logprobs: c.Logprobs, Message: openaiwire.Message{
			Role: m.Role, Content: m.Content, ReasoningContent: m.ReasoningContent, ToolCalls: m.ToolCalls, Extra: m.extra()}}
	}
	return n
}

// newChunk is c as the stage now builds it (emitChoice, and take's usage chunk).
func newChunk(c *oldChunk) *openaiwire.Chunk {
	n := &openaiwire.Chunk{Header: c.header()}
	n.SystemFingerprint = c.SystemFingerprint
	if len(c.Usage) > 0 {
		n.Usage = &openaiwire.Usage{Raw: c.Usage}
	}
	if c.Choices != nil {
		n.Choices = make([]openaiwire.ChunkChoice, len(c.Choices))
	}
	for i, ch := range c.Choices {
		d := ch.Delta
		nd := &openaiwire.Delta{Role: d.Role, Content: d.Content, ReasoningContent: d.ReasoningContent, Extra: d.extra()}
		for _, t := range d.ToolCalls {
			nd.ToolCalls = append(nd.ToolCalls, openaiwire.ToolCallDelta{Index: t.Index, ID: t.ID, Type: t.Type, Function: t.Function})
		}
		n.Choices[i] = openaiwire.ChunkChoice{Index: ch.Index, Delta: nd, Logprobs: ch.Logprobs, FinishReason: ch.FinishReason, StopReason: ch.StopReason}
	}
	return n
}

// The answers and completion requests the stage writes are json.Marshal's bytes for the same
// values as the stage's former structs held them.
func TestWriteIsMarshal(t *testing.T) {
	tricky := "a <b> & \"c\" \\ \n\t\x01 \u2028\u2029 é \xff"
	content, reasoning := tricky, "thought"
	answers := []oldChatAnswer{
		{oldHead: oldHead{ID: "chatcmpl-1", Object: "chat.completion", Created: 1700000000, Model: "granite"},
			Choices: []oldChatChoice{{Message: oldChatMessage{Role: "assistant", Content: &content}, Logprobs: json.RawMessage("null"), FinishReason: "stop"}}},
		{oldHead: oldHead{ID: tricky, Object: "chat.completion", Created: -5, Model: tricky}, Usage: &oldUsage{1, 2, 3},
			SystemFingerprint: json.RawMessage(` { "a" : [1, "<x>"] } `),
			Choices: []oldChatChoice{
				{Index: 0, Message: oldChatMessage{Role: "assistant", Content: &content, ReasoningContent: &reasoning, oldExtras: oldExtras{
					Citations: []granite.Citation{{CitationID: "0", DocID: tricky, ContextText: tricky, ContextBegin: 1, ContextEnd: 2,
						ResponseText: tricky, ResponseBegin: 3, ResponseEnd: 400}, {CitationID: "1"}},
					Documents:      []granite.CitedDocument{{DocID: "1", Text: tricky, CitationID: "9"}, {}},
					Hallucinations: []granite.Hallucination{{HallucinationID: "1", Risk: "low", ResponseText: tricky, ResponseBegin: 5, ResponseEnd: 6}, {}},
					ParseError:     tricky}},
					Logprobs: json.RawMessage("null"), FinishReason: "length"},
				{Index: 1, Message: oldChatMessage{Role: "assistant", oldExtras: oldExtras{Citations: []granite.Citation{}, Documents: []granite.CitedDocument{}},
					ToolCalls: []openaiwire.ToolCall{{ID: "call_1", Type: "function", Function: openaiwire.Function{Name: "f<", Arguments: `{"a":"<"}`}},
						{ID: tricky, Type: "function", Function: openaiwire.Function{Name: "", Arguments: "{}"}}}},
					FinishReason: "tool_calls"},
				{Index: 2, Message: oldChatMessage{Role: "assistant", Content: &content, oldExtras: oldExtras{ParseError: "only this"}}, FinishReason: ""},
			}},
		{oldHead: oldHead{Object: "chat.completion"}},
		{oldHead: oldHead{Object: "chat.completion"}, SystemFingerprint: json.RawMessage(`null`), Choices: []oldChatChoice{}},
	}
	for i, a := range answers {
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if got := newAnswer(&a).AppendJSON([]byte("x"), openaiwire.Options{FingerprintLast: true}); string(got[1:]) != string(want) {
			t.Errorf("answer %d:\n got %s\nwant %s", i, got[1:], want)
		}
	}

	params := []map[string]any{
		nil,
		{"max_tokens": json.RawMessage("1024"), "temperature": json.RawMessage("0.2"), "n": 3, "stop": json.RawMessage(`["<x>", "y"]`),
			"user": json.RawMessage(`"plain"`), "seed": json.RawMessage(`-1e3`), "echo": "<e>", "skip_special_tokens": false,
			"logit_bias": json.RawMessage(` {"1" : 2} `), "x": json.RawMessage(`"\u00e9<"`), "w": json.RawMessage(`"<w>"`), "nil": json.RawMessage(nil), "z": []int{1},
			"model": "ignored", "prompt": "ignored", "stream": "ignored", "stream_options": "ignored"},
	}
	for i, p := range params {
		for _, so := range []json.RawMessage{nil, json.RawMessage(`{"include_usage": true}`)} {
			m := map[string]any{}
			for k, v := range p {
				m[k] = v
			}
			m["model"], m["prompt"], m["stream"] = json.RawMessage(`"granite"`), tricky, so != nil
			if so != nil {
				m["stream_options"] = so
			}
			want, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendCompletionRequest(nil, json.RawMessage(`"granite"`), tricky, so != nil, so, p)
			if err != nil || string(got) != string(want) {
				t.Errorf("request %d:\n got %s (%v)\nwant %s", i, got, err, want)
			}
		}
	}
}

// readAll reads to the end within the bound, and fails past it without reading much further.
func TestReadAll(t *testing.T) {
	t.Parallel()
	data := strings.Repeat("0123456789", 300)
	for _, tc := range []struct {
		limit int
		want  error
	}{{len(data), nil}, {len(data) + 1, nil}, {len(data) - 1, errTooLarge}, {0, errTooLarge}} {
		got, err := readAll(iotest.OneByteReader(strings.NewReader(data)), make([]byte, 0, 7), tc.limit)
		if err != tc.want || (err == nil && string(got) != data) || len(got) > tc.limit+1 {
			t.Errorf("limit %d: %d bytes, %v; want %v", tc.limit, len(got), err, tc.want)
		}
	}
	boom := errors.New("boom")
	if _, err := readAll(iotest.ErrReader(boom), nil, 10); err != boom {
		t.Errorf("reader error: %v", err)
	}
}

// An upstream answer over MaxAnswerBytes is a 502 naming the bound, not a truncated parse.
func TestAnswerTooLarge(t *testing.T) {
	t.Parallel()
	answer := []byte(`{"choices":[{"text":"` + strings.Repeat("x", 200) + `","finish_reason":"stop"}]}`)
	up := func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{StatusCode: 200, Body: pipeline.NewBody(answer, pipeline.Usage{})}, nil
	}
	e, _ := granite.NewDefaultRegistry().Lookup("granite3.3")
	req, err := pipeline.NewRequest(chatPath, []byte(`{"model":"granite","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		max  int
		code string
	}{{len(answer) - 1, "upstream_response_too_large"}, {len(answer), ""}} {
		res, err := Stage(e, Options{MaxAnswerBytes: tc.max})(up)(context.Background(), req)
		var pe *pipeline.Error
		switch {
		case tc.code == "" && err != nil:
			t.Errorf("max %d: %v", tc.max, err)
		case tc.code == "" && res.StatusCode != 200:
			t.Errorf("max %d: HTTP %d", tc.max, res.StatusCode)
		case tc.code != "" && (!errors.As(err, &pe) || pe.Status != 502 || pe.Code != tc.code):
			t.Errorf("max %d: %v, want a 502 %s", tc.max, err, tc.code)
		}
	}
}

var update = flag.Bool("update", false, "rewrite testdata/answers.golden from the stage's answers")

// TestAnswersGolden pins the bytes of the stage's answers (captured from the stage before it
// wrote through openaiwire): a whole answer with Granite's members, the upstream's fingerprint
// (written last, after usage) and counted usage; a stream with the upstream's fingerprint, a tool
// call, a finish chunk with Granite's members and stop_reason, and the upstream's usage passed
// on; and a replayed stream whose finish chunk carries the members in sorted-key form
// (addExtras; a replay needs a string fingerprint). Tool call ids, random, read as ID.
func TestAnswersGolden(t *testing.T) {
	t.Parallel()
	cites := "Mad about dog! <co>1</co> Dogs <b>&</b> more.\n\n# Citations:\n<co>1</co> Document 0: \"Dog info\"\n\n# Hallucinations:\n1. Risk low: Mad about dog!\n"
	call := `<|tool_call|>[{"name": "f", "arguments": {"a": "<x>"}}]`
	const (
		docs  = `,"documents":[{"text":"Dog info"}],"controls":{"citations":true,"hallucinations":true}`
		tools = `,"tools":[{"type":"function","function":{"name":"f"}}]`
		fp    = `,"system_fingerprint":{"a" : ["<\u00e9>"]}`
		usage = `{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4,"prompt_tokens_details":null}`
	)
	whole := func(text, fp string) [][]byte {
		q := fmt.Sprintf("%q", text)
		return [][]byte{[]byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"granite"` + fp +
			`,"choices":[{"index":0,"text":` + q + `,"finish_reason":"stop","stop_reason":null}],"usage":` + usage + `}`)}
	}
	streamed := func(text string) [][]byte {
		var out [][]byte
		for i := 0; i < len(text); i += 9 {
			q := fmt.Sprintf("%q", text[i:min(i+9, len(text))])
			out = append(out, []byte(`{"model":"m<"`+fp+`,"choices":[{"index":0,"text":`+q+`,"finish_reason":null}]}`))
		}
		return append(out, []byte(`{"choices":[{"index":0,"text":"","finish_reason":"length","stop_reason":"</x>"}]}`),
			[]byte(`{"choices":[],"usage":`+usage+`}`))
	}
	var got strings.Builder
	for _, tc := range []struct {
		name, body string
		voting     bool
		up         [][]byte
		stream     bool
	}{
		{"whole, citations", docs, false, whole(cites, fp), false},
		{"whole, tool call", tools, false, whole(call, ""), false},
		{"stream, citations", docs + `,"stream":true,"stream_options":{"include_usage":true}`, false, streamed(cites), true},
		{"stream, tool call", tools + `,"stream":true`, false, streamed(call), true},
		{"replay, citations", docs + `,"stream":true,"stream_options":{"include_usage":true}`, true, whole(cites, `,"system_fingerprint":"fp<"`), false},
	} {
		e, _ := granite.NewDefaultRegistry().Lookup("granite3.2")
		if tc.voting {
			e = granite.Voting(e, nil, 1)
		}
		up := func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			if tc.stream {
				return &pipeline.Response{StatusCode: 200, Stream: true, Body: pipeline.NewEventBody(tc.up, pipeline.Usage{})}, nil
			}
			return &pipeline.Response{StatusCode: 200, Body: pipeline.NewBody(tc.up[0], pipeline.Usage{})}, nil
		}
		req, err := pipeline.NewRequest(chatPath, []byte(`{"model":"granite","messages":[{"role":"user","content":"q"}]`+tc.body+`}`))
		if err != nil {
			t.Fatal(err)
		}
		res, err := Stage(e, Options{NewID: func() string { return "chatcmpl-1" }, Now: func() time.Time { return time.Unix(5, 0) }})(up)(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Finish(nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		fmt.Fprintf(&got, "== %s\n%s\n", tc.name, b)
	}
	out := regexp.MustCompile(`"id":"[0-9a-f]{8}-[0-9a-f-]{27}"`).ReplaceAllString(got.String(), `"id":"ID"`)
	const path = "testdata/answers.golden"
	if *update {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("answers differ from %s:\n%s", path, out)
	}
}
