package granitestage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/lib/openaiwire"
)

// The hand-written delta chunk is byte for byte what emitChoice writes for it, and what
// json.Marshal wrote for the stage's former chunk struct.
func TestEmitTextIsEmitChoice(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"plain", "\x00\x1f\"\\<>&\u2028\u2029\xff\xc3 é\t\r\n", ""} {
		// The last: an object fingerprint holding what the chunk's own choices look like.
		for _, fp := range []json.RawMessage{nil, json.RawMessage(`"fp"`), json.RawMessage(` {"a" : "<\u00e9>"} `), json.RawMessage(`{"choices":[]}`)} {
			a := &chatStream{head: openaiwire.Chunk{Header: openaiwire.Header{ID: "chatcmpl-1", Object: "chat.completion.chunk", Created: 7,
				Model: "g\"<", SystemFingerprint: fp}}}
			b := *a
			text := s
			old := oldChunk{oldHead: oldHead{ID: "chatcmpl-1", Object: "chat.completion.chunk", Created: 7, Model: "g\"<"}, SystemFingerprint: fp,
				Choices: []oldChunkChoice{{Index: 3, Delta: oldChunkDelta{Content: &text}, Logprobs: json.RawMessage("null")}}}
			for _, member := range []string{"content", "reasoning_content"} {
				a.out, b.out = nil, nil
				a.emitText(old.Choices[0].Index, member, s)
				d := &openaiwire.Delta{Content: &text}
				if member == "reasoning_content" {
					d = &openaiwire.Delta{ReasoningContent: &text}
					old.Choices[0].Delta = oldChunkDelta{ReasoningContent: &text}
				}
				b.emitChoice(openaiwire.ChunkChoice{Index: old.Choices[0].Index, Delta: d})
				want, err := json.Marshal(old)
				if err != nil {
					t.Fatal(err)
				}
				if string(a.out) != string(b.out) || string(a.out) != "data: "+string(want)+"\n\n" {
					t.Errorf("%q:\n%s\n%s\ndata: %s", s, a.out, b.out, want)
				}
				old.Choices[0].Index = 0
			}
		}
	}
}

// The chunks the stage writes (a role chunk, a tool call, a finish chunk with Granite's
// members, a usage chunk) are what json.Marshal wrote for the stage's former chunk structs.
func TestChunksAreMarshal(t *testing.T) {
	t.Parallel()
	tricky := "a <b> & \"c\" \\ \n\t\x01 \u2028\u2029 é \xff"
	empty, stop, tools := "", "stop", "tool_calls"
	head := oldChunk{oldHead: oldHead{ID: "chatcmpl-1", Object: "chat.completion.chunk", Created: 7, Model: tricky}}
	with := func(fp json.RawMessage, usage json.RawMessage, choices ...oldChunkChoice) oldChunk {
		c := head
		c.SystemFingerprint, c.Usage, c.Choices = fp, usage, choices
		return c
	}
	null := json.RawMessage("null")
	for i, c := range []oldChunk{
		with(nil, nil, oldChunkChoice{Index: 1, Delta: oldChunkDelta{Role: "assistant", Content: &empty}, Logprobs: null}),
		with(json.RawMessage(`"fp"`), nil, oldChunkChoice{Index: 0, Logprobs: null, Delta: oldChunkDelta{ToolCalls: []oldToolCallDelta{
			{Index: 2, ID: "call_0_2", Type: "function", Function: openaiwire.Function{Name: "f<", Arguments: `{"a": "<&>"}`}}}}}),
		with(json.RawMessage(` [1, {"b" : "\u2028"}] `), nil, oldChunkChoice{Index: 0, Logprobs: null, FinishReason: &stop,
			StopReason: json.RawMessage(` "</x>" `), Delta: oldChunkDelta{oldExtras: oldExtras{
				Citations:      []granite.Citation{{CitationID: "0", DocID: tricky, ContextText: tricky, ResponseEnd: 9}},
				Documents:      []granite.CitedDocument{{DocID: "1", Text: tricky, CitationID: "x"}},
				Hallucinations: []granite.Hallucination{{HallucinationID: "1", Risk: tricky}}, ParseError: tricky}}}),
		with(nil, nil, oldChunkChoice{Index: 3, Logprobs: null, FinishReason: &tools, Delta: oldChunkDelta{oldExtras: oldExtras{ParseError: "p"}}}),
		with(nil, nil, oldChunkChoice{Index: 3, Logprobs: null, FinishReason: &stop, StopReason: json.RawMessage("7")}),
		with(nil, nil, oldChunkChoice{Index: 0, Logprobs: null, FinishReason: &stop, Delta: oldChunkDelta{oldExtras: oldExtras{Documents: []granite.CitedDocument{{}}}}}),
		with(json.RawMessage(`null`), json.RawMessage(`{"prompt_tokens": 7, "total_tokens":11,"completion_tokens":4,"x":"<"}`)),
	} {
		if c.Choices == nil {
			c.Choices = []oldChunkChoice{}
		}
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		s := &chatStream{}
		s.emit(newChunk(&c))
		if string(s.out) != "data: "+string(want)+"\n\n" {
			t.Errorf("chunk %d:\n got %s\nwant data: %s", i, s.out, want)
		}
	}
}

// streamOf runs chatStream over an SSE body made of the given completion chunks and returns,
// per choice, the content and reasoning it streamed, its tool call names and its finish chunk's
// delta and reason.
type streamedChoice struct {
	content, reasoning string
	tools              []string
	finish             string
	parseError         string
}

func streamOf(t *testing.T, in *granite.ChatRequest, chunks ...string) map[int]*streamedChoice {
	t.Helper()
	var body strings.Builder
	for _, c := range chunks {
		body.WriteString("data: " + c + "\n\n")
	}
	body.WriteString("data: [DONE]\n\n")
	up := pipeline.NewBody([]byte(body.String()), pipeline.Usage{})
	c := &chatStream{Body: up, ev: pipeline.NewEvents(up), sp: granite.New(granite.V33), in: in, max: 1 << 20, head: openaiwire.Chunk{Header: openaiwire.Header{ID: "x", Object: "chat.completion.chunk"}}}
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]*streamedChoice{}
	ev := pipeline.NewEvents(bytes.NewReader(out))
	for {
		data, err := ev.Next()
		if err != nil {
			break
		}
		var ch oldChunk
		if err := json.Unmarshal(data, &ch); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		for _, cc := range ch.Choices {
			s := got[cc.Index]
			if s == nil {
				s = &streamedChoice{}
				got[cc.Index] = s
			}
			if cc.Delta.Content != nil {
				s.content += *cc.Delta.Content
			}
			if cc.Delta.ReasoningContent != nil {
				s.reasoning += *cc.Delta.ReasoningContent
			}
			for _, tc := range cc.Delta.ToolCalls {
				s.tools = append(s.tools, tc.Function.Name+tc.Function.Arguments)
			}
			if cc.FinishReason != nil {
				s.finish, s.parseError = *cc.FinishReason, cc.Delta.ParseError
			}
		}
	}
	return got
}

func TestChatStreamChoices(t *testing.T) {
	t.Parallel()
	// Two choices interleaved, one finished by the upstream, one cut off (finished at the end).
	got := streamOf(t, &granite.ChatRequest{Thinking: true},
		`{"choices":[{"index":1,"text":"<think>b1 "},{"index":0,"text":"<think>a1"}]}`,
		`{"choices":[{"index":0,"text":"</think><response>A"},{"index":1,"text":"b2</think>B"}]}`,
		`{"choices":[{"index":0,"text":"nswer</response>","finish_reason":"length"}]}`,
		`{"choices":[{"index":1,"text":" more"}]}`)
	if a := got[0]; a == nil || a.reasoning != "a1" || a.content != "Answer" || a.finish != "length" || a.parseError != "" {
		t.Errorf("choice 0: %+v", a)
	}
	if b := got[1]; b == nil || b.reasoning != "b1 b2" || b.content != "B more" || b.finish != "stop" {
		t.Errorf("choice 1: %+v", b)
	}

	// A tool call arrives whole, with finish_reason tool_calls and no content.
	got = streamOf(t, &granite.ChatRequest{Tools: []granite.FunctionDefinition{{Name: "f"}}},
		`{"choices":[{"index":0,"text":"<|tool_call|>[{\"name\": \"f\","}]}`,
		`{"choices":[{"index":0,"text":" \"arguments\": {\"a\": 1}}]","finish_reason":"stop"}]}`)
	if c := got[0]; c == nil || c.content != "" || len(c.tools) != 1 || c.tools[0] != `f{"a": 1}` || c.finish != "tool_calls" {
		t.Errorf("tool call: %+v", c)
	}

	// A thought cut off: streamed as reasoning, then whole as content, as the whole answer has
	// it; the finish chunk's parse_error, the whole answer's, says why.
	got = streamOf(t, &granite.ChatRequest{Thinking: true}, `{"choices":[{"index":0,"text":"<think>never closed","finish_reason":"length"}]}`)
	if c := got[0]; c == nil || c.reasoning != "never closed" || c.content != "<think>never closed" || !strings.Contains(c.parseError, "thought is not closed") {
		t.Errorf("unclosed thought: %+v", c)
	}
}

// A chunk with "error": null is an ordinary chunk (encoding/json reads null into a RawMessage as
// the bytes null, which once passed every such chunk on untouched as an error event).
func TestNullErrorIsNoError(t *testing.T) {
	t.Parallel()
	body := []byte("data: {\"error\":null,\"choices\":[{\"index\":0,\"text\":\"<think>a</think><response>b\",\"finish_reason\":null}]}\n\n" +
		"data: {\"error\":null,\"choices\":[{\"index\":0,\"text\":\"</response>\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	up := pipeline.NewBody(body, pipeline.Usage{})
	c := &chatStream{Body: up, ev: pipeline.NewEvents(up), sp: granite.New(granite.V33), in: &granite.ChatRequest{Thinking: true},
		max: 1 << 16, head: openaiwire.Chunk{Header: openaiwire.Header{ID: "x", Object: "chat.completion.chunk"}}}
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte(`"error"`)) || !bytes.Contains(out, []byte(`"reasoning_content":"a"`)) || !bytes.Contains(out, []byte(`"content":"b"`)) {
		t.Fatalf("the chunks were not parsed as Granite's answer: %s", out)
	}
}

// Reads of any size get the same stream: the chunk buffer is reused only once it has been read.
func TestChatStreamReadSizes(t *testing.T) {
	t.Parallel()
	var body strings.Builder
	text := "<think>" + strings.Repeat("Thinking it over. ", 20) + "</think><response>" + strings.Repeat("An answer, said <b>boldly</b> & well. ", 20) + "</response>"
	for i := 0; i < len(text); i += 7 {
		piece, _ := json.Marshal(text[i:min(i+7, len(text))])
		fmt.Fprintf(&body, "data: {\"model\":\"g\",\"choices\":[{\"index\":0,\"text\":%s,\"finish_reason\":null}]}\n\n", piece)
	}
	body.WriteString("data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	read := func(wrap func(io.Reader) io.Reader) string {
		up := pipeline.NewBody([]byte(body.String()), pipeline.Usage{})
		c := &chatStream{Body: up, ev: pipeline.NewEvents(up), sp: granite.New(granite.V33), in: &granite.ChatRequest{Thinking: true},
			max: 1 << 16, head: openaiwire.Chunk{Header: openaiwire.Header{ID: "x", Object: "chat.completion.chunk"}}}
		out, err := io.ReadAll(wrap(c))
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	whole := read(func(r io.Reader) io.Reader { return r })
	if !strings.Contains(whole, `"reasoning_content":"Thin`) || !strings.Contains(whole, `"content":"An`) || !strings.HasSuffix(whole, "data: [DONE]\n\n") {
		t.Fatalf("not Granite's answer: %.300s", whole)
	}
	if got := read(iotest.OneByteReader); got != whole {
		t.Fatalf("read a byte at a time:\n%s\nwhole:\n%s", got, whole)
	}
	if got := read(iotest.HalfReader); got != whole {
		t.Fatalf("read by halves:\n%s\nwhole:\n%s", got, whole)
	}
}
