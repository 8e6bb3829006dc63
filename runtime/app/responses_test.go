package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/guard"
	openai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// scriptedLLM is a fake upstream model server that serves chat completions (and, when native,
// /v1/responses), scripted as an agent's model behaves: asked with tools, it calls get_weather;
// given the tool's output, it answers with it; otherwise it says how many messages it saw and
// echoes the last one. It records every body by path.
type scriptedLLM struct {
	native bool
	mu     sync.Mutex
	bodies map[string][]string
}

func startScripted(t *testing.T, native bool) (*scriptedLLM, string) {
	s := &scriptedLLM{native: native, bodies: map[string][]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"agent-model","object":"model","owned_by":"vllm"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/responses", s.responses)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func (s *scriptedLLM) record(path string, body []byte) {
	s.mu.Lock()
	s.bodies[path] = append(s.bodies[path], string(body))
	s.mu.Unlock()
}

func (s *scriptedLLM) last(path string) (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bodies[path]
	if len(b) == 0 {
		return "", 0
	}
	return b[len(b)-1], len(b)
}

func (s *scriptedLLM) chat(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.record("/v1/chat/completions", body)
	var req struct {
		Stream   bool `json:"stream"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	last := req.Messages[len(req.Messages)-1]
	var text string
	_ = json.Unmarshal(last.Content, &text)
	var content, call string
	finish := "stop"
	switch {
	case last.Role == "tool":
		content = "The weather: " + text
	case len(req.Tools) > 0:
		call, finish = `{"city":"Paris"}`, "tool_calls"
	default:
		content = fmt.Sprintf("%d messages; last: %s", len(req.Messages), text)
	}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": content}
		if call != "" {
			msg["content"] = nil
			msg["tool_calls"] = []any{map[string]any{"id": "call_w1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": call}}}
		}
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "agent-model",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(delta map[string]any, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "agent-model",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	if call != "" {
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": "call_w1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": ""}}}}, nil)
		chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": call}}}}, nil)
	} else {
		half := len(content) / 2
		chunk(map[string]any{"content": content[:half]}, nil)
		chunk(map[string]any{"content": content[half:]}, nil)
	}
	chunk(map[string]any{}, finish)
	io.WriteString(w, "data: [DONE]\n\n")
}

// responses is a native /v1/responses, scripted as chat is: asked with tools and no tool output
// yet, it calls get_weather (call_w1, {"city":"Paris"}); given a function_call_output, it answers
// "The weather: <output>"; otherwise it says how many input items it got.
func (s *scriptedLLM) responses(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.record("/v1/responses", body)
	if !s.native {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"detail":"Not Found"}`)
		return
	}
	var req struct {
		Stream bool              `json:"stream"`
		Input  json.RawMessage   `json:"input"`
		Tools  []json.RawMessage `json:"tools"`
	}
	_ = json.Unmarshal(body, &req)
	n := 1
	var items []struct {
		Type   string `json:"type"`
		Output string `json:"output"`
	}
	if json.Unmarshal(req.Input, &items) == nil {
		n = len(items)
	}
	toolOutput, answered := "", false
	for _, it := range items {
		if it.Type == "function_call_output" {
			toolOutput, answered = it.Output, true
		}
	}
	text := fmt.Sprintf("native: %d input items", n)
	if answered {
		text = "The weather: " + toolOutput
	}
	call := len(req.Tools) > 0 && !answered
	item := fmt.Sprintf(`{"type":"message","id":"msg_nat1","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, text)
	if call {
		item = `{"type":"function_call","id":"fc_nat1","call_id":"call_w1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}`
	}
	s.mu.Lock()
	nth := len(s.bodies["/v1/responses"])
	s.mu.Unlock()
	resp := func(status, output string) string {
		return fmt.Sprintf(`{"id":"resp_nat%d","object":"response","created_at":1700000000,"status":%q,"model":"agent-model","output":[%s],"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"store":false,"usage":{"input_tokens":9,"output_tokens":4,"total_tokens":13,"input_tokens_details":{"cached_tokens":0},"output_tokens_details":{"reasoning_tokens":0}}}`, nth, status, output)
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, resp("completed", item))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	seq := 0
	ev := func(typ, rest string) {
		fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, rest)
		seq++
	}
	ev("response.created", `"response":`+resp("in_progress", ""))
	if call {
		ev("response.output_item.added", `"output_index":0,"item":{"type":"function_call","id":"fc_nat1","call_id":"call_w1","name":"get_weather","arguments":"","status":"in_progress"}`)
		ev("response.function_call_arguments.delta", `"item_id":"fc_nat1","output_index":0,"delta":"{\"city\":\"Paris\"}"`)
		ev("response.function_call_arguments.done", `"item_id":"fc_nat1","output_index":0,"name":"get_weather","arguments":"{\"city\":\"Paris\"}"`)
	} else {
		ev("response.output_item.added", `"output_index":0,"item":{"type":"message","id":"msg_nat1","status":"in_progress","role":"assistant","content":[]}`)
		ev("response.content_part.added", `"item_id":"msg_nat1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`)
		ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_nat1","output_index":0,"content_index":0,"delta":%q,"logprobs":[]`, text))
		ev("response.output_text.done", fmt.Sprintf(`"item_id":"msg_nat1","output_index":0,"content_index":0,"text":%q,"logprobs":[]`, text))
		ev("response.content_part.done", fmt.Sprintf(`"item_id":"msg_nat1","output_index":0,"content_index":0,"part":{"type":"output_text","text":%q,"annotations":[]}`, text))
	}
	ev("response.output_item.done", `"output_index":0,"item":`+item)
	ev("response.completed", `"response":`+resp("completed", item))
}

var weatherTool = responses.ToolParamOfFunction("get_weather", map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}, false)

// TestResponsesTranslated: the official OpenAI Go SDK's responses package against the gateway in
// front of an upstream that serves chat completions only (it answers /v1/responses with
// FastAPI's bare 404, which the gateway remembers): a response whole and streamed, a
// conversation continued by previous_response_id (the earlier turn's input and output reach
// the model, its instructions do not), a function tool's round trip by previous_response_id
// and by input items, retrieve, input_items, delete, and the errors the SDK raises.
func TestResponsesTranslated(t *testing.T) {
	t.Parallel()
	up, url := startScripted(t, false)
	const keyA, keyB = "sk-resp-a-1f2e", "sk-resp-b-9c8d"
	addr := serveYAML(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: chatonly, url: %s, type: vllm, check_interval: 1h}
auth:
  keys:
    - {name: a, sha256: %s}
    - {name: b, sha256: %s}
`, url, guard.HashKey(keyA), guard.HashKey(keyB)), io.Discard)
	ctx := context.Background()
	c := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(keyA), option.WithMaxRetries(0))
	require.Eventually(t, func() bool {
		_, err := c.Models.Get(ctx, "agent-model")
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)

	r1, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", Instructions: openai.String("Be brief."),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")}})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(r1.ID, "resp_"), r1.ID)
	assert.Equal(t, "2 messages; last: Hello", r1.OutputText(), "instructions and the input as chat messages")
	assert.Equal(t, responses.ResponseStatusCompleted, r1.Status)
	assert.EqualValues(t, 10, r1.Usage.InputTokens)
	_, n := up.last("/v1/responses")
	assert.Equal(t, 1, n, "asked /v1/responses once")

	// Continued: the model sees the first turn's input and output, not its instructions.
	r2, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", PreviousResponseID: openai.String(r1.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("And again")}})
	require.NoError(t, err)
	assert.Equal(t, "3 messages; last: And again", r2.OutputText())
	_, n = up.last("/v1/responses")
	assert.Equal(t, 1, n, "the endpoint is remembered as chat-only")

	// Streamed, continuing the second turn.
	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "agent-model", PreviousResponseID: openai.String(r2.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Stream it")}})
	var types []string
	var text strings.Builder
	var final responses.Response
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
		if ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	require.NoError(t, st.Err())
	assert.Equal(t, "5 messages; last: Stream it", text.String())
	assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}, types[:4])
	assert.Equal(t, "response.completed", types[len(types)-1])
	assert.Equal(t, "5 messages; last: Stream it", final.OutputText())
	got, err := c.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	require.NoError(t, err, "a streamed response is stored before its last event")
	assert.Equal(t, final.OutputText(), got.OutputText())
	assert.Equal(t, r2.ID, got.PreviousResponseID)

	// A function tool: the call, then its output by previous_response_id.
	r3, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", Tools: []responses.ToolUnionParam{weatherTool},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")}})
	require.NoError(t, err)
	require.Len(t, r3.Output, 1)
	call := r3.Output[0]
	assert.Equal(t, "function_call", call.Type)
	assert.Equal(t, "call_w1", call.CallID, "the upstream's tool-call id, verbatim")
	assert.Equal(t, "get_weather", call.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, call.Arguments.OfString)
	out := responses.ResponseInputItemParamOfFunctionCallOutput("sunny, 21C")
	out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
	r4, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", PreviousResponseID: openai.String(r3.ID),
		Tools: []responses.ToolUnionParam{weatherTool}, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}})
	require.NoError(t, err)
	assert.Equal(t, "The weather: sunny, 21C", r4.OutputText())
	chat, _ := up.last("/v1/chat/completions")
	assert.Contains(t, chat, `"tool_call_id":"call_w1"`)

	// The same round trip stateless: the call and its output as input items.
	items := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("Weather in Paris?", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(`{"city":"Paris"}`, "call_w1", "get_weather"),
		out,
	}
	r5, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", Store: openai.Bool(false),
		Tools: []responses.ToolUnionParam{weatherTool}, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: items}})
	require.NoError(t, err)
	assert.Equal(t, "The weather: sunny, 21C", r5.OutputText())
	_, err = c.Responses.Get(ctx, r5.ID, responses.ResponseGetParams{})
	assertAPIError(t, err, http.StatusNotFound, "", "store: false keeps nothing")

	// input_items: newest first by default, paged by item id.
	page, err := c.Responses.InputItems.List(ctx, r4.ID, responses.InputItemListParams{})
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, "function_call_output", page.Data[0].Type)
	assert.Equal(t, "call_w1", page.Data[0].CallID)
	assert.NotEmpty(t, page.Data[0].ID)

	// Another key sees none of it: the same 404, and a continuation's 400.
	other := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey(keyB), option.WithMaxRetries(0))
	_, err = other.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{})
	assertAPIError(t, err, http.StatusNotFound, "", "another key's response")
	_, err = other.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", PreviousResponseID: openai.String(r1.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
	assertAPIError(t, err, http.StatusBadRequest, "previous_response_id", "another key's previous response")
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", PreviousResponseID: openai.String("resp_unknown"),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
	assertAPIError(t, err, http.StatusBadRequest, "previous_response_id", "an unknown previous response")

	// Built-in tools are refused with OpenAI's error naming the tool.
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model",
		Tools: []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}})
	assertAPIError(t, err, http.StatusBadRequest, "tools[0].type", "a built-in tool")

	// A background response: queued at once, then polled to its end.
	bg, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Later")}})
	require.NoError(t, err)
	assert.Equal(t, responses.ResponseStatusQueued, bg.Status)
	assert.True(t, bg.Background)
	require.Eventually(t, func() bool {
		got, err := c.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{})
		return err == nil && got.Status == responses.ResponseStatusCompleted && got.OutputText() == "1 messages; last: Later"
	}, 5*time.Second, 10*time.Millisecond)

	// A stored response replayed as its events (GetStreaming), whole and from a sequence number
	// on; a background one waited for. Its tool call as the SDK's accumulator needs it.
	for _, id := range []string{r3.ID, bg.ID} {
		var types []string
		var final responses.Response
		st := c.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{})
		for st.Next() {
			ev := st.Current()
			assert.EqualValues(t, len(types), ev.SequenceNumber)
			types = append(types, ev.Type)
			if ev.Type == "response.completed" {
				final = ev.Response
			}
		}
		require.NoError(t, st.Err())
		assert.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added"}, types[:3])
		got, err := c.Responses.Get(ctx, id, responses.ResponseGetParams{})
		require.NoError(t, err)
		assert.Equal(t, got.ID, final.ID)
		assert.Equal(t, got.OutputText(), final.OutputText())
		st = c.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{StartingAfter: openai.Int(int64(len(types) - 2))})
		var tail []string
		for st.Next() {
			tail = append(tail, st.Current().Type)
		}
		require.NoError(t, st.Err())
		assert.Equal(t, types[len(types)-1:], tail)
	}
	running, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Wait for me")}})
	require.NoError(t, err)
	st2 := c.Responses.GetStreaming(ctx, running.ID, responses.ResponseGetParams{})
	var waited strings.Builder
	for st2.Next() {
		waited.WriteString(st2.Current().Delta)
	}
	require.NoError(t, st2.Err())
	assert.Equal(t, "1 messages; last: Wait for me", waited.String())

	// Cancel: a synchronous response cannot be. Delete, then it is gone.
	_, err = c.Responses.Cancel(ctx, r1.ID)
	assertAPIError(t, err, http.StatusBadRequest, "", "cancel")
	require.NoError(t, c.Responses.Delete(ctx, r1.ID))
	_, err = c.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{})
	assertAPIError(t, err, http.StatusNotFound, "", "deleted")
	assertAPIError(t, c.Responses.Delete(ctx, r1.ID), http.StatusNotFound, "", "deleted twice")
}

// TestResponsesNative: an upstream that serves /v1/responses itself gets the request, with
// store false, no previous_response_id, and the conversation written out as input items; the
// gateway keeps the state and the client sees what it asked for.
func TestResponsesNative(t *testing.T) {
	t.Parallel()
	up, url := startScripted(t, true)
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: native, url: %s, type: vllm, check_interval: 1h}
`, url), "agent-model")
	ctx := context.Background()
	c := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	r1, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")}})
	require.NoError(t, err)
	assert.Equal(t, "native: 1 input items", r1.OutputText())
	res, err := http.Get("http://" + addr + "/v1/responses/" + r1.ID)
	require.NoError(t, err)
	stored, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(stored), `"store":true`, "the client's store, not the upstream's")
	body, _ := up.last("/v1/responses")
	assert.Contains(t, body, `"store":false`)
	_, chats := up.last("/v1/chat/completions")
	assert.Zero(t, chats, "nothing translated")

	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "agent-model", PreviousResponseID: openai.String(r1.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("More")}})
	var final responses.Response
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	require.NoError(t, st.Err())
	assert.Equal(t, "native: 3 input items", final.OutputText(), "the first turn's input and output, then this one's")
	assert.Equal(t, r1.ID, final.PreviousResponseID)
	body, _ = up.last("/v1/responses")
	assert.NotContains(t, body, "previous_response_id")
	got, err := c.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	assert.Equal(t, final.OutputText(), got.OutputText())

	// A background response runs through the upstream's /v1/responses too, under the gateway's id.
	bg, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Later")}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		got, err := c.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{})
		return err == nil && got.Status == responses.ResponseStatusCompleted && got.OutputText() == "native: 1 input items"
	}, 5*time.Second, 10*time.Millisecond)
	body, _ = up.last("/v1/responses")
	assert.NotContains(t, body, "background", "the gateway runs it; the upstream answers a plain request")

	// A function tool's round trip by previous_response_id: the upstream gets the call and its
	// output as input items, and never the id.
	r3, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", Tools: []responses.ToolUnionParam{weatherTool},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Weather in Paris?")}})
	require.NoError(t, err)
	require.Len(t, r3.Output, 1)
	assert.Equal(t, "call_w1", r3.Output[0].CallID)
	out := responses.ResponseInputItemParamOfFunctionCallOutput("rain")
	out.OfFunctionCallOutput.CallID = openai.String("call_w1")
	r4, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", PreviousResponseID: openai.String(r3.ID),
		Tools: []responses.ToolUnionParam{weatherTool}, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}})
	require.NoError(t, err)
	assert.Equal(t, "The weather: rain", r4.OutputText())
	body, _ = up.last("/v1/responses")
	assert.Contains(t, body, `"type":"function_call","id":"fc_nat1","call_id":"call_w1"`, "the stored call, written out")
	assert.Contains(t, body, `"output":"rain"`)
}

func assertAPIError(t *testing.T, err error, status int, param, what string) {
	t.Helper()
	var ae *openai.Error
	if !assert.True(t, errors.As(err, &ae), "%s: %v", what, err) {
		return
	}
	assert.Equal(t, status, ae.StatusCode, what)
	if param != "" {
		assert.Equal(t, param, ae.Param, what)
	}
}

// TestResponsesBatch: a Batch API batch of /v1/responses lines (the official Go SDK's Files and
// Batches) runs each line by translation; each output line's body is a Response, stored like
// one made over HTTP, and a line may continue a stored response.
func TestResponsesBatch(t *testing.T) {
	t.Parallel()
	_, url := startScripted(t, false)
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: chatonly, url: %s, type: vllm, check_interval: 1h}
models:
  agent-model: {responses: translate}
`, url), "agent-model")
	ctx := context.Background()
	c := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	first, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")}})
	require.NoError(t, err)
	lines := fmt.Sprintf(`{"custom_id":"a","method":"POST","url":"/v1/responses","body":{"model":"agent-model","input":"One"}}
{"custom_id":"b","method":"POST","url":"/v1/responses","body":{"model":"agent-model","input":"Two","previous_response_id":%q}}
{"custom_id":"c","method":"POST","url":"/v1/responses","body":{"model":"agent-model","input":"x","previous_response_id":"resp_nope"}}
`, first.ID)
	f, err := c.Files.New(ctx, openai.FileNewParams{File: openai.File(strings.NewReader(lines), "in.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch})
	require.NoError(t, err)
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID, Endpoint: openai.BatchNewParamsEndpointV1Responses,
		CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		b, err = c.Batches.Get(ctx, b.ID)
		return err == nil && b.Status == openai.BatchStatusCompleted
	}, 20*time.Second, 20*time.Millisecond)
	assert.EqualValues(t, 2, b.RequestCounts.Completed)
	assert.EqualValues(t, 1, b.RequestCounts.Failed)
	res, err := c.Files.Content(ctx, b.OutputFileID)
	require.NoError(t, err)
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	got := map[string]responses.Response{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var o struct {
			CustomID string `json:"custom_id"`
			Response struct {
				StatusCode int             `json:"status_code"`
				Body       json.RawMessage `json:"body"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &o))
		require.Equal(t, 200, o.Response.StatusCode, l)
		var r responses.Response
		require.NoError(t, json.Unmarshal(o.Response.Body, &r))
		got[o.CustomID] = r
	}
	assert.Equal(t, "1 messages; last: One", got["a"].OutputText())
	assert.Equal(t, "3 messages; last: Two", got["b"].OutputText(), "the stored conversation, continued")
	stored, err := c.Responses.Get(ctx, got["b"].ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	assert.Equal(t, first.ID, stored.PreviousResponseID)
	res, err = c.Files.Content(ctx, b.ErrorFileID)
	require.NoError(t, err)
	errs, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(errs), "previous_response_not_found")
}

// TestResponsesRPC: OpenAIService's Responses RPCs over gRPC (grpc-go) and Connect (connect-go),
// with API keys on: a response, a stream ending in response.completed, a continuation by
// previous_response_id, a function tool's call, retrieve, input items, delete; another key's
// response NOT_FOUND, an unknown previous response INVALID_ARGUMENT with OpenAI's error detail.
func TestResponsesRPC(t *testing.T) {
	t.Parallel()
	_, url := startScripted(t, false)
	const keyA, keyB = "sk-rpc-a-77aa", "sk-rpc-b-88bb"
	addr := serveYAML(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: chatonly, url: %s, type: vllm, check_interval: 1h}
auth:
  keys:
    - {name: a, sha256: %s}
    - {name: b, sha256: %s}
`, url, guard.HashKey(keyA), guard.HashKey(keyB)), io.Discard)
	withKey := func(ctx context.Context, key string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
	}
	grpcClient := openaiv1.NewOpenAIServiceClient(dial(t, addr))
	require.Eventually(t, func() bool {
		_, err := grpcClient.CreateResponse(withKey(context.Background(), keyA), &openaiv1.CreateResponseRequest{Model: "agent-model", Input: structpb.NewStringValue("ping")})
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	connectAs := func(key string) openaiv1connect.OpenAIServiceClient {
		return openaiv1connect.NewOpenAIServiceClient(&http.Client{Transport: keyTransport(key)}, "http://"+addr)
	}
	cc, ccB := connectAs(keyA), connectAs(keyB)
	ctx := withKey(context.Background(), keyA)
	for _, transport := range []string{"grpc", "connect"} {
		t.Run(transport, func(t *testing.T) {
			create := func(req *openaiv1.CreateResponseRequest) (*openaiv1.ResponseObject, error) {
				if transport == "grpc" {
					r, err := grpcClient.CreateResponse(ctx, req)
					return r.GetResponse(), err
				}
				r, err := cc.CreateResponse(ctx, req)
				return r.GetResponse(), err
			}
			r1, err := create(&openaiv1.CreateResponseRequest{Model: "agent-model", Instructions: proto.String("Be brief."), Input: structpb.NewStringValue("Hello")})
			require.NoError(t, err)
			require.Len(t, r1.GetOutput(), 1)
			assert.Equal(t, "completed", r1.GetStatus())
			assert.Equal(t, "2 messages; last: Hello", outputText(r1))
			assert.EqualValues(t, 10, r1.GetUsage().GetInputTokens())

			// Streamed, continuing it.
			req := &openaiv1.StreamResponseRequest{Request: &openaiv1.CreateResponseRequest{Model: "agent-model",
				PreviousResponseId: r1.GetId(), Input: structpb.NewStringValue("Again")}}
			var types []string
			var deltas strings.Builder
			var final *openaiv1.ResponseObject
			onEvent := func(ev *openaiv1.StreamResponseResponse) {
				types = append(types, ev.GetType())
				deltas.WriteString(ev.GetDelta())
				if ev.GetType() == "response.completed" {
					final = ev.GetResponse()
				}
			}
			if transport == "grpc" {
				st, err := grpcClient.StreamResponse(ctx, req)
				require.NoError(t, err)
				for {
					ev, err := st.Recv()
					if err == io.EOF {
						break
					}
					require.NoError(t, err)
					onEvent(ev)
				}
			} else {
				st, err := cc.StreamResponse(ctx, req)
				require.NoError(t, err)
				for st.Receive() {
					onEvent(st.Msg())
				}
				require.NoError(t, st.Err())
			}
			assert.Equal(t, "response.created", types[0])
			assert.Equal(t, "response.completed", types[len(types)-1])
			assert.Equal(t, "3 messages; last: Again", deltas.String())
			require.NotNil(t, final)
			assert.Equal(t, r1.GetId(), final.GetPreviousResponseId())

			// A function tool's call, its output by previous_response_id.
			tool, _ := structpb.NewStruct(map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object"}})
			r3, err := create(&openaiv1.CreateResponseRequest{Model: "agent-model", Tools: []*structpb.Struct{tool}, Input: structpb.NewStringValue("Weather?")})
			require.NoError(t, err)
			require.Len(t, r3.GetOutput(), 1)
			call := r3.GetOutput()[0].AsMap()
			assert.Equal(t, "function_call", call["type"])
			assert.Equal(t, "call_w1", call["call_id"])
			out, _ := structpb.NewList([]any{map[string]any{"type": "function_call_output", "call_id": "call_w1", "output": "rain"}})
			r4, err := create(&openaiv1.CreateResponseRequest{Model: "agent-model", PreviousResponseId: r3.GetId(), Tools: []*structpb.Struct{tool},
				Input: structpb.NewListValue(out)})
			require.NoError(t, err)
			assert.Equal(t, "The weather: rain", outputText(r4))

			// Retrieve, input items, delete; errors with OpenAI's detail.
			if transport == "grpc" {
				got, err := grpcClient.GetResponse(ctx, &openaiv1.GetResponseRequest{ResponseId: r4.GetId()})
				require.NoError(t, err)
				assert.Equal(t, outputText(r4), outputText(got.GetResponse()))
				items, err := grpcClient.ListInputItems(ctx, &openaiv1.ListInputItemsRequest{ResponseId: r4.GetId()})
				require.NoError(t, err)
				require.Len(t, items.GetData(), 1)
				assert.Equal(t, "function_call_output", items.GetData()[0].AsMap()["type"])
				_, err = grpcClient.GetResponse(withKey(context.Background(), keyB), &openaiv1.GetResponseRequest{ResponseId: r4.GetId()})
				assert.Equal(t, codes.NotFound, status.Code(err), "another key's response")
				del, err := grpcClient.DeleteResponse(ctx, &openaiv1.DeleteResponseRequest{ResponseId: r4.GetId()})
				require.NoError(t, err)
				assert.True(t, del.GetDeleted())
				_, err = grpcClient.GetResponse(ctx, &openaiv1.GetResponseRequest{ResponseId: r4.GetId()})
				assert.Equal(t, codes.NotFound, status.Code(err), "deleted")
				_, err = grpcClient.CreateResponse(ctx, &openaiv1.CreateResponseRequest{Model: "agent-model", PreviousResponseId: "resp_nope", Input: structpb.NewStringValue("x")})
				assert.Equal(t, codes.InvalidArgument, status.Code(err))
				var detail *openaiv1.Error
				for _, d := range status.Convert(err).Details() {
					if e, ok := d.(*openaiv1.Error); ok {
						detail = e
					}
				}
				require.NotNil(t, detail, "OpenAI's error object as a detail")
				assert.Equal(t, "previous_response_id", detail.GetParam())
				assert.Equal(t, "previous_response_not_found", detail.GetCode())
				return
			}
			got, err := cc.GetResponse(ctx, &openaiv1.GetResponseRequest{ResponseId: r4.GetId()})
			require.NoError(t, err)
			assert.Equal(t, outputText(r4), outputText(got.GetResponse()))
			_, err = ccB.GetResponse(ctx, &openaiv1.GetResponseRequest{ResponseId: r4.GetId()})
			assert.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
			_, err = cc.CreateResponse(ctx, &openaiv1.CreateResponseRequest{Model: "agent-model"})
			assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "no input")
		})
	}
}

// keyTransport sends every request with key as its bearer token.
type keyTransport string

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}

// outputText joins the output_text parts of a Response's message items, as the SDKs do.
func outputText(r *openaiv1.ResponseObject) string {
	var b strings.Builder
	for _, it := range r.GetOutput() {
		m := it.AsMap()
		if m["type"] != "message" {
			continue
		}
		parts, _ := m["content"].([]any)
		for _, p := range parts {
			if pm, _ := p.(map[string]any); pm["type"] == "output_text" {
				s, _ := pm["text"].(string)
				b.WriteString(s)
			}
		}
	}
	return b.String()
}

// TestResponsesSharedRedis: two replicas on one Redis act as one. A response made on one is
// continued on the other at once (stored before its last event was sent), retrieved and deleted
// there; the Node and Agents SDKs' clients that round-robin replicas rely on this.
func TestResponsesSharedRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("two gateways and a redis-server")
	}
	t.Parallel()
	rdb := redistest.Start(t)
	_, url := startScripted(t, false)
	cfg := fmt.Sprintf("builtin_models: false\nredis: {addr: %s}\nregistry: {disabled: true}\nupstreams:\n  - {name: chatonly, url: %s, type: vllm, check_interval: 1h}\n", rdb.Addr, url)
	a, b := startModels(t, cfg, "agent-model"), startModels(t, cfg, "agent-model")
	ctx := context.Background()
	client := func(addr string) openai.Client {
		return openai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	}
	ca, cb := client(a), client(b)
	st := ca.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "agent-model",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello")}})
	var id string
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.completed" {
			id = ev.Response.ID
			break // the next request goes out before this stream's end is read
		}
	}
	require.NotEmpty(t, id, st.Err())
	r2, err := cb.Responses.New(ctx, responses.ResponseNewParams{Model: "agent-model", PreviousResponseID: openai.String(id),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Again")}})
	require.NoError(t, err, "the other replica finds the response")
	assert.Equal(t, "3 messages; last: Again", r2.OutputText())
	st.Close()
	got, err := ca.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	assert.Equal(t, r2.OutputText(), got.OutputText())
	require.NoError(t, ca.Responses.Delete(ctx, r2.ID))
	_, err = cb.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{})
	assertAPIError(t, err, http.StatusNotFound, "", "deleted on the other replica")
}
