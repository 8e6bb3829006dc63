package granitestage

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/chatstream"
	"github.com/infergate/infergate/lib/granite"
)

// The hand-written answer and completion request are json.Marshal's bytes for the same values.
func TestWriteIsMarshal(t *testing.T) {
	tricky := "a <b> & \"c\" \\ \n\t\x01 \u2028\u2029 é \xff"
	content, reasoning := tricky, "thought"
	answers := []chatAnswer{
		{ID: "chatcmpl-1", Object: "chat.completion", Created: 1700000000, Model: "granite",
			Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: &content}, Logprobs: json.RawMessage("null"), FinishReason: "stop"}}},
		{ID: tricky, Object: "chat.completion", Created: -5, Model: tricky, Usage: &usage{1, 2, 3},
			SystemFingerprint: json.RawMessage(` { "a" : [1, "<x>"] } `),
			Choices: []chatChoice{
				{Index: 0, Message: chatMessage{Role: "assistant", Content: &content, ReasoningContent: &reasoning,
					Citations: []granite.Citation{{CitationID: "0", DocID: tricky, ContextText: tricky, ContextBegin: 1, ContextEnd: 2,
						ResponseText: tricky, ResponseBegin: 3, ResponseEnd: 400}, {CitationID: "1"}},
					Documents:      []granite.CitedDocument{{DocID: "1", Text: tricky, CitationID: "9"}, {}},
					Hallucinations: []granite.Hallucination{{HallucinationID: "1", Risk: "low", ResponseText: tricky, ResponseBegin: 5, ResponseEnd: 6}, {}}},
					Logprobs: json.RawMessage("null"), FinishReason: "length"},
				{Index: 1, Message: chatMessage{Role: "assistant", Citations: []granite.Citation{}, Documents: []granite.CitedDocument{},
					ToolCalls: []chatstream.ToolCall{{ID: "call_1", Type: "function", Function: chatstream.Function{Name: "f<", Arguments: `{"a":"<"}`}}}},
					FinishReason: "tool_calls"},
			}},
		{Object: "chat.completion"},
	}
	for i, a := range answers {
		want, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendAnswer([]byte("x"), &a)
		if err != nil || string(got[1:]) != string(want) {
			t.Errorf("answer %d:\n got %s (%v)\nwant %s", i, got[1:], err, want)
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
