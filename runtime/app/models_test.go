package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"github.com/infergate/infergate/lib/chattemplate"
	"github.com/infergate/infergate/lib/tokenizer"
	"github.com/infergate/infergate/stage/prompt"
	"github.com/infergate/infergate/stage/tokeninput/tokeninputtest"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/openai/openaitest"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// qwenTokenizer is Qwen 3's real tokenizer directory (the tokenizer package's test data).
func qwenTokenizer(t *testing.T) string {
	dir, err := filepath.Abs("../../lib/tokenizer/testdata/qwen3")
	require.NoError(t, err)
	return dir
}

// startModels serves a config in process (no API keys) and waits until model is routed.
func startModels(t testing.TB, yaml, model string) string {
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
	t.Parallel()
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
	cfg, err := ParseConfig("test", []byte("builtin_models: false\nmodels:\n  qwen: {tokenizer: "+missing+"}\n"))
	require.NoError(t, err)
	_, err = Build(cfg, RoleGateway, gateway.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "models.qwen.tokenizer")
	assert.Contains(t, err.Error(), missing)

	_, err = ParseConfig("test", []byte("models:\n  qwen: {max_model_len: 4096}\n"))
	require.ErrorContains(t, err, "models.qwen: max_model_len, special_tokens_in_content and input: tokens need tokenizer")
	_, err = ParseConfig("test", []byte("models:\n  qwen: {input: tokens}\n"))
	require.ErrorContains(t, err, "need tokenizer")
	_, err = ParseConfig("test", []byte("models:\n  qwen: {tokenizer: x, input: ids}\n"))
	require.ErrorContains(t, err, `models.qwen.input: "ids" is neither text nor tokens`)
	_, err = ParseConfig("test", []byte("models:\n  qwen: {routing: sticky}\n"))
	require.ErrorContains(t, err, `models.qwen.routing: "sticky" is none of least_outstanding, round_robin, cache_aware`)
	_, err = ParseConfig("test", []byte("models:\n  qwen: {tokenizer: x, max_model_len: -1}\n"))
	require.ErrorContains(t, err, "models.qwen.max_model_len: -1 is negative")
	_, err = ParseConfig("test", []byte("models:\n  qwen: {tokeniser: x}\n"))
	require.ErrorContains(t, err, "tokeniser", "unknown keys stay errors")
}

// TestModelsTokenInput: a model with input: tokens is served by an engine that takes only token
// ids. Chat requests from every surface (the OpenAI SDK, streaming too; OpenAIService over
// Connect; the KServe bridge's generate; a batch line) reach it as the rendered prompt's ids, and
// come back in each surface's own shape; a stream's usage and the guard's token budget are
// settled on the gateway's exact counts.
func TestModelsTokenInput(t *testing.T) {
	t.Parallel()
	engine := tokeninputtest.Start(t, "qwen")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: engine, url: %s, type: vllm, check_interval: 1h}
models:
  qwen: {tokenizer: %s, input: tokens, max_model_len: 4096}
batch: {dir: %s}
`, engine.URL, qwenTokenizer(t), t.TempDir()), "qwen")
	ctx := context.Background()
	sdk := oai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	msgs := []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Say hello.")}

	got, err := sdk.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "qwen", Messages: msgs})
	require.NoError(t, err)
	assert.Equal(t, "Hello world.", got.Choices[0].Message.Content)
	prompts := engine.Prompts()
	require.Len(t, prompts, 1)
	// Qwen 3's template: <|im_start|>user\nSay hello.<|im_end|>\n<|im_start|>assistant\n
	assert.Equal(t, 151644, prompts[0][0], "<|im_start|>: the engine got ids, not text")
	assert.Equal(t, int64(len(prompts[0])), got.Usage.PromptTokens)

	stream := sdk.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{Model: "qwen", Messages: msgs,
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}})
	var text strings.Builder
	var usage oai.CompletionUsage
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			text.WriteString(ch.Delta.Content)
		}
		if u := stream.Current().Usage; u.TotalTokens > 0 {
			usage = u
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "Hello world.", text.String())
	assert.Equal(t, int64(len(prompts[0])), usage.PromptTokens)

	rpc, err := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, "http://"+addr).CreateChatCompletion(ctx,
		&openaiv1.CreateChatCompletionRequest{Model: "qwen", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("Say hello.")}}})
	require.NoError(t, err)
	assert.Equal(t, "Hello world.", rpc.GetChoices()[0].GetMessage().GetContent())

	res, err := http.Post("http://"+addr+"/v2/models/qwen/generate", "application/json", strings.NewReader(`{"text_input":"Once upon a time"}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	assert.Contains(t, string(b), `"text_output":"Hello world."`)
	prompts = engine.Prompts()
	assert.Equal(t, []int{12522, 5193, 264, 882}, prompts[len(prompts)-1], "the bridge's text prompt reached the engine as ids")

	done := completedBatch(t, addr, `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"qwen","messages":[{"role":"user","content":"Say hello."}]}}`)
	res, err = http.Get("http://" + addr + "/v1/files/" + *done.OutputFileID + "/content")
	require.NoError(t, err)
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	assert.Contains(t, string(b), `"object":"chat.completion"`, string(b))
	assert.Contains(t, string(b), `"content":"Hello world."`, string(b))
	prompts = engine.Prompts()
	assert.Equal(t, prompts[0], prompts[len(prompts)-1], "the batch line's chat reached the engine as the same ids")
}

// TestModelsExactTokenBudget: a stream without a usage object is charged against the guard's
// token budget at the gateway's exact prompt count plus its chunks, not at the body's estimate.
func TestModelsExactTokenBudget(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "vllm", "qwen")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: vllm, url: %s, type: vllm, check_interval: 1h}
models:
  qwen: {tokenizer: %s}
limits: {per_model: {tokens_per_minute: 3000}}
`, up.URL, qwenTokenizer(t)), "qwen")
	content := strings.Repeat("-", 2000)
	body := `{"model":"qwen","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"` + content + `"}]}`
	remaining := func() int {
		res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		n, err := strconv.Atoi(res.Header.Get("X-RateLimit-Remaining"))
		require.NoError(t, err)
		return n
	}
	start := time.Now()
	first := remaining()
	second := remaining()
	// The budget refills at 50 tokens a second while the requests run.
	refill := 3000.0/60*time.Since(start).Seconds() + 2
	estimate := (len(body)+3)/4 + 100
	tok, err := tokenizer.Load(qwenTokenizer(t))
	require.NoError(t, err)
	in, err := chattemplate.DecodeRequest([]byte(body))
	require.NoError(t, err)
	m, err := prompt.New("qwen", tok, prompt.Options{})
	require.NoError(t, err)
	ids, err := m.ChatTokens(context.Background(), in, false)
	require.NoError(t, err)
	require.Less(t, len(ids)+6, (len(body)+3)/4, "the exact count differs from the estimate")
	// The first stream (4 content chunks, a finish chunk and [DONE]: 6 events) was settled to
	// its exact prompt plus 6 before the second was estimated.
	assert.InDelta(t, 3000-estimate, first, 2)
	assert.InDelta(t, 3000-(len(ids)+6)-estimate, second, refill)
	require.Less(t, refill, float64(estimate-len(ids)-6), "the run was quick enough to tell the counts apart")

	// The upstream reported no usage for either stream: /metrics shows the gateway's count.
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	line := regexp.MustCompile(`(?m)^infergate_llm_counted_prompt_tokens_total\{model="qwen"\} .*$`).Find(metrics)
	assert.Equal(t, fmt.Sprintf(`infergate_llm_counted_prompt_tokens_total{model="qwen"} %d`, 2*len(ids)), string(line))
}
