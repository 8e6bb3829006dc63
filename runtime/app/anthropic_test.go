package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	asdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAnthropicMessages: the official Anthropic SDK against the gateway with API keys on, in
// front of a fake vLLM: its key in x-api-key (never passed upstream), messages whole and
// streamed through the gateway's chat pipeline (its response cache included), count_tokens exact
// with the model's tokenizer and estimated without, /v1/models in Anthropic's shape, a model the
// key may not use as not found, the same under /olla/anthropic; and a native model's requests
// passed to the upstream's own /v1/messages.
func TestAnthropicMessages(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "qwen", "llama", "hidden")
	const key = "sk-anthropic-test-5e1f"
	addr := serveYAML(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
auth:
  keys:
    - {name: user, sha256: %s, models: [qwen, llama]}
models:
  qwen: {tokenizer: %s, cache: {mode: exact}}
`, up.URL, guard.HashKey(key), qwenTokenizer(t)), io.Discard)
	ctx := context.Background()
	client := func(base string) asdk.Client {
		return asdk.NewClient(option.WithBaseURL("http://"+addr+base+"/"), option.WithHeader("X-Api-Key", key), option.WithMaxRetries(0))
	}
	c := client("")
	require.Eventually(t, func() bool {
		_, err := c.Messages.New(ctx, asdk.MessageNewParams{Model: "llama", MaxTokens: 8, Messages: userText("ping")})
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)

	var res *http.Response
	params := asdk.MessageNewParams{Model: "qwen", MaxTokens: 16, Messages: userText("Hello"),
		System: []asdk.TextBlockParam{{Text: "Be brief."}}}
	m, err := c.Messages.New(ctx, params, option.WithResponseInto(&res), option.WithJSONSet("temperature", 0))
	require.NoError(t, err)
	assert.Equal(t, "Hello from up", m.Content[0].Text)
	assert.Equal(t, asdk.StopReasonEndTurn, m.StopReason)
	assert.Equal(t, "up", res.Header.Get("X-Infergate-Endpoint"))
	assert.Empty(t, up.LastHeader().Get("X-Api-Key"), "the gateway's key stays at the gateway")
	assert.Empty(t, up.LastHeader().Get("Authorization"))
	assert.Contains(t, string(up.LastBody()), `"role":"system","content":"Be brief."`, "translated to OpenAI chat")
	n := up.Requests()
	_, err = c.Messages.New(ctx, params, option.WithResponseInto(&res), option.WithJSONSet("temperature", 0))
	require.NoError(t, err)
	assert.Equal(t, "hit", res.Header.Get("X-Infergate-Cache"), "the chat pipeline's stages apply: the response cache")
	assert.Equal(t, n, up.Requests())

	stream := c.Messages.NewStreaming(ctx, asdk.MessageNewParams{Model: "llama", MaxTokens: 16, Messages: userText("Hi")})
	var acc asdk.Message
	for stream.Next() {
		require.NoError(t, acc.Accumulate(stream.Current()))
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "tok0 tok1 tok2 tok3 ", acc.Content[0].Text, "the fake's stream, chunk by chunk")
	assert.Equal(t, asdk.StopReasonEndTurn, acc.StopReason)

	exact, err := c.Messages.CountTokens(ctx, asdk.MessageCountTokensParams{Model: "qwen", Messages: userText("Hello there")})
	require.NoError(t, err)
	// Qwen 3's template: <|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n
	assert.EqualValues(t, 10, exact.InputTokens, "exact, with the model's tokenizer and chat template")
	est, err := c.Messages.CountTokens(ctx, asdk.MessageCountTokensParams{Model: "llama", Messages: userText("Hello there")})
	require.NoError(t, err)
	assert.Positive(t, est.InputTokens, "estimated without a tokenizer")

	page, err := c.Models.List(ctx, asdk.ModelListParams{})
	require.NoError(t, err)
	var ids []string
	for _, mi := range page.Data {
		ids = append(ids, mi.ID)
		assert.EqualValues(t, "model", mi.Type, "Anthropic's shape")
	}
	assert.ElementsMatch(t, []string{"qwen", "llama"}, ids, "only the models the key may use")

	_, err = c.Messages.New(ctx, asdk.MessageNewParams{Model: "hidden", MaxTokens: 8, Messages: userText("Hi")})
	var apiErr *asdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
	assert.EqualValues(t, "not_found_error", apiErr.Type())

	bad := asdk.NewClient(option.WithBaseURL("http://"+addr+"/"), option.WithHeader("X-Api-Key", "sk-wrong"), option.WithMaxRetries(0))
	_, err = bad.Messages.New(ctx, asdk.MessageNewParams{Model: "llama", MaxTokens: 8, Messages: userText("Hi")})
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	assert.EqualValues(t, "authentication_error", apiErr.Type())

	olla := client("/olla/anthropic")
	m, err = olla.Messages.New(ctx, asdk.MessageNewParams{Model: "llama", MaxTokens: 8, Messages: userText("Hi")})
	require.NoError(t, err)
	assert.Equal(t, "Hello from up", m.Content[0].Text)
	page, err = olla.Models.List(ctx, asdk.ModelListParams{})
	require.NoError(t, err)
	assert.Len(t, page.Data, 2)
}

// A model with models.<name>.messages: native gets the Messages request unchanged at its
// upstream's /v1/messages, and the answer unchanged back.
func TestAnthropicNative(t *testing.T) {
	var got []byte
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"claude-local","object":"model","owned_by":"vllm"}]}`)
	})
	mux.HandleFunc("POST /v1/messages", func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_native","type":"message","role":"assistant","model":"claude-local","content":[{"type":"text","text":"native answer"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":2}}`)
	})
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	srv := hs.URL
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: vllm, url: %s, type: vllm, check_interval: 1h}
models:
  claude-local: {messages: native}
`, srv), "claude-local")
	c := asdk.NewClient(option.WithBaseURL("http://"+addr+"/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	m, err := c.Messages.New(context.Background(), asdk.MessageNewParams{Model: "claude-local", MaxTokens: 8, Messages: userText("Hi")})
	require.NoError(t, err)
	assert.Equal(t, "msg_native", m.ID)
	assert.Equal(t, "native answer", m.Content[0].Text)
	assert.True(t, strings.HasPrefix(string(got), `{"max_tokens":8`), "the Anthropic body itself: %s", got)
}

func userText(s string) []asdk.MessageParam {
	return []asdk.MessageParam{asdk.NewUserMessage(asdk.NewTextBlock(s))}
}
