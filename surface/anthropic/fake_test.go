package anthropic_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	asdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/infergate/infergate/surface/anthropic"
)

// reply is what the fake chat handler answers for one model: an error, or an answer it sends
// whole or streamed as vLLM streams it.
type reply struct {
	status  int    // an error status, answered with errBody
	errBody string // OpenAI's error object; "" for a default one
	header  map[string]string

	reasoning, text string
	tools           []toolCall
	finish          string
	vllmStop        string // vLLM's choices[].stop_reason, a stop string
	prompt, compl   int64
	cached          int64
	// die ends a stream after its first content chunk the way the gateway's chat handler does
	// when its upstream fails: an in-band error, then http.ErrAbortHandler.
	die bool
	// whole answers a stream request with a whole completion, as a response cache may.
	whole bool
}

type toolCall struct{ id, name, args string }

// fakeChat stands in for the gateway's /v1/chat/completions handler: it checks each request is
// valid JSON, records it, and answers the reply configured for its model.
type fakeChat struct {
	mu      sync.Mutex
	replies map[string]reply
	bodies  map[string][]byte
	headers map[string]http.Header
}

func newFakeChat(replies map[string]reply) *fakeChat {
	return &fakeChat{replies: replies, bodies: map[string][]byte{}, headers: map[string]http.Header{}}
}

// last is the last request body for model, decoded.
func (f *fakeChat) last(t testing.TB, model string) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var m map[string]any
	if err := json.Unmarshal(f.bodies[model], &m); err != nil {
		t.Fatalf("no request recorded for %s: %v", model, err)
	}
	return m
}

func (f *fakeChat) lastHeader(model string) http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.headers[model]
}

func (f *fakeChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if r.URL.Path != "/v1/chat/completions" || json.Unmarshal(body, &req) != nil {
		http.Error(w, `{"error":{"message":"fake: not a chat request: `+strconv.Quote(string(body))+`","type":"invalid_request_error"}}`, http.StatusTeapot)
		return
	}
	f.mu.Lock()
	f.bodies[req.Model] = body
	f.headers[req.Model] = r.Header.Clone()
	rep, ok := f.replies[req.Model]
	f.mu.Unlock()
	if !ok {
		rep = reply{text: "Hello!", finish: "stop", prompt: 10, compl: 2}
	}
	w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
	w.Header().Set("X-Infergate-Endpoint", "fake")
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if rep.status != 0 {
		b := rep.errBody
		if b == "" {
			b = fmt.Sprintf(`{"error":{"message":"fake failure %d","type":"server_error","param":null,"code":null}}`, rep.status)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, b)
		return
	}
	if req.Stream && !rep.whole {
		f.stream(w, rep)
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil}
	if rep.text != "" {
		msg["content"] = rep.text
	}
	if rep.reasoning != "" {
		msg["reasoning_content"] = rep.reasoning
	}
	if len(rep.tools) > 0 {
		var tcs []any
		for _, tc := range rep.tools {
			tcs = append(tcs, map[string]any{"id": tc.id, "type": "function", "function": map[string]any{"name": tc.name, "arguments": tc.args}})
		}
		msg["tool_calls"] = tcs
	}
	choice := map[string]any{"index": 0, "message": msg, "finish_reason": rep.finish}
	if rep.vllmStop != "" {
		choice["stop_reason"] = rep.vllmStop
	}
	out := map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": req.Model, "choices": []any{choice},
		"usage": usageObj(rep)}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func usageObj(rep reply) map[string]any {
	u := map[string]any{"prompt_tokens": rep.prompt, "completion_tokens": rep.compl, "total_tokens": rep.prompt + rep.compl}
	if rep.cached > 0 {
		u["prompt_tokens_details"] = map[string]any{"cached_tokens": rep.cached}
	}
	return u
}

func (f *fakeChat) stream(w http.ResponseWriter, rep reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(delta map[string]any, finish any, extra map[string]any) {
		choice := map[string]any{"index": 0, "delta": delta, "finish_reason": finish}
		for k, v := range extra {
			choice[k] = v
		}
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []any{choice}})
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
		_ = http.NewResponseController(w).Flush()
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil, nil)
	for _, part := range halves(rep.reasoning) {
		send(map[string]any{"reasoning_content": part}, nil, nil)
	}
	for i, part := range halves(rep.text) {
		send(map[string]any{"content": part}, nil, nil)
		if rep.die && i == 0 {
			_, _ = io.WriteString(w, "\n\ndata: {\"error\":{\"message\":\"upstream fake failed mid-stream: EOF\",\"type\":\"server_error\",\"param\":null,\"code\":\"upstream_stream_error\"}}\n\n")
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
	}
	for i, tc := range rep.tools {
		send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": tc.id, "type": "function",
			"function": map[string]any{"name": tc.name, "arguments": ""}}}}, nil, nil)
		for _, part := range halves(tc.args) {
			send(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": part}}}}, nil, nil)
		}
	}
	extra := map[string]any{}
	if rep.vllmStop != "" {
		extra["stop_reason"] = rep.vllmStop
	}
	send(map[string]any{}, rep.finish, extra)
	b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []any{}, "usage": usageObj(rep)})
	_, _ = fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", b)
}

// halves splits s in two pieces (one when short), as a stream spreads text over chunks.
func halves(s string) []string {
	if s == "" {
		return nil
	}
	if len(s) < 2 {
		return []string{s}
	}
	return []string{s[:len(s)/2], s[len(s)/2:]}
}

// testServer serves h on a loopback socket behind AcceptAPIKey, as the gateway mounts it, and
// returns an SDK client for it.
func testServer(t testing.TB, opts anthropic.Options) (*httptest.Server, asdk.Client) {
	t.Helper()
	h := anthropic.New(opts)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/messages", h)
	mux.Handle("POST /v1/messages/count_tokens", h)
	mux.Handle("POST /olla/anthropic/v1/messages", h)
	mux.Handle("GET /v1/models", anthropic.WrapModels(http.HandlerFunc(openAIModels)))
	mux.Handle("GET /v1/models/{id}", anthropic.WrapModels(http.HandlerFunc(openAIModels)))
	srv := httptest.NewServer(anthropic.AcceptAPIKey(mux))
	t.Cleanup(srv.Close)
	// Anthropic's x-api-key, as Claude Code and curl send it (this SDK sends Authorization: Bearer).
	c := asdk.NewClient(option.WithBaseURL(srv.URL+"/"), option.WithHeader("X-Api-Key", "test-key"), option.WithMaxRetries(0))
	return srv, c
}

// openAIModels is a gateway's /v1/models in OpenAI's shape.
func openAIModels(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id != "" {
		if id != "llama" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"message":"The model `+"`"+id+"`"+` does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"llama","object":"model","created":1700000000,"owned_by":"vllm"}`)
		return
	}
	_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"bge","object":"model","created":1700000000,"owned_by":"vllm"},`+
		`{"id":"llama","object":"model","created":1700000001,"owned_by":"vllm"},{"id":"qwen","object":"model","created":1700000002,"owned_by":"vllm"}]}`)
}

// newServer serves h on a loopback socket until the test ends and returns its URL.
func newServer(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
