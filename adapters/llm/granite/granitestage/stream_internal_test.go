package granitestage

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/infergate/infergate/adapters/llm/granite"
	"github.com/infergate/infergate/adapters/pipeline"
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

	// A thought cut off: streamed as reasoning; the finish chunk says the whole parse differs.
	got = streamOf(t, &granite.ChatRequest{Thinking: true}, `{"choices":[{"index":0,"text":"<think>never closed","finish_reason":"length"}]}`)
	if c := got[0]; c == nil || c.reasoning != "never closed" || c.content != "<think>never closed" || !strings.Contains(c.parseError, "not the whole answer's") {
		t.Errorf("unclosed thought: %+v", c)
	}
}
