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
)

// The hand-written delta chunk is byte for byte what encoding/json writes for it.
func TestEmitTextIsEmitChoice(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"plain", "\x00\x1f\"\\<>&\u2028\u2029\xff\xc3 é\t\r\n", ""} {
		a := &chatStream{head: chunk{ID: "chatcmpl-1", Object: "chat.completion.chunk", Created: 7, Model: "g\"<",
			SystemFingerprint: json.RawMessage(`"fp"`)}}
		b := *a
		a.emitText(3, "content", s)
		text := s
		if err := b.emitChoice(chunkChoice{Index: 3, Delta: chunkDelta{Content: &text}}); err != nil {
			t.Fatal(err)
		}
		if string(a.out) != string(b.out) {
			t.Errorf("%q:\n%s\n%s", s, a.out, b.out)
		}
		a.out, b.out = nil, nil
		a.emitText(0, "reasoning_content", s)
		if err := b.emitChoice(chunkChoice{Index: 0, Delta: chunkDelta{ReasoningContent: &text}}); err != nil {
			t.Fatal(err)
		}
		if string(a.out) != string(b.out) {
			t.Errorf("%q:\n%s\n%s", s, a.out, b.out)
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
	c := &chatStream{Body: up, ev: pipeline.NewEvents(up), sp: granite.New(granite.V33), in: in, max: 1 << 20, head: chunk{ID: "x", Object: "chat.completion.chunk"}}
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
		var ch chunk
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

// TestScanChunkReadsUpstreamChunks: the chunks upstreams send (vLLM's, with its nulls, and an
// error event) are read by the fast path, not left to encoding/json.
func TestScanChunkReadsUpstreamChunks(t *testing.T) {
	for _, data := range []string{
		`{"id":"cmpl-a1","object":"text_completion","created":1732000000,"model":"ibm-granite/granite-3.3-8b-instruct","choices":[{"index":0,"text":"<think>Fir","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}`,
		`{"id":"cmpl-a1","object":"text_completion","created":1732000000,"model":"granite","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":null}`,
		`{"id":"cmpl-a1","object":"text_completion","created":1732000000,"model":"granite","choices":[],"usage":{"prompt_tokens":7,"total_tokens":11,"completion_tokens":4,"prompt_tokens_details":null}}`,
		`{"error":{"object":"error","message":"boom","type":"InternalServerError","param":null,"code":500}}`,
	} {
		var c completionChunk
		if !scanChunk([]byte(data), &c) {
			t.Errorf("left to encoding/json: %s", data)
		}
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
		max: 1 << 16, head: chunk{ID: "x", Object: "chat.completion.chunk"}}
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
			max: 1 << 16, head: chunk{ID: "x", Object: "chat.completion.chunk"}}
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
