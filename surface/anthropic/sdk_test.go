package anthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	asdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/surface/anthropic"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func userText(s string) []asdk.MessageParam {
	return []asdk.MessageParam{asdk.NewUserMessage(asdk.NewTextBlock(s))}
}

// streamed runs a streaming request and accumulates its events as the SDK does, returning the
// message and the event types in order.
// The SDK does not surface ping events; the raw stream tests see them.
func streamed(t *testing.T, c asdk.Client, p asdk.MessageNewParams) (asdk.Message, []string, error) {
	t.Helper()
	return streamedWith(t, c, p)
}

func streamedWith(t *testing.T, c asdk.Client, p asdk.MessageNewParams, opts ...option.RequestOption) (asdk.Message, []string, error) {
	t.Helper()
	s := c.Messages.NewStreaming(context.Background(), p, opts...)
	var msg asdk.Message
	var types []string
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		require.NoError(t, msg.Accumulate(ev), "event %s", ev.RawJSON())
	}
	return msg, types, s.Err()
}

var weatherTool = asdk.ToolUnionParam{OfTool: &asdk.ToolParam{
	Name:        "get_weather",
	Description: asdk.String("Weather for a city"),
	InputSchema: asdk.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}},
}}

func TestSDKText(t *testing.T) {
	t.Parallel()
	chat := newFakeChat(map[string]reply{
		"llama": {text: "Bonjour, monde", finish: "stop", prompt: 21, compl: 4, cached: 5},
	})
	_, c := testServer(t, anthropic.Options{Chat: chat})
	p := asdk.MessageNewParams{
		Model: "llama", MaxTokens: 64, Messages: userText("Say hello in French"),
		System:        []asdk.TextBlockParam{{Text: "You are terse."}, {Text: "x-anthropic-billing-header: cc_version=1; cch=abc;"}, {Text: "Answer in French."}},
		StopSequences: []string{"END"},
		Metadata:      asdk.MetadataParam{UserID: asdk.String("user-1")},
	}
	// This SDK version has no sampling parameters; other clients send them.
	sampling := []option.RequestOption{option.WithJSONSet("temperature", 0.5), option.WithJSONSet("top_p", 0.9), option.WithJSONSet("top_k", 40)}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			var msg asdk.Message
			if stream {
				var types []string
				var err error
				msg, types, err = streamedWith(t, c, p, sampling...)
				require.NoError(t, err)
				assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
					"content_block_stop", "message_delta", "message_stop"}, types)
			} else {
				var res *http.Response
				m, err := c.Messages.New(context.Background(), p, append(sampling, option.WithResponseInto(&res))...)
				require.NoError(t, err)
				msg = *m
				assert.Equal(t, "fake", res.Header.Get("X-Infergate-Endpoint"), "the chat handler's headers reach the client")
				assert.NotEmpty(t, res.Header.Get("Request-Id"))
				assert.Equal(t, "msg_"+res.Header.Get("X-Request-Id"), msg.ID)
			}
			require.Len(t, msg.Content, 1)
			assert.Equal(t, "text", msg.Content[0].Type)
			assert.Equal(t, "Bonjour, monde", msg.Content[0].Text)
			assert.Equal(t, asdk.StopReasonEndTurn, msg.StopReason)
			assert.Equal(t, "llama", string(msg.Model))
			assert.EqualValues(t, 16, msg.Usage.InputTokens, "prompt tokens less the cached ones")
			assert.EqualValues(t, 5, msg.Usage.CacheReadInputTokens)
			assert.EqualValues(t, 4, msg.Usage.OutputTokens)

			req := chat.last(t, "llama")
			assert.Equal(t, []any{map[string]any{"role": "system", "content": "You are terse.\nAnswer in French."},
				map[string]any{"role": "user", "content": "Say hello in French"}}, req["messages"], "the billing header is left out")
			assert.EqualValues(t, 64, req["max_tokens"])
			assert.EqualValues(t, 0.5, req["temperature"])
			assert.EqualValues(t, 0.9, req["top_p"])
			assert.EqualValues(t, 40, req["top_k"])
			assert.Equal(t, []any{"END"}, req["stop"])
			assert.Equal(t, "user-1", req["user"])
			if stream {
				assert.Equal(t, true, req["stream"])
				assert.Equal(t, map[string]any{"include_usage": true}, req["stream_options"])
			} else {
				assert.Nil(t, req["stream"])
			}
			h := chat.lastHeader("llama")
			assert.Empty(t, h.Get("Authorization"), "x-api-key is not turned into an OpenAI bearer key")
			assert.Empty(t, h.Get("X-Api-Key"), "nor passed to the chat handler")
			assert.Empty(t, h.Get("Anthropic-Version"))
			assert.Empty(t, h.Get("Accept-Encoding"), "the answer must come uncompressed to be translated")
			assert.NotEmpty(t, h.Get("X-Request-Id"))
		})
	}
}

func TestSDKToolRoundTrip(t *testing.T) {
	t.Parallel()
	chat := newFakeChat(map[string]reply{
		"tools": {text: "Let me look.", tools: []toolCall{{id: "call_1", name: "get_weather", args: `{"city": "Paris"}`}},
			finish: "tool_calls", prompt: 50, compl: 12},
		"after": {text: "It is sunny in Paris.", finish: "stop", prompt: 80, compl: 7},
	})
	_, c := testServer(t, anthropic.Options{Chat: chat})
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			p := asdk.MessageNewParams{Model: "tools", MaxTokens: 256, Messages: userText("Weather in Paris?"),
				Tools: []asdk.ToolUnionParam{weatherTool}, ToolChoice: asdk.ToolChoiceUnionParam{OfAuto: &asdk.ToolChoiceAutoParam{DisableParallelToolUse: asdk.Bool(true)}}}
			var msg asdk.Message
			if stream {
				var types []string
				var err error
				msg, types, err = streamed(t, c, p)
				require.NoError(t, err)
				assert.Equal(t, []string{"message_start",
					"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
					"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
					"message_delta", "message_stop"}, types)
			} else {
				m, err := c.Messages.New(context.Background(), p)
				require.NoError(t, err)
				msg = *m
			}
			require.Len(t, msg.Content, 2)
			assert.Equal(t, "Let me look.", msg.Content[0].Text)
			tu := msg.Content[1]
			assert.Equal(t, "tool_use", tu.Type)
			assert.Equal(t, "call_1", tu.ID)
			assert.Equal(t, "get_weather", tu.Name)
			assert.JSONEq(t, `{"city":"Paris"}`, string(tu.Input))
			assert.Equal(t, asdk.StopReasonToolUse, msg.StopReason)

			req := chat.last(t, "tools")
			assert.Equal(t, []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "description": "Weather for a city",
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}}}}, req["tools"])
			assert.Equal(t, "auto", req["tool_choice"])
			assert.Equal(t, false, req["parallel_tool_calls"])

			// The next turn: the answer's tool_use, then the client's tool_result.
			next := asdk.MessageNewParams{Model: "after", MaxTokens: 256, Tools: []asdk.ToolUnionParam{weatherTool},
				Messages: append(userText("Weather in Paris?"), msg.ToParam(),
					asdk.NewUserMessage(asdk.NewToolResultBlock(tu.ID, "sunny, 24C", false), asdk.NewTextBlock("Thanks")))}
			out, err := c.Messages.New(context.Background(), next)
			require.NoError(t, err)
			assert.Equal(t, "It is sunny in Paris.", out.Content[0].Text)
			msgs := chat.last(t, "after")["messages"].([]any)
			require.Len(t, msgs, 4)
			asst := msgs[1].(map[string]any)
			assert.Equal(t, "assistant", asst["role"])
			assert.Equal(t, "Let me look.", asst["content"])
			calls := asst["tool_calls"].([]any)
			require.Len(t, calls, 1)
			fn := calls[0].(map[string]any)["function"].(map[string]any)
			assert.Equal(t, "call_1", calls[0].(map[string]any)["id"])
			assert.Equal(t, "get_weather", fn["name"])
			assert.JSONEq(t, `{"city":"Paris"}`, fn["arguments"].(string))
			assert.Equal(t, map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "sunny, 24C"}, msgs[2], "the tool message follows the tool calls")
			assert.Equal(t, map[string]any{"role": "user", "content": "Thanks"}, msgs[3], "the turn's text after its tool results")
		})
	}
}

func TestSDKImagesAndDocuments(t *testing.T) {
	t.Parallel()
	chat := newFakeChat(nil)
	_, c := testServer(t, anthropic.Options{Chat: chat})
	_, err := c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "vision", MaxTokens: 16, Messages: []asdk.MessageParam{asdk.NewUserMessage(
		asdk.NewTextBlock("What is in these?"),
		asdk.NewImageBlockBase64("image/png", "iVBORw0KGgo="),
		asdk.NewImageBlock(asdk.URLImageSourceParam{URL: "https://example.com/cat.jpg"}),
		asdk.NewDocumentBlock(asdk.PlainTextSourceParam{Data: "The doc text."}),
	)}})
	require.NoError(t, err)
	msgs := chat.last(t, "vision")["messages"].([]any)
	assert.Equal(t, []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "What is in these?"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo="}},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/cat.jpg"}},
		map[string]any{"type": "text", "text": "The doc text."},
	}}}, msgs)
}

func TestSDKThinking(t *testing.T) {
	t.Parallel()
	chat := newFakeChat(map[string]reply{"r1": {reasoning: "Let me think.", text: "42", finish: "stop", prompt: 5, compl: 9}})
	_, c := testServer(t, anthropic.Options{Chat: chat})
	p := asdk.MessageNewParams{Model: "r1", MaxTokens: 8192, Messages: userText("?"), Thinking: asdk.ThinkingConfigParamOfEnabled(2048)}
	for _, stream := range []bool{false, true} {
		var msg asdk.Message
		if stream {
			var err error
			msg, _, err = streamed(t, c, p)
			require.NoError(t, err)
		} else {
			m, err := c.Messages.New(context.Background(), p)
			require.NoError(t, err)
			msg = *m
		}
		require.Len(t, msg.Content, 2, "stream=%v", stream)
		assert.Equal(t, "thinking", msg.Content[0].Type)
		assert.Equal(t, "Let me think.", msg.Content[0].Thinking)
		assert.Equal(t, "42", msg.Content[1].Text)
		assert.Equal(t, "low", chat.last(t, "r1")["reasoning_effort"])

		// The thinking block comes back on the next turn: accepted, not sent.
		_, err := c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "r1", MaxTokens: 16,
			Messages: append(userText("?"), msg.ToParam(), asdk.NewUserMessage(asdk.NewTextBlock("and?")))})
		require.NoError(t, err)
		asst := chat.last(t, "r1")["messages"].([]any)[1].(map[string]any)
		assert.Equal(t, map[string]any{"role": "assistant", "content": "42"}, asst)
	}
}

func TestSDKStopReasons(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		r      reply
		reason asdk.StopReason
		seq    string
	}{
		"stop":           {reply{text: "a", finish: "stop"}, asdk.StopReasonEndTurn, ""},
		"length":         {reply{text: "a", finish: "length"}, asdk.StopReasonMaxTokens, ""},
		"tool_calls":     {reply{tools: []toolCall{{id: "c", name: "f", args: "{}"}}, finish: "tool_calls"}, asdk.StopReasonToolUse, ""},
		"tools-but-stop": {reply{tools: []toolCall{{id: "c", name: "f", args: ""}}, finish: "stop"}, asdk.StopReasonToolUse, ""},
		"content_filter": {reply{text: "a", finish: "content_filter"}, asdk.StopReasonRefusal, ""},
		"stop-sequence":  {reply{text: "a", finish: "stop", vllmStop: "END"}, asdk.StopReasonStopSequence, "END"},
		"unknown":        {reply{text: "a", finish: "abort"}, asdk.StopReasonEndTurn, ""},
	}
	replies := map[string]reply{}
	for name, tc := range cases {
		replies[name] = tc.r
	}
	_, c := testServer(t, anthropic.Options{Chat: newFakeChat(replies)})
	for name, tc := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprint(name, "/stream=", stream), func(t *testing.T) {
				p := asdk.MessageNewParams{Model: asdk.Model(name), MaxTokens: 16, Messages: userText("x")}
				var msg asdk.Message
				if stream {
					var err error
					msg, _, err = streamed(t, c, p)
					require.NoError(t, err)
				} else {
					m, err := c.Messages.New(context.Background(), p)
					require.NoError(t, err)
					msg = *m
				}
				assert.Equal(t, tc.reason, msg.StopReason)
				assert.Equal(t, tc.seq, msg.StopSequence)
			})
		}
	}
}

func TestSDKErrors(t *testing.T) {
	t.Parallel()
	cases := map[int]string{
		400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 502: "api_error", 503: "overloaded_error", 529: "overloaded_error",
	}
	replies := map[string]reply{}
	for status := range cases {
		replies[fmt.Sprint("e", status)] = reply{status: status, header: map[string]string{"Retry-After": "7", "X-Ratelimit-Remaining-Requests": "0"}}
	}
	_, c := testServer(t, anthropic.Options{Chat: newFakeChat(replies)})
	for status, typ := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprint(status, "/stream=", stream), func(t *testing.T) {
				p := asdk.MessageNewParams{Model: asdk.Model(fmt.Sprint("e", status)), MaxTokens: 16, Messages: userText("x")}
				var err error
				if stream {
					_, _, err = streamed(t, c, p)
				} else {
					_, err = c.Messages.New(context.Background(), p)
				}
				var apiErr *asdk.Error
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, status, apiErr.StatusCode)
				assert.EqualValues(t, typ, apiErr.Type())
				assert.Equal(t, fmt.Sprintf("fake failure %d", status), apiErr.Message)
				assert.Equal(t, "7", apiErr.Response.Header.Get("Retry-After"))
				assert.Equal(t, "0", apiErr.Response.Header.Get("X-Ratelimit-Remaining-Requests"))
				assert.Equal(t, "fake", apiErr.Response.Header.Get("X-Infergate-Endpoint"))
				assert.NotEmpty(t, apiErr.RequestID)
			})
		}
	}
}

func TestSDKMidStreamFailure(t *testing.T) {
	t.Parallel()
	_, c := testServer(t, anthropic.Options{Chat: newFakeChat(map[string]reply{"dies": {text: "Hello there", finish: "stop", die: true}})})
	_, types, err := streamed(t, c, asdk.MessageNewParams{Model: "dies", MaxTokens: 16, Messages: userText("x")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mid-stream")
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta"}, types, "the events before the failure, then the error")
}

func TestSDKCountTokens(t *testing.T) {
	t.Parallel()
	var gotBody []byte
	_, c := testServer(t, anthropic.Options{Chat: newFakeChat(nil), CountTokens: func(_ context.Context, model string, body []byte) (int, error) {
		switch model {
		case "exact":
			gotBody = body
			return 1234, nil
		case "missing":
			return 0, pipeline.ModelNotFound(model)
		}
		return 0, fmt.Errorf("model %s: %w", model, anthropic.ErrNoTokenizer)
	}})
	n, err := c.Messages.CountTokens(context.Background(), asdk.MessageCountTokensParams{Model: "exact", Messages: userText("Hello there"),
		System: asdk.MessageCountTokensParamsSystemUnion{OfString: asdk.String("Be brief.")}})
	require.NoError(t, err)
	assert.EqualValues(t, 1234, n.InputTokens)
	var body map[string]any
	require.NoError(t, json.Unmarshal(gotBody, &body))
	assert.Len(t, body["messages"], 2)
	assert.Nil(t, body["max_tokens"])

	// No tokenizer: a quarter of the text's bytes, rounded up.
	n, err = c.Messages.CountTokens(context.Background(), asdk.MessageCountTokensParams{Model: "est", Messages: userText("Hello there")})
	require.NoError(t, err)
	assert.EqualValues(t, (len("Hello there")+3)/4, n.InputTokens)

	_, err = c.Messages.CountTokens(context.Background(), asdk.MessageCountTokensParams{Model: "missing", Messages: userText("x")})
	var apiErr *asdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 404, apiErr.StatusCode)
	assert.EqualValues(t, "not_found_error", apiErr.Type())
}

func TestSDKModels(t *testing.T) {
	t.Parallel()
	srv, c := testServer(t, anthropic.Options{Chat: newFakeChat(nil)})
	var ids []string
	pager := c.Models.ListAutoPaging(context.Background(), asdk.ModelListParams{Limit: asdk.Int(2)})
	for pager.Next() {
		ids = append(ids, pager.Current().ID)
		assert.Equal(t, pager.Current().ID, pager.Current().DisplayName)
	}
	require.NoError(t, pager.Err())
	assert.Equal(t, []string{"bge", "llama", "qwen"}, ids, "two pages of two")
	m, err := c.Models.Get(context.Background(), "llama", asdk.ModelGetParams{})
	require.NoError(t, err)
	assert.Equal(t, "2023-11-14T22:13:20Z", m.CreatedAt.UTC().Format("2006-01-02T15:04:05Z07:00"))
	_, err = c.Models.Get(context.Background(), "nope", asdk.ModelGetParams{})
	var apiErr *asdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 404, apiErr.StatusCode)
	assert.EqualValues(t, "not_found_error", apiErr.Type())

	// An OpenAI client gets OpenAI's list untouched.
	res, err := http.Get(srv.URL + "/v1/models")
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(b), `"object":"list"`)
}

func TestNative(t *testing.T) {
	t.Parallel()
	var gotPath, gotAuth, gotKey string
	var gotBody []byte
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotAuth, gotKey = r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")
		gotBody, _ = io.ReadAll(r.Body)
		if bytes.Contains(gotBody, []byte("gone")) {
			pipeline.ModelNotFound("gone").Write(w) // the gateway's own error, OpenAI-shaped
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_native","type":"message","role":"assistant","model":"vllm-native","content":[{"type":"text","text":"native!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}`)
	})
	chat := newFakeChat(nil)
	srv, c := testServer(t, anthropic.Options{Chat: chat, Native: func(m string) bool { return m == "vllm-native" || m == "gone" }, NativeHandler: native})
	m, err := c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "vllm-native", MaxTokens: 16, Messages: userText("hi")})
	require.NoError(t, err)
	assert.Equal(t, "native!", m.Content[0].Text)
	assert.Equal(t, "/v1/messages", gotPath)
	assert.Empty(t, gotAuth, "x-api-key is not translated")
	assert.Equal(t, "test-key", gotKey, "a native request keeps the client's header as sent: the upstream's config decides")
	assert.Contains(t, string(gotBody), `"max_tokens":16`, "the body passes unchanged")

	// Under Olla's prefix too, with the path rewritten.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/olla/anthropic/v1/messages", strings.NewReader(`{"model":"vllm-native","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("x-api-key", "k2")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 200, res.StatusCode)
	assert.Equal(t, "/v1/messages", gotPath)
	assert.Equal(t, "k2", gotKey)

	_, err = c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "gone", MaxTokens: 16, Messages: userText("hi")})
	var apiErr *asdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 404, apiErr.StatusCode)
	assert.EqualValues(t, "not_found_error", apiErr.Type())
	assert.Contains(t, apiErr.Message, "gone")
}

// TestNativeFallback: a native model whose upstream has no /v1/messages (an older vLLM's 404
// {"detail":"Not Found"}) is translated instead, and the answer carries none of the headers the
// failed attempt set (its X-Infergate-Endpoint, ...), while those set before it stay.
func TestNativeFallback(t *testing.T) {
	t.Parallel()
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Infergate-Endpoint", "old")
		w.Header().Set("X-Olla-Mode", "passthrough")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"detail":"Not Found"}`)
	})
	h := anthropic.New(anthropic.Options{Chat: newFakeChat(nil), Native: func(string) bool { return true }, NativeHandler: native})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Before", "kept")
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	post := func(body string) (*http.Response, string) {
		t.Helper()
		res, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, string(b)
	}

	res, body := post(`{"model":"llama","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Contains(t, body, `"type":"message"`, "translated")
	assert.Equal(t, "fake", res.Header.Get("X-Infergate-Endpoint"), "the translation's endpoint")
	assert.Empty(t, res.Header.Get("X-Olla-Mode"), "the failed attempt's header is not the answer's")
	assert.Equal(t, "kept", res.Header.Get("X-Before"))

	// The translation refuses the request: no endpoint answered it.
	res, body = post(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	assert.Contains(t, body, "max_tokens")
	assert.Empty(t, res.Header.Get("X-Infergate-Endpoint"), "the failed attempt's endpoint is not the answer's")
	assert.Empty(t, res.Header.Get("X-Olla-Mode"))
	assert.Equal(t, "kept", res.Header.Get("X-Before"))
}

// TestAcceptAPIKeyErrors: an error written outside the Handler (the gateway's key check) reaches
// an Anthropic client in Anthropic's shape.
func TestAcceptAPIKeyErrors(t *testing.T) {
	t.Parallel()
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer good" && r.Header.Get("X-Api-Key") != "good" { // as the guard reads them
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"error":{"message":"invalid API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	h := anthropic.New(anthropic.Options{Chat: newFakeChat(nil)})
	srv := newServer(t, anthropic.AcceptAPIKey(auth(h)))
	c := asdk.NewClient(option.WithBaseURL(srv+"/"), option.WithAPIKey("bad"), option.WithMaxRetries(0))
	_, err := c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "m", MaxTokens: 1, Messages: userText("x")})
	var apiErr *asdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 401, apiErr.StatusCode)
	assert.EqualValues(t, "authentication_error", apiErr.Type())
	assert.Equal(t, "invalid API key", apiErr.Message)

	c = asdk.NewClient(option.WithBaseURL(srv+"/"), option.WithAPIKey("good"), option.WithMaxRetries(0))
	_, err = c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "m", MaxTokens: 1, Messages: userText("x")})
	require.NoError(t, err)

}

func TestMetrics(t *testing.T) {
	t.Parallel()
	m := anthropic.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	srv, c := testServer(t, anthropic.Options{Chat: newFakeChat(map[string]reply{"e500": {status: 500}}), Metrics: m})
	_, err := c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "ok", MaxTokens: 1, Messages: userText("x")})
	require.NoError(t, err)
	_, err = c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "e500", MaxTokens: 1, Messages: userText("x")})
	require.Error(t, err)
	res, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 400, res.StatusCode)
	_, err = c.Messages.CountTokens(context.Background(), asdk.MessageCountTokensParams{Model: "m", Messages: userText("x")})
	require.NoError(t, err)
	want := `
# HELP infergate_anthropic_translation_errors_total Translations that failed: request (an Anthropic request refused with a 400), response (an upstream answer that is not a chat completion), stream (an upstream stream that could not be translated).
# TYPE infergate_anthropic_translation_errors_total counter
infergate_anthropic_translation_errors_total{direction="request"} 1
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "infergate_anthropic_translation_errors_total"))
	want = `
# HELP infergate_anthropic_requests_total Anthropic Messages API requests by mode (translate: served as OpenAI chat; native: passed to an upstream's /v1/messages; count_tokens) and outcome (ok, client_error, server_error, stream_error, translate_error, canceled).
# TYPE infergate_anthropic_requests_total counter
infergate_anthropic_requests_total{mode="count_tokens",outcome="ok"} 1
infergate_anthropic_requests_total{mode="translate",outcome="client_error"} 1
infergate_anthropic_requests_total{mode="translate",outcome="ok"} 1
infergate_anthropic_requests_total{mode="translate",outcome="server_error"} 1
`
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "infergate_anthropic_requests_total"))
}

// TestHTTPEdges: what an SDK does not send, sent raw.
func TestHTTPEdges(t *testing.T) {
	t.Parallel()
	chat := newFakeChat(map[string]reply{"cached": {text: "from cache", finish: "stop", prompt: 3, compl: 2, whole: true}})
	srv, c := testServer(t, anthropic.Options{Chat: chat, MaxBodyBytes: 4096})
	post := func(path, body string) (int, http.Header, map[string]any) {
		t.Helper()
		res, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		var m map[string]any
		b, _ := io.ReadAll(res.Body)
		require.NoError(t, json.Unmarshal(b, &m), "%s", b)
		return res.StatusCode, res.Header, m
	}
	status, h, body := post("/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	assert.Equal(t, 400, status)
	assert.Equal(t, "error", body["type"])
	assert.Equal(t, map[string]any{"type": "invalid_request_error", "message": "max_tokens: Field required"}, body["error"])
	assert.Equal(t, h.Get("Request-Id"), body["request_id"])
	assert.Equal(t, "false", h.Get("X-Should-Retry"), "a refused translation is refused again")

	status, _, body = post("/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"`+strings.Repeat("x", 5000)+`"}]}`)
	assert.Equal(t, 413, status)
	assert.Equal(t, "request_too_large", body["error"].(map[string]any)["type"])

	res, err := http.Get(srv.URL + "/v1/messages")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 405, res.StatusCode)

	// A stream asked for, a whole answer given (a cached one): the client still gets events.
	msg, types, err := streamed(t, c, asdk.MessageNewParams{Model: "cached", MaxTokens: 8, Messages: userText("x")})
	require.NoError(t, err)
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, types)
	assert.Equal(t, "from cache", msg.Content[0].Text)
	assert.EqualValues(t, 2, msg.Usage.OutputTokens)

	// Claude Code's ?beta=true is accepted and not passed on.
	status, _, body = post("/v1/messages?beta=true", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`)
	assert.Equal(t, 200, status)
	assert.Equal(t, "message", body["type"])
}
