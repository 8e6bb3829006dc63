package openai_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSDK drives every route with the official openai-go client.
func TestSDK(t *testing.T) {
	a := openaitest.Start(t, "a", "llama", "qwen")
	b := openaitest.Start(t, "b", "llama", "bge")
	epA := a.Endpoint(100)
	epA.Aliases = map[string]string{"gpt-4o": "llama"}
	e := start(t, epA, b.Endpoint(50))
	c := e.sdk()
	ctx := context.Background()

	t.Run("list models", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		require.NoError(t, err)
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
			assert.Equal(t, "model", string(m.Object))
		}
		assert.Equal(t, []string{"bge", "gpt-4o", "llama", "qwen"}, ids, "union of both upstreams plus the alias, once each")
		m, err := c.Models.Get(ctx, "qwen")
		require.NoError(t, err)
		assert.Equal(t, "qwen", m.ID)
	})

	t.Run("chat", func(t *testing.T) {
		var res *http.Response
		out, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model:    "llama",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
		}, option.WithResponseInto(&res))
		require.NoError(t, err)
		assert.Equal(t, "Hello from a", out.Choices[0].Message.Content, "the higher priority tier serves")
		assert.EqualValues(t, 4, out.Usage.CompletionTokens)
		assert.Equal(t, "a", res.Header.Get(openai.HeaderEndpoint))
	})

	t.Run("alias", func(t *testing.T) {
		out, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model:    "gpt-4o",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
		})
		require.NoError(t, err)
		assert.Equal(t, "llama", out.Model, "the upstream saw its own model name")
	})

	t.Run("completions", func(t *testing.T) {
		out, err := c.Completions.New(ctx, oai.CompletionNewParams{
			Model:  "qwen",
			Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("once upon")},
		})
		require.NoError(t, err)
		assert.Equal(t, "Hello from a", out.Choices[0].Text)
	})

	t.Run("embeddings", func(t *testing.T) {
		out, err := c.Embeddings.New(ctx, oai.EmbeddingNewParams{
			Model: "bge",
			Input: oai.EmbeddingNewParamsInputUnion{OfString: oai.String("hello")},
		})
		require.NoError(t, err)
		assert.Equal(t, []float64{0.25, -0.5, 1.0}, out.Data[0].Embedding)
	})

	t.Run("streaming chat", func(t *testing.T) {
		a.SetStream(8, 0)
		s := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
			Model:    "llama",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
		})
		var text strings.Builder
		chunks := 0
		for s.Next() {
			chunks++
			if len(s.Current().Choices) > 0 {
				text.WriteString(s.Current().Choices[0].Delta.Content)
			}
		}
		require.NoError(t, s.Err())
		assert.Equal(t, 9, chunks, "8 content chunks and the finish chunk")
		assert.Equal(t, "tok0 tok1 tok2 tok3 tok4 tok5 tok6 tok7 ", text.String())
	})

	t.Run("unknown model is 404 model_not_found", func(t *testing.T) {
		_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model:    "nope",
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
		})
		var apiErr *oai.Error
		require.True(t, errors.As(err, &apiErr), "%v", err)
		assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
		assert.Equal(t, "model_not_found", apiErr.Code)
		assert.Equal(t, "invalid_request_error", apiErr.Type)
		assert.Equal(t, "model", apiErr.Param)
		assert.Contains(t, apiErr.Message, "`nope`")
		_, err = c.Models.Get(ctx, "nope")
		require.True(t, errors.As(err, &apiErr), "%v", err)
		assert.Equal(t, "model_not_found", apiErr.Code)
	})

	t.Run("upstream 4xx passes through unchanged", func(t *testing.T) {
		b.FailWith(http.StatusTooManyRequests)
		defer b.FailWith(0)
		res, body := e.Post(t, "/v1/embeddings", `{"model":"bge","input":"x"}`)
		assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
		assert.JSONEq(t, `{"object":"error","message":"injected failure from b","type":"BadRequestError","param":null,"code":429}`, body)
	})
}

// TestStreamMidStreamDeath: an upstream dying mid-stream ends the client's stream with an error,
// promptly, after the chunks that did arrive.
func TestStreamMidStreamDeath(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	a.SetStream(10, time.Millisecond)
	a.DieAfter(3)
	e := start(t, a.Endpoint(100), b.Endpoint(50))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := e.sdk()
	s := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
		Model:    "llama",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
	})
	n := 0
	for s.Next() {
		n++
	}
	require.Error(t, s.Err(), "a truncated stream is an error, not a clean end")
	require.NoError(t, ctx.Err(), "no hang")
	assert.Contains(t, s.Err().Error(), "upstream a failed mid-stream")
	assert.Equal(t, 3, n, "the chunks before the failure arrived")
	assert.Zero(t, b.Requests(), "never retried once streaming began")

	// A non-streaming body cut short is a transport error for the client, not a short JSON.
	a.DieAfter(0)
	_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Model:    "llama",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")},
	})
	require.Error(t, err)
}
