package granitestage_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/stage/granitestage"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

const sellerQ = "Find the fastest way for a seller to visit all the cities in their region"

func golden(t *testing.T, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"..", "..", "lib", "granite", "testdata"}, parts...)...))
	require.NoError(t, err)
	return string(b)
}

// fake is an upstream serving /v1/completions: it records each request body and answers with
// the text set, or with an error status.
type fake struct {
	mu     sync.Mutex
	bodies []map[string]any
	text   string
	status int
	// A streamed answer goes out in pieces of a few characters; with gate set, the pieces from
	// byte holdAt on wait until gate is closed.
	gate   chan struct{}
	holdAt int
}

func (f *fake) set(text string, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.text, f.status = text, status
}

func (f *fake) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...)
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"granite","object":"model","owned_by":"fake"}]}`)
		return
	case "/v1/completions":
	default:
		http.NotFound(w, r)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	text, status := f.text, f.status
	f.mu.Unlock()
	if body["stream"] == true && status == 0 {
		f.stream(w, r, body, text)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprint(w, `{"error":{"message":"engine on fire","type":"server_error","param":null,"code":"fire"}}`)
		return
	}
	out, _ := json.Marshal(map[string]any{"id": "cmpl-up1", "object": "text_completion", "created": 1, "model": "granite",
		"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
	_, _ = w.Write(out)
}

// stream answers with an SSE completion stream of text, a few characters a chunk.
func (f *fake) stream(w http.ResponseWriter, r *http.Request, body map[string]any, text string) {
	f.mu.Lock()
	gate, holdAt := f.gate, f.holdAt
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	rs := []rune(text)
	at := 0
	for i := 0; i < len(rs); i += 5 {
		piece := string(rs[i:min(i+5, len(rs))])
		if gate != nil && at >= holdAt {
			select {
			case <-gate:
				gate = nil
			case <-r.Context().Done():
				return
			}
		}
		at += len(piece)
		send(map[string]any{"id": "cmpl-up1", "object": "text_completion", "created": 1, "model": "granite",
			"choices": []any{map[string]any{"index": 0, "text": piece, "finish_reason": nil}}})
	}
	send(map[string]any{"id": "cmpl-up1", "object": "text_completion", "created": 1, "model": "granite",
		"choices": []any{map[string]any{"index": 0, "text": "", "finish_reason": "stop"}}})
	if so, _ := body["stream_options"].(map[string]any); so["include_usage"] == true {
		send(map[string]any{"id": "cmpl-up1", "object": "text_completion", "created": 1, "model": "granite", "choices": []any{},
			"usage": map[string]any{"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

type env struct {
	up  *fake
	url string
}

// start serves model "granite" with Granite 3.3's processor (the date of granite-io's goldens)
// through the gateway's OpenAI proxy, whose one upstream is the fake.
func start(t *testing.T) *env {
	t.Helper()
	return startWith(t, "ibm-granite/granite-3.3-8b-instruct")
}

// startWith is start with the processor registered under name.
func startWith(t *testing.T, name string) *env {
	t.Helper()
	day, _ := time.Parse("January 02, 2006", "March 18, 2025")
	reg := granite.NewDefaultRegistry(granite.WithClock(func() time.Time { return day }))
	entry, ok := reg.Lookup(name)
	require.True(t, ok)
	return startEntry(t, entry)
}

// startEntry serves model "granite" with entry.
func startEntry(t *testing.T, entry granite.Entry) *env {
	t.Helper()
	e := &env{up: &fake{}}
	us := httptest.NewServer(e.up)
	t.Cleanup(us.Close)
	stage := granitestage.Stage(entry, granitestage.Options{NewID: func() string { return "chatcmpl-g1" }})
	p, err := openai.New(openai.Options{
		Endpoints: []upstream.Endpoint{{Name: "engine", URL: us.URL, Type: upstream.TypeVLLM, CheckInterval: time.Hour, CheckTimeout: time.Second}},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Stages:    pipeline.ForAll(stage),
	})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	e.url = srv.URL
	require.Eventually(t, func() bool { return len(p.Models()) == 1 }, 5*time.Second, 5*time.Millisecond)
	return e
}

func (e *env) sdk() *oai.Client {
	c := oai.NewClient(option.WithBaseURL(e.url+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	return &c
}

func (e *env) post(t *testing.T, body string, header ...string) (*http.Response, string) {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, e.url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	r.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

// Thinking on: the upstream gets granite-io's golden prompt as a completion, and the SDK gets the
// recorded output split into reasoning_content and content.
func TestThinking(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.up.set(golden(t, "g33", "out", "test_raw_reasoning_output.txt"), 0)
	got, err := e.sdk().Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "granite",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(sellerQ)}, MaxCompletionTokens: oai.Int(300), Temperature: oai.Float(0)},
		option.WithJSONSet("chat_template_kwargs", map[string]any{"thinking": true}))
	require.NoError(t, err)
	reqs := e.up.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, golden(t, "g33", "in", "test_reasoning_prompt.txt"), reqs[0]["prompt"], "granite-io's golden prompt")
	assert.Equal(t, "granite", reqs[0]["model"])
	assert.Equal(t, false, reqs[0]["stream"])
	assert.EqualValues(t, 300, reqs[0]["max_tokens"], "max_completion_tokens as max_tokens")
	assert.EqualValues(t, 0, reqs[0]["temperature"])
	for _, k := range []string{"messages", "chat_template_kwargs", "max_completion_tokens", "thinking"} {
		assert.NotContains(t, reqs[0], k)
	}
	assert.Equal(t, "chatcmpl-g1", got.ID)
	require.Len(t, got.Choices, 1)
	msg := got.Choices[0].Message
	assert.Equal(t, golden(t, "g33", "out", "test_reasoning_output_processor_response.txt"), msg.Content)
	var reasoning string
	require.NoError(t, json.Unmarshal([]byte(msg.JSON.ExtraFields["reasoning_content"].Raw()), &reasoning))
	assert.Equal(t, golden(t, "g33", "out", "test_reasoning_output_processor_thought.txt"), reasoning)
	assert.Equal(t, "stop", got.Choices[0].FinishReason)
	assert.Equal(t, int64(11), got.Usage.PromptTokens, "the upstream's usage")
	assert.Equal(t, int64(18), got.Usage.TotalTokens)
}

// Documents and citations (top-level members, as granite-io users send them): the answer carries
// citations and documents as extra members, and vLLM is asked to keep special tokens.
func TestCitations(t *testing.T) {
	t.Parallel()
	e := start(t)
	src := golden(t, "g33", "out", "test_document_source.txt")
	e.up.set(golden(t, "g33", "out", "test_output_with_citation_from_source.txt"), 0)
	docs, _ := json.Marshal([]any{map[string]any{"doc_id": 1, "text": src}})
	res, body := e.post(t, `{"model":"granite","messages":[{"role":"user","content":"Tell me about Limerick."}],
		"documents":`+string(docs)+`,"controls":{"citations":true}}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Empty(t, res.Header.Get(granitestage.ParseErrorHeader))
	reqs := e.up.requests()
	require.Len(t, reqs, 1)
	assert.Equal(t, false, reqs[0]["skip_special_tokens"])
	assert.Contains(t, reqs[0]["prompt"], `<|start_of_role|>document {"document_id": "1"}<|end_of_role|>`)
	var got struct {
		Choices []struct {
			Message struct {
				Content   string
				Citations []granite.Citation
				Documents []granite.CitedDocument
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	m := got.Choices[0].Message
	require.Len(t, m.Citations, 1)
	assert.Equal(t, "1", m.Citations[0].DocID)
	assert.Equal(t, 124, m.Citations[0].ResponseBegin)
	assert.Equal(t, 709, m.Citations[0].ResponseEnd)
	require.Len(t, m.Documents, 1)
	assert.Equal(t, src, m.Documents[0].Text)
	assert.Contains(t, m.Content, "most successful hurling team")
}

var weatherTool = oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{Name: "get_weather", Description: oai.String("Get weather"),
	Parameters: oai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})

// Tools: OpenAI's definitions reach the prompt flat, the model's tool call comes back as
// OpenAI's tool_calls, and the client can send it back with the tool's answer.
func TestTools(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.up.set(`<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Boston"}}]`, 0)
	msgs := []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Weather in Boston?")}
	params := oai.ChatCompletionNewParams{Model: "granite", Messages: msgs, Tools: []oai.ChatCompletionToolUnionParam{weatherTool}}
	got, err := e.sdk().Chat.Completions.New(context.Background(), params)
	require.NoError(t, err)
	prompt := e.up.requests()[0]["prompt"].(string)
	assert.Contains(t, prompt, "<|start_of_role|>available_tools<|end_of_role|>[\n    {\n        \"name\": \"get_weather\",")
	require.Len(t, got.Choices, 1)
	c := got.Choices[0]
	assert.Equal(t, "tool_calls", c.FinishReason)
	require.Len(t, c.Message.ToolCalls, 1)
	tc := c.Message.ToolCalls[0]
	assert.Equal(t, "get_weather", tc.Function.Name)
	assert.JSONEq(t, `{"city":"Boston"}`, tc.Function.Arguments)
	assert.Equal(t, "function", string(tc.Type))
	assert.NotEmpty(t, tc.ID)

	// The round trip: the assistant's call and the tool's answer go back.
	e.up.set("It is sunny in Boston.", 0)
	params.Messages = append(msgs, c.Message.ToParam(), oai.ToolMessage(`{"sky":"sunny"}`, tc.ID))
	got, err = e.sdk().Chat.Completions.New(context.Background(), params)
	require.NoError(t, err)
	assert.Equal(t, "It is sunny in Boston.", got.Choices[0].Message.Content)
	assert.Equal(t, "stop", got.Choices[0].FinishReason)
	prompt = e.up.requests()[1]["prompt"].(string)
	assert.Contains(t, prompt, `<|start_of_role|>tool<|end_of_role|>{"sky":"sunny"}<|end_of_text|>`)
}

// What Granite's format cannot express, or a body of the wrong shape, is a 400 before any
// upstream call.
func TestInvalid(t *testing.T) {
	t.Parallel()
	e := start(t)
	_, err := e.sdk().Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "granite",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("q")}, Tools: []oai.ChatCompletionToolUnionParam{weatherTool}},
		option.WithJSONSet("thinking", true))
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	assert.Equal(t, "thinking_with_tools", apiErr.Code)
	for _, c := range []struct{ body, param string }{
		{`{"model":"granite","messages":"hi"}`, "messages"},
		{`{"model":"granite","messages":[]}`, "messages"},
		{`{"model":"granite","messages":[{"role":"robot","content":"x"}]}`, "messages[0].role"},
		{`{"model":"granite","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "messages[0].content"},
		{`{"model":"granite","messages":[{"role":"user","content":"x"}],"documents":{"text":"x"}}`, "documents"},
		{`{"model":"granite","messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"thinking":"yes"}}`, "thinking"},
		{`{"model":"granite","messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[1]}`, "chat_template_kwargs"},
		{`{"model":"granite","messages":[{"role":"user","content":"x"}],"controls":{"citations":"yes"}}`, "controls"},
		{`{"model":"granite","messages":[{"role":"user","content":"x"},{"role":"user","content":7}]}`, "messages[1].content"},
		{`{"model":"granite","messages":[{"role":"user","content":"x"}],"logprobs":true}`, "logprobs"},
	} {
		res, body := e.post(t, c.body)
		assert.Equal(t, http.StatusBadRequest, res.StatusCode, c.body)
		var raw struct {
			Error struct{ Param string }
		}
		require.NoError(t, json.Unmarshal([]byte(body), &raw), body)
		assert.Equal(t, c.param, raw.Error.Param, body)
	}
	assert.Empty(t, e.up.requests(), "nothing reached the upstream")
}

// stream: true streams the upstream's completion through the incremental parser: reasoning and
// content deltas that add up to the whole answer's parse, then the finish reason and the usage
// chunk asked for.
func TestStream(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.up.set(golden(t, "g33", "out", "test_raw_reasoning_output.txt"), 0)
	stream := e.sdk().Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: "granite",
		Messages:      []oai.ChatCompletionMessageParamUnion{oai.UserMessage(sellerQ)},
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}}, option.WithJSONSet("thinking", true))
	var content, reasoning strings.Builder
	var chunks []oai.ChatCompletionChunk
	for stream.Next() {
		c := stream.Current()
		chunks = append(chunks, c)
		for _, ch := range c.Choices {
			content.WriteString(ch.Delta.Content)
			if r, ok := ch.Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var s string
				require.NoError(t, json.Unmarshal([]byte(r.Raw()), &s))
				reasoning.WriteString(s)
			}
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, true, e.up.requests()[0]["stream"], "the upstream is asked for a stream")
	assert.Equal(t, map[string]any{"include_usage": true}, e.up.requests()[0]["stream_options"])
	assert.Equal(t, golden(t, "g33", "out", "test_reasoning_output_processor_response.txt"), content.String())
	assert.Equal(t, golden(t, "g33", "out", "test_reasoning_output_processor_thought.txt"), reasoning.String())
	require.Greater(t, len(chunks), 3)
	assert.Equal(t, "assistant", chunks[0].Choices[0].Delta.Role)
	assert.Equal(t, "chatcmpl-g1", chunks[0].ID)
	assert.Equal(t, "stop", chunks[len(chunks)-2].Choices[0].FinishReason)
	assert.Equal(t, int64(18), chunks[len(chunks)-1].Usage.TotalTokens)
}

// A streamed answer with citations carries them in its finish chunk's delta.
func TestStreamCitations(t *testing.T) {
	t.Parallel()
	e := start(t)
	src := golden(t, "g33", "out", "test_document_source.txt")
	e.up.set(golden(t, "g33", "out", "test_output_with_citation_from_source.txt"), 0)
	docs, _ := json.Marshal([]any{map[string]any{"doc_id": 1, "text": src}})
	res, body := e.post(t, `{"model":"granite","stream":true,"messages":[{"role":"user","content":"Tell me about Limerick."}],
		"chat_template_kwargs":{"documents":`+string(docs)+`,"controls":{"citations":true}}}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	assert.Contains(t, body, `"finish_reason":"stop"`)
	assert.Contains(t, body, `"citations":[{"citation_id":"0","doc_id":"1"`)
	assert.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"))
}

// An upstream's error answer passes on unchanged.
func TestUpstreamError(t *testing.T) {
	t.Parallel()
	e := start(t)
	e.up.set("", http.StatusInternalServerError)
	res, body := e.post(t, `{"model":"granite","messages":[{"role":"user","content":"q"}]}`)
	assert.Equal(t, http.StatusInternalServerError, res.StatusCode)
	assert.Contains(t, body, "engine on fire")
	assert.NotEmpty(t, e.up.requests())
}

// Output the parser cannot read is the content, unparsed, with a header saying why; and the
// debug header asks for the rendered prompt. (Granite 3.2 parses citations without controls.)
func TestParseErrorAndDebugPrompt(t *testing.T) {
	t.Parallel()
	e := startWith(t, "granite3.2")
	text := "A.\n# Citations:\n<co>1</co> Document 0: \"x\"\n# Citations:\n"
	e.up.set(text, 0)
	res, body := e.post(t, `{"model":"granite","messages":[{"role":"user","content":"q"}]}`, granitestage.DebugHeader, "prompt")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var got oai.ChatCompletion
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	assert.Equal(t, text, got.Choices[0].Message.Content)
	assert.Contains(t, res.Header.Get(granitestage.ParseErrorHeader), "choice 0: ")
	var pe struct {
		Choices []struct {
			Message struct {
				ParseError string `json:"parse_error"`
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &pe))
	assert.Equal(t, strings.TrimPrefix(res.Header.Get(granitestage.ParseErrorHeader), "choice 0: "), pe.Choices[0].Message.ParseError,
		"the message carries the problem whole too")
	assert.NotEmpty(t, pe.Choices[0].Message.ParseError)
	p, err := base64.StdEncoding.DecodeString(res.Header.Get(granitestage.PromptHeader))
	require.NoError(t, err)
	assert.Equal(t, e.up.requests()[0]["prompt"], string(p))

	res, _ = e.post(t, `{"model":"granite","messages":[{"role":"user","content":"q"}]}`)
	assert.Empty(t, res.Header.Get(granitestage.PromptHeader), "only when asked")
}

// The first reasoning and content deltas reach the client while the upstream still holds back
// the rest of its answer: the fake sends the tail only after the test has seen content. The
// stream then ends with the whole answer's parse.
func TestStreamFirstContentBeforeUpstreamEnds(t *testing.T) {
	t.Parallel()
	e := start(t)
	text := "<think>Six sevens.</think>\n<response>It is 42. Every time you multiply six by seven, the answer is forty-two.</response>"
	gate := make(chan struct{})
	e.up.mu.Lock()
	e.up.text, e.up.gate, e.up.holdAt = text, gate, strings.Index(text, "multiply")
	e.up.mu.Unlock()
	watchdog := time.AfterFunc(10*time.Second, func() { close(gate) }) // only against a hang
	defer watchdog.Stop()

	stream := e.sdk().Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: "granite",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("6*7?")}}, option.WithJSONSet("thinking", true))
	var content, reasoning strings.Builder
	var early string
	released := false
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			content.WriteString(ch.Delta.Content)
			if r, ok := ch.Delta.JSON.ExtraFields["reasoning_content"]; ok {
				var s string
				require.NoError(t, json.Unmarshal([]byte(r.Raw()), &s))
				reasoning.WriteString(s)
			}
		}
		if !released && content.Len() > 0 {
			released, early = true, content.String()
			if watchdog.Stop() {
				close(gate)
			}
		}
	}
	require.NoError(t, stream.Err())
	require.True(t, released)
	assert.Equal(t, "Six sevens.", reasoning.String())
	assert.True(t, strings.HasPrefix("It is 42.", early), "content before the upstream's tail: %q", early)
	assert.Equal(t, "It is 42. Every time you multiply six by seven, the answer is forty-two.", content.String())
}

// An entry with its own IO processor (here majority voting) is still answered by replaying
// its whole result: it may call the upstream several times (here three, as the fake answers
// one choice whatever n asks).
func TestStreamVotingReplays(t *testing.T) {
	t.Parallel()
	reg := granite.NewDefaultRegistry()
	base, _ := reg.Lookup("granite3.3")
	e := startEntry(t, granite.Voting(base, nil, 3))
	e.up.set("42", 0)
	_, body := e.post(t, `{"model":"granite","stream":true,"messages":[{"role":"user","content":"q"}]}`)
	assert.Contains(t, body, `"content":"42"`)
	require.Len(t, e.up.requests(), 3)
	assert.Equal(t, false, e.up.requests()[0]["stream"])
	assert.Equal(t, 3.0, e.up.requests()[0]["n"])
	assert.Equal(t, 1.0, e.up.requests()[2]["n"])
}
