package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/adapters/gateway"
	"github.com/infergate/infergate/adapters/openai/openaitest"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// qwenTokenizer is Qwen 3's real tokenizer directory (the tokenizer package's test data).
func qwenTokenizer(t *testing.T) string {
	dir, err := filepath.Abs("../adapters/llm/tokenizer/testdata/qwen3")
	require.NoError(t, err)
	return dir
}

// startModels serves a config in process (no API keys) and waits until model is routed.
func startModels(t *testing.T, yaml, model string) string {
	t.Helper()
	addr := serveYAML(t, yaml, io.Discard)
	require.Eventually(t, func() bool {
		res, err := http.Get("http://" + addr + "/v1/models/" + model)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond)
	return addr
}

// TestModelsContextLength: with models.<name>.tokenizer and max_model_len, a request too long for
// the model's context is refused with OpenAI's 400 context_length_exceeded on every surface (HTTP
// and the OpenAI SDK, OpenAIService over Connect, the KServe bridge's generate), and never
// reaches the upstream; one that fits goes through; /tokenize counts with the same tokenizer.
func TestModelsContextLength(t *testing.T) {
	up := openaitest.Start(t, "vllm", "qwen")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: vllm, url: %s, type: vllm, check_interval: 1h}
models:
  qwen: {tokenizer: %s, max_model_len: 64}
`, up.URL, qwenTokenizer(t)), "qwen")
	long := strings.Repeat("many words ", 40)
	ctx := context.Background()

	res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"qwen","max_tokens":16,"messages":[{"role":"user","content":"`+long+`"}]}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusBadRequest, res.StatusCode, string(b))
	var e struct {
		Error struct{ Message, Code, Param string }
	}
	require.NoError(t, json.Unmarshal(b, &e))
	assert.Equal(t, "context_length_exceeded", e.Error.Code)
	assert.Contains(t, e.Error.Message, "maximum context length is 64 tokens")

	sdk := oai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	_, err = sdk.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "qwen", MaxTokens: oai.Int(60),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr, "a short prompt with 60 tokens to generate does not fit 64")
	assert.Equal(t, "context_length_exceeded", apiErr.Code)
	_, err = sdk.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "qwen", MaxTokens: oai.Int(16),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	require.NoError(t, err, "one that fits reaches the upstream")
	assert.EqualValues(t, 1, up.Requests())

	_, err = openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, "http://"+addr).CreateChatCompletion(ctx,
		&openaiv1.CreateChatCompletionRequest{Model: "qwen", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String(long)}}})
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	assert.Contains(t, fmt.Sprint(err), "maximum context length")

	res, err = http.Post("http://"+addr+"/v2/models/qwen/generate", "application/json", strings.NewReader(`{"text_input":"`+long+`"}`))
	require.NoError(t, err)
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusBadRequest, res.StatusCode, string(b))
	assert.Contains(t, string(b), "maximum context length", "the KServe bridge's requests pass the same stage")
	assert.EqualValues(t, 1, up.Requests(), "no refused request reached the upstream")

	res, err = http.Post("http://"+addr+"/tokenize", "application/json", strings.NewReader(`{"model":"qwen","prompt":"Hello world"}`))
	require.NoError(t, err)
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	assert.JSONEq(t, `{"count":2,"max_model_len":64,"tokens":[9707,1879],"token_strs":null}`, string(b))
}

// A model's tokenizer that cannot be read stops start-up with the model, the path and the
// reason; settings that need a tokenizer are refused without one.
func TestModelsConfigErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	cfg, err := parseConfig("test", []byte("builtin_models: false\nmodels:\n  qwen: {tokenizer: "+missing+"}\n"))
	require.NoError(t, err)
	_, _, err = build(cfg, roleGateway, gateway.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "models.qwen.tokenizer")
	assert.Contains(t, err.Error(), missing)

	_, err = parseConfig("test", []byte("models:\n  qwen: {max_model_len: 4096}\n"))
	require.ErrorContains(t, err, "models.qwen: max_model_len and special_tokens_in_content need tokenizer")
	_, err = parseConfig("test", []byte("models:\n  qwen: {tokenizer: x, max_model_len: -1}\n"))
	require.ErrorContains(t, err, "models.qwen.max_model_len: -1 is negative")
	_, err = parseConfig("test", []byte("models:\n  qwen: {tokeniser: x}\n"))
	require.ErrorContains(t, err, "tokeniser", "unknown keys stay errors")
}
