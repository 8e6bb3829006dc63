package tokeninput_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/chattemplate"
	"github.com/infergate/infergate/lib/tokenizer"
	"github.com/infergate/infergate/stage/prompt"
	"github.com/infergate/infergate/stage/tokeninput"
	"github.com/infergate/infergate/stage/tokeninput/tokeninputtest"
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

var qwenTok = sync.OnceValues(func() (*tokenizer.Tokenizer, error) { return tokenizer.Load("../../lib/tokenizer/testdata/qwen3") })

type env struct {
	engine *tokeninputtest.Engine
	model  *prompt.Model
	url    string
	usage  chan pipeline.Usage // what each request used, as the outermost stage saw it
}

// start serves model "qwen" (Qwen 3's real tokenizer and chat template) through a proxy whose
// upstream is a fake engine that takes only token ids.
func start(t *testing.T) *env {
	t.Helper()
	tok, err := qwenTok()
	require.NoError(t, err)
	return startWith(t, tok)
}

// startWith is start with another tokenizer (and its chat template), still named "qwen".
func startWith(t *testing.T, tok *tokenizer.Tokenizer) *env {
	t.Helper()
	m, err := prompt.New("qwen", tok, prompt.Options{})
	require.NoError(t, err)
	e := &env{engine: tokeninputtest.Start(t, "qwen"), model: m, usage: make(chan pipeline.Usage, 16)}
	record := func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			res, err := next(ctx, req)
			if err == nil {
				res.Body = &recorded{Body: res.Body, to: e.usage}
			}
			return res, err
		}
	}
	p, err := openai.New(openai.Options{
		Endpoints: []upstream.Endpoint{{Name: "engine", URL: e.engine.URL, Type: upstream.TypeVLLM,
			CheckInterval: time.Hour, CheckTimeout: time.Second}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Stages: func(string) []pipeline.Interceptor {
			return []pipeline.Interceptor{record, m.Usage(), tokeninput.Stage(m)}
		}})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	e.url = srv.URL
	require.Eventually(t, func() bool { return len(p.Models()) == 1 }, 5*time.Second, 5*time.Millisecond)
	return e
}

type recorded struct {
	pipeline.Body
	to   chan pipeline.Usage
	once sync.Once
}

func (r *recorded) Finish(err error) pipeline.Usage {
	u := r.Body.Finish(err)
	r.once.Do(func() { r.to <- u })
	return u
}

func (e *env) sdk() *oai.Client {
	c := oai.NewClient(option.WithBaseURL(e.url+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	return &c
}

func (e *env) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	res, err := http.Post(e.url+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// wantIDs is what the model's template and tokenizer make of a chat request body.
func (e *env) wantIDs(t *testing.T, body string) []int {
	t.Helper()
	in, err := chattemplate.DecodeRequest([]byte(body))
	require.NoError(t, err)
	ids, err := e.model.ChatTokens(context.Background(), in, false)
	require.NoError(t, err)
	return ids
}

func (e *env) lastUsage(t *testing.T) pipeline.Usage {
	t.Helper()
	select {
	case u := <-e.usage:
		return u
	case <-time.After(5 * time.Second):
		t.Fatal("no usage recorded")
		return pipeline.Usage{}
	}
}

var messages = []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("You are terse."), oai.UserMessage("Say hello to the world.")}

const messagesJSON = `[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hello to the world."}]`

// A chat request reaches a token-only engine as its rendered prompt's ids, and the OpenAI SDK
// gets a chat completion back: chat ids and objects, the assistant's message, the finish reason,
// and usage the gateway counted (the engine sent none).
func TestChat(t *testing.T) {
	e := start(t)
	got, err := e.sdk().Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages})
	require.NoError(t, err)
	want := e.wantIDs(t, `{"messages":`+messagesJSON+`}`)
	require.Len(t, e.engine.Prompts(), 1)
	assert.Equal(t, want, e.engine.Prompts()[0], "the engine got the render's ids")
	assert.Equal(t, "chatcmpl-fake1", got.ID)
	assert.Equal(t, "chat.completion", string(got.Object))
	require.Len(t, got.Choices, 1)
	assert.Equal(t, "Hello world.", got.Choices[0].Message.Content)
	assert.Equal(t, "assistant", string(got.Choices[0].Message.Role))
	assert.Equal(t, "stop", got.Choices[0].FinishReason)
	tok, _ := qwenTok()
	completion := int64(tok.Count("Hello world.", tokenizer.Options{}))
	assert.Equal(t, int64(len(want)), got.Usage.PromptTokens)
	assert.Equal(t, completion, got.Usage.CompletionTokens)
	assert.Equal(t, int64(len(want))+completion, got.Usage.TotalTokens)
	u := e.lastUsage(t)
	assert.Equal(t, int64(len(want)), u.PromptTokens, "the guard settles on the gateway's count")
	assert.Equal(t, completion, u.CompletionTokens)

	// The engine's own usage wins where it sends one; max_completion_tokens is its max_tokens.
	e.engine.SetUsage(true)
	got, err = e.sdk().Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages,
		MaxCompletionTokens: oai.Int(2)})
	require.NoError(t, err)
	assert.Equal(t, "Hello world", got.Choices[0].Message.Content)
	assert.Equal(t, "length", got.Choices[0].FinishReason)
	assert.Equal(t, int64(2), got.Usage.CompletionTokens, "the engine's count")
	e.lastUsage(t)
}

// A stream comes back as chat chunks: the assistant's role first, the text as deltas, the finish
// reason, and the usage chunk the client asked for, counted by the gateway.
func TestChatStream(t *testing.T) {
	e := start(t)
	stream := e.sdk().Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages,
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}})
	var text strings.Builder
	var chunks []oai.ChatCompletionChunk
	for stream.Next() {
		c := stream.Current()
		chunks = append(chunks, c)
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "Hello world.", text.String())
	require.GreaterOrEqual(t, len(chunks), 3)
	assert.Equal(t, "assistant", chunks[0].Choices[0].Delta.Role)
	assert.Equal(t, "chatcmpl-fake1", chunks[0].ID)
	assert.Equal(t, "chat.completion.chunk", string(chunks[0].Object))
	last := chunks[len(chunks)-1]
	assert.Empty(t, last.Choices, "the usage chunk has no choices")
	want := e.wantIDs(t, `{"messages":`+messagesJSON+`}`)
	assert.Equal(t, int64(len(want)), last.Usage.PromptTokens)
	assert.Equal(t, int64(3), last.Usage.CompletionTokens)
	assert.Equal(t, "stop", chunks[len(chunks)-2].Choices[0].FinishReason)
	u := e.lastUsage(t)
	assert.Equal(t, int64(len(want)), u.PromptTokens)
	assert.Equal(t, int64(3), u.CompletionTokens)
}

// Stop strings are applied on the text in the gateway (the engine generates past them): the
// text ends before the stop string, the finish reason is stop, and a stream ends there without
// waiting for the engine. Text that only looks like the start of a stop string is held back
// until the next chunk, then sent.
func TestStopStrings(t *testing.T) {
	e := start(t)
	e.engine.SetReply("Hello", " E", "ast", " EN", "D of", " the", " story")
	body := `{"model":"qwen","stop":["END"],"messages":` + messagesJSON
	status, got := e.post(t, "/v1/chat/completions", body+`}`)
	require.Equal(t, http.StatusOK, status, got)
	var whole struct {
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
			StopReason   string `json:"stop_reason"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(got), &whole))
	assert.Equal(t, "Hello East ", whole.Choices[0].Message.Content)
	assert.Equal(t, "stop", whole.Choices[0].FinishReason)
	assert.Equal(t, "END", whole.Choices[0].StopReason)

	status, got = e.post(t, "/v1/chat/completions", body+`,"stream":true}`)
	require.Equal(t, http.StatusOK, status, got)
	var deltas []string
	var reasons []string
	for _, line := range strings.Split(got, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta        struct{ Content *string }
				FinishReason *string `json:"finish_reason"`
			}
		}
		require.NoError(t, json.Unmarshal([]byte(data), &c), data)
		for _, ch := range c.Choices {
			if ch.Delta.Content != nil {
				deltas = append(deltas, *ch.Delta.Content)
			}
			if ch.FinishReason != nil {
				reasons = append(reasons, *ch.FinishReason)
			}
		}
	}
	assert.Equal(t, []string{"", "Hello", " ", "East", " "}, deltas, "\"E\" waits for \"ast\"; \" EN\" is cut at the stop")
	assert.Equal(t, []string{"stop"}, reasons)
	assert.True(t, strings.HasSuffix(got, "data: [DONE]\n\n"), got)
}

// An engine that answers with token ids and no text is detokenized in the gateway, characters
// split across ids (an emoji's bytes) held until whole.
func TestTokenIDAnswers(t *testing.T) {
	e := start(t)
	tok, _ := qwenTok()
	const reply = "Grüße 🫠🪿 𓀀𝄞 世界"
	ids := tok.Encode(reply, tokenizer.Options{})
	split := 0
	for _, id := range ids {
		if !utf8Whole(tok.Decode([]int{id}, true)) {
			split++
		}
	}
	require.Positive(t, split, "some id carries part of a character")
	var steps [][]int
	for _, id := range ids {
		steps = append(steps, []int{id})
	}
	e.engine.SetReplyIDs(steps...)
	got, err := e.sdk().Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages})
	require.NoError(t, err)
	assert.Equal(t, reply, got.Choices[0].Message.Content)
	assert.Equal(t, int64(len(ids)), got.Usage.CompletionTokens)

	stream := e.sdk().Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages})
	var text strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			assert.True(t, utf8Whole(ch.Delta.Content), "%q", ch.Delta.Content)
			text.WriteString(ch.Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, reply, text.String())
	u := e.lastUsage(t)
	u = e.lastUsage(t)
	assert.Equal(t, int64(len(ids)), u.CompletionTokens, "a stream's ids counted as sent")
}

// A SentencePiece-style model's answer keeps its first word's space ("▁Hello" is " Hello"), as
// vLLM's detokenizer, which continues the prompt, gives it; whole and streamed alike.
func TestSentencePieceAnswerSpace(t *testing.T) {
	src := "../../lib/tokenizer/testdata/mistral7b"
	if _, err := os.Stat(src); err != nil && os.Getenv("INFERGATE_REQUIRE_TOKENIZER_DATA") != "1" {
		t.Skip("testdata/mistral7b is absent: run lib/tokenizer/testdata/fetch-mistral7b.sh")
	}
	// Mistral 7B v0.1's files name no chat template: an instruct-style one is added.
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(
		"{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content }} [/INST]{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"), 0o600))
	tok, err := tokenizer.Load(dir)
	require.NoError(t, err)
	e := startWith(t, tok)
	ids := tok.Encode("Hello world", tokenizer.Options{})
	require.Equal(t, "▁Hello", tok.TokenString(ids[0]))
	var steps [][]int
	for _, id := range ids {
		steps = append(steps, []int{id})
	}
	e.engine.SetReplyIDs(steps...)
	messages := []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Say hello.")}
	got, err := e.sdk().Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages})
	require.NoError(t, err)
	assert.Equal(t, " Hello world", got.Choices[0].Message.Content)
	stream := e.sdk().Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages})
	var text strings.Builder
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, " Hello world", text.String())
}

func utf8Whole(s string) bool { return !strings.ContainsRune(s, '\uFFFD') }

// n choices each come back under their index.
func TestChoices(t *testing.T) {
	e := start(t)
	got, err := e.sdk().Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages, N: oai.Int(2)})
	require.NoError(t, err)
	require.Len(t, got.Choices, 2)
	for i, c := range got.Choices {
		assert.Equal(t, int64(i), c.Index)
		assert.Equal(t, "Hello world.", c.Message.Content)
	}
	stream := e.sdk().Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{Model: "qwen", Messages: messages, N: oai.Int(2)})
	texts := map[int64]string{}
	for stream.Next() {
		for _, ch := range stream.Current().Choices {
			texts[ch.Index] += ch.Delta.Content
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, map[int64]string{0: "Hello world.", 1: "Hello world."}, texts)
}

// What the gateway cannot give back in chat's terms is refused before the engine is asked; a
// completion's text prompt reaches the engine as ids and its answer passes on as sent.
func TestRefusalsAndCompletions(t *testing.T) {
	e := start(t)
	for _, c := range []struct{ extra, param string }{
		{`"logprobs":true`, "logprobs"},
		{`"top_logprobs":3`, "top_logprobs"},
		{`"continue_final_message":true`, "continue_final_message"},
		{`"n":0`, "n"},
		{`"stop":3`, "stop"},
	} {
		status, got := e.post(t, "/v1/chat/completions", `{"model":"qwen","messages":`+messagesJSON+`,`+c.extra+`}`)
		assert.Equal(t, http.StatusBadRequest, status, got)
		assert.Contains(t, got, `"param":"`+c.param+`"`, got)
	}
	status, got := e.post(t, "/v1/chat/completions", `{"model":"qwen","messages":[{"role":"wizard","content":"x"}]}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, got, "unknown role", got)
	assert.Zero(t, e.engine.Requests(), "nothing refused reached the engine")

	tok, _ := qwenTok()
	status, got = e.post(t, "/v1/completions", `{"model":"qwen","prompt":"Once upon a time","max_tokens":2}`)
	require.Equal(t, http.StatusOK, status, got)
	assert.Equal(t, tok.Encode("Once upon a time", tokenizer.Options{ParseSpecial: true, AddSpecialTokens: true}), e.engine.Prompts()[0])
	assert.Contains(t, got, `"object":"text_completion"`)
	assert.Contains(t, got, `"text":"Hello world"`)
	u := e.lastUsage(t)
	assert.Equal(t, int64(4), u.PromptTokens, "the prompt's ids, counted by the gateway")
}
