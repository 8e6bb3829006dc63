package granitestage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/granite"
)

// answered is what a client makes of one choice of the stage's answer: a whole chat completion's
// message, or a stream's deltas put together and its finish chunk's parse_error.
type answered struct {
	content, reasoning, parseError string
	hasReasoning                   bool
	tools                          []string
	refused                        string // the request's 400, before any upstream call
}

// throughStage asks the stage for a chat completion of body (stream: true or not) from an
// upstream whose model writes text: whole, or streamed in pieces of size runes, as upstreams
// send whole characters.
func throughStage(t testing.TB, version string, body []byte, text string, stream bool, size int) answered {
	t.Helper()
	up := func(_ context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		if !stream {
			b, _ := json.Marshal(map[string]any{"id": "cmpl-1", "object": "text_completion", "model": "granite",
				"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": "stop"}}})
			return &pipeline.Response{StatusCode: http.StatusOK, Body: pipeline.NewBody(b, pipeline.Usage{})}, nil
		}
		var chunks [][]byte
		for rest := text; rest != ""; {
			n := 0
			for i := 0; i < size && n < len(rest); i++ {
				_, w := utf8.DecodeRuneInString(rest[n:])
				n += w
			}
			c, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"index": 0, "text": rest[:n], "finish_reason": nil}}})
			chunks, rest = append(chunks, c), rest[n:]
		}
		chunks = append(chunks, []byte(`{"choices":[{"index":0,"text":"","finish_reason":"stop"}]}`))
		return &pipeline.Response{StatusCode: http.StatusOK, Stream: true, Body: pipeline.NewEventBody(chunks, pipeline.Usage{})}, nil
	}
	e, ok := granite.NewDefaultRegistry().Lookup(version)
	if !ok {
		t.Fatalf("no processor %s", version)
	}
	if stream {
		body = append([]byte(`{"stream":true,`), body[1:]...)
	}
	req, err := pipeline.NewRequest(chatPath, body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Stage(e, Options{})(up)(context.Background(), req)
	if err != nil {
		var pe *pipeline.Error
		if errors.As(err, &pe) && pe.Status == http.StatusBadRequest {
			return answered{refused: pe.Message}
		}
		t.Fatal(err)
	}
	out, err := io.ReadAll(res.Body)
	res.Body.Finish(nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d, %v: %.300s", res.StatusCode, err, out)
	}
	var a answered
	if !stream {
		var whole struct {
			Choices []struct {
				Message struct {
					Content          *string
					ReasoningContent *string                                    `json:"reasoning_content"`
					ParseError       string                                     `json:"parse_error"`
					ToolCalls        []struct{ Function struct{ Name string } } `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal(out, &whole); err != nil || len(whole.Choices) != 1 {
			t.Fatalf("%v: %.300s", err, out)
		}
		m := whole.Choices[0].Message
		if m.Content != nil {
			a.content = *m.Content
		}
		if m.ReasoningContent != nil {
			a.reasoning, a.hasReasoning = *m.ReasoningContent, true
		}
		a.parseError = m.ParseError
		for _, tc := range m.ToolCalls {
			a.tools = append(a.tools, tc.Function.Name)
		}
		return a
	}
	var content, reasoning strings.Builder
	ev := pipeline.NewEvents(strings.NewReader(string(out)))
	for {
		data, err := ev.Next()
		if err != nil {
			break
		}
		var c oldChunk
		if err := json.Unmarshal(data, &c); err != nil {
			t.Fatalf("%v: %.300s", err, data)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				content.WriteString(*ch.Delta.Content)
			}
			if ch.Delta.ReasoningContent != nil {
				reasoning.WriteString(*ch.Delta.ReasoningContent)
			}
			for _, tc := range ch.Delta.ToolCalls {
				a.tools = append(a.tools, tc.Function.Name)
			}
			if ch.FinishReason != nil {
				a.parseError = ch.Delta.ParseError
			}
		}
	}
	a.content, a.reasoning = content.String(), reasoning.String()
	return a
}

// streamIsWhole checks that a stream of text through the stage says what the whole answer says:
// the same content and parse_error, and the same reasoning when the whole answer has some (a
// thought the model never closed has been let out as reasoning; the whole answer has it as
// content, and its parse_error says so).
func streamIsWhole(t testing.TB, version string, body []byte, text string, size int) (whole, streamed answered) {
	t.Helper()
	whole = throughStage(t, version, body, text, false, 0)
	streamed = throughStage(t, version, body, text, true, size)
	switch {
	case whole.refused != "" || streamed.refused != "":
		if whole.refused != streamed.refused {
			t.Fatalf("refused %q whole, %q streamed", whole.refused, streamed.refused)
		}
	case streamed.content != whole.content:
		t.Fatalf("%d-rune chunks: streamed content %d bytes %.200q...%.200q\nwhole %d bytes %.200q...%.200q\n(text %.300q)", size,
			len(streamed.content), streamed.content, tail(streamed.content), len(whole.content), whole.content, tail(whole.content), text)
	case streamed.parseError != whole.parseError:
		t.Fatalf("%d-rune chunks: streamed parse_error %q, whole %q (text %.300q)", size, streamed.parseError, whole.parseError, text)
	case whole.hasReasoning && streamed.reasoning != whole.reasoning:
		t.Fatalf("%d-rune chunks: streamed reasoning %.300q, whole %.300q (text %.300q)", size, streamed.reasoning, whole.reasoning, text)
	case !whole.hasReasoning && streamed.reasoning != "" && whole.parseError == "":
		t.Fatalf("%d-rune chunks: reasoning streamed, none in the whole answer and no parse_error (text %.300q)", size, text)
	case fmt.Sprint(streamed.tools) != fmt.Sprint(whole.tools):
		t.Fatalf("%d-rune chunks: streamed tool calls %v, whole %v", size, streamed.tools, whole.tools)
	}
	return whole, streamed
}

func tail(s string) string { return s[max(0, len(s)-200):] }

// A malformed model output streams the same text the whole answer carries, and the same
// parse_error, large ones included (issue 35: a 3.1 MB output whose stream carried ~50
// characters of content and a parse_error, where the whole answer carried all of it).
func TestStreamIsWholeAnswer(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("Limerick won the All-Ireland in 2018, 2020, 2021 and 2022. ", 3<<20/60)
	const (
		think    = `{"model":"granite","messages":[{"role":"user","content":"q"}],"thinking":true}`
		cites32  = `{"model":"granite","messages":[{"role":"user","content":"q"}],"documents":[{"text":"Dog info"}],"controls":{"citations":true,"hallucinations":true}}`
		cites33  = `{"model":"granite","messages":[{"role":"user","content":"q"}],"documents":[{"doc_id":1,"text":"Dog info"}],"controls":{"citations":true}}`
		plain    = `{"model":"granite","messages":[{"role":"user","content":"q"}]}`
		withTool = `{"model":"granite","messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f"}}]}`
	)
	for _, tc := range []struct {
		name, version, body, text string
		parseError                bool
	}{
		{"a thought cut off", "granite3.3", think, "<think>" + big, true},
		{"a 3.2 thought cut off", "granite3.2", think, "Here is my thought process:\n" + big, true},
		{"a response cut off", "granite3.3", think, "<think>Let me see.</think><response>" + big, false},
		{"a section header twice", "granite3.2", cites32, "Mad about dog! <co>1</co> " + big +
			"\n\n# Citations:\n<co>1</co> Document 0: \"Dog info\"\n\n# Citations:\n<co>1</co> Document 0: \"Dog\"", true},
		{"a header twice, no controls", "granite3.2", plain, "  Plain " + big + "\n# Hallucinations:\n1. Risk low: x\n# Hallucinations:\n", true},
		{"a 3.3 header twice", "granite3.3", cites33, "Mad about dog!<|start_of_cite|>{\"document_id\": \"1\"}<|end_of_cite|> " + big +
			"<|start_of_plugin|>{\"id\": \"citation\"}\n1: \"Dog info\"{\"id\": \"citation\"}<|end_of_plugin|>", true},
		{"a leaked section after whitespace", "granite3.3", plain, "\n " + big + "{\"id\": \"citation\"}\n1: \"x\"", false},
		{"sections past MaxOutputBytes", "granite3.2", cites32, "Mad about dog! <co>1</co> " + big + big +
			"\n# Citations:\n<co>1</co> Document 0: \"Dog info\"\n", true},
		{"a tool call that is not JSON", "granite3.3", withTool, "<|tool_call|>[{\"name\": \"f\", " + big, false},
		{"small", "granite3.3", think, "<think>a</think>\n<response>", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := 5
			if len(tc.text) > 1<<20 {
				size = 64 // the same pieces of parse, fewer chunks to write and read
			}
			whole, streamed := streamIsWhole(t, tc.version, []byte(tc.body), tc.text, size)
			if whole.refused != "" {
				t.Fatal(whole.refused)
			}
			if (whole.parseError != "") != tc.parseError {
				t.Errorf("parse_error %q", whole.parseError)
			}
			if len(tc.text) > 1<<20 && len(streamed.content)+len(streamed.reasoning) < len(big) {
				t.Errorf("the stream carried %d bytes of a %d-byte output", len(streamed.content)+len(streamed.reasoning), len(tc.text))
			}
		})
	}
}

// FuzzStreamIsWholeAnswer: for any model output, under each processor and request shape that
// switches a parser on, a stream through the stage carries what the whole answer carries
// (streamIsWhole), in chunks of a fuzzed number of characters.
func FuzzStreamIsWholeAnswer(f *testing.F) {
	for _, s := range []string{
		"<think>a</think><response>b</response>", "<think>cut off", "<think>a</think><response>cut off",
		"Here is my thought process: a Here is my response: b", "Here's my thought process: a Here is my thought process: b Here's my response: c",
		"A <co>1</co> b.\n# Citations:\n<co>1</co> Document 0: \"x\"\n# Citations:\n",
		"x<|start_of_cite|>{\"document_id\": \"1\"}<|end_of_cite|> y<|start_of_plugin|>{\"id\": \"citation\"}\n1: \"x\"<|end_of_plugin|>",
		"  a {\"document_id\": \"7\"} b {\"id\": \"hallucination\"} c", `<|tool_call|>[{"name": "f", "arguments": {}}]`, "[1, 2] is a list",
		"<think></think>x", "\u3000<think>a</think>\u3000<response>\u3000b\u3000</response>",
	} {
		f.Add(s, uint8(0), uint8(1))
		f.Add(s, uint8(0xff), uint8(3))
	}
	f.Fuzz(func(t *testing.T, text string, mode, size uint8) {
		version := "granite3.2"
		if mode&1 != 0 {
			version = "granite3.3"
		}
		body := `{"model":"granite","messages":[{"role":"user","content":"q"}]`
		if mode&2 != 0 {
			body += `,"thinking":true`
		}
		if mode&4 != 0 {
			body += `,"tools":[{"type":"function","function":{"name":"f"}}]`
		}
		if mode&8 != 0 {
			body += `,"documents":[{"doc_id":1,"text":"x"}],"controls":{"citations":true,"hallucinations":true}`
		}
		body += "}"
		// What an upstream sends is JSON: its text is UTF-8.
		streamIsWhole(t, version, []byte(body), strings.ToValidUTF8(text, "\uFFFD"), int(size%16)+1)
	})
}
