package anthropic_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	asdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/infergate/infergate/surface/anthropic"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestThroughGatewayProxy composes the Handler with the gateway's real OpenAI surface in front
// of a fake vLLM on a socket: its headers, its usage chunk, its errors and its mid-stream failure
// reach the Anthropic SDK translated.
func TestThroughGatewayProxy(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "a", "llama")
	p, err := openai.New(openai.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Endpoints: []upstream.Endpoint{{
		Name: "a", URL: up.URL, Type: upstream.TypeVLLM, CheckInterval: time.Hour, CheckTimeout: time.Second}}})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	inner := http.NewServeMux()
	p.Mount(inner, nil)
	inner.Handle("POST /v1/messages", anthropic.New(anthropic.Options{Chat: inner}))
	outer := http.NewServeMux()
	outer.Handle("GET /v1/models", anthropic.WrapModels(inner))
	outer.Handle("/", inner)
	srv := newServer(t, anthropic.AcceptAPIKey(outer))
	c := asdk.NewClient(option.WithBaseURL(srv+"/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	ctx := context.Background()

	var res *http.Response
	m, err := c.Messages.New(ctx, asdk.MessageNewParams{Model: "llama", MaxTokens: 16, Messages: userText("hi")}, option.WithResponseInto(&res))
	require.NoError(t, err)
	assert.Equal(t, "Hello from a", m.Content[0].Text)
	assert.EqualValues(t, 7, m.Usage.InputTokens)
	assert.EqualValues(t, 4, m.Usage.OutputTokens)
	assert.Equal(t, "a", res.Header.Get(openai.HeaderEndpoint))
	assert.Equal(t, "msg_"+res.Header.Get("X-Request-Id"), m.ID)
	assert.Empty(t, up.LastHeader().Get("Authorization"), "an Anthropic client's key never becomes an OpenAI upstream's bearer token")
	assert.Empty(t, up.LastHeader().Get("X-Api-Key"), "nor reaches it as sent: the upstream's credentials come from its config")

	up.SetReply("Hello wide world")
	msg, _, err := streamed(t, c, asdk.MessageNewParams{Model: "llama", MaxTokens: 16, Messages: userText("hi")})
	require.NoError(t, err)
	assert.Equal(t, "Hello wide world", msg.Content[0].Text)
	assert.EqualValues(t, 7, msg.Usage.InputTokens, "from the include_usage chunk")
	assert.Positive(t, msg.Usage.OutputTokens)
	assert.Equal(t, asdk.StopReasonEndTurn, msg.StopReason)

	_, err = c.Messages.New(ctx, asdk.MessageNewParams{Model: "nope", MaxTokens: 16, Messages: userText("hi")})
	var apiErr *asdk.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 404, apiErr.StatusCode)
	assert.EqualValues(t, "not_found_error", apiErr.Type())
	assert.Contains(t, apiErr.Message, "nope")

	up.SetStream(8, 0)
	up.DieAfter(2)
	_, _, err = streamed(t, c, asdk.MessageNewParams{Model: "llama", MaxTokens: 16, Messages: userText("hi")})
	require.Error(t, err, "an upstream dying mid-stream is the stream's error")
	assert.Contains(t, err.Error(), "failed mid-stream", "the in-band error event, not a bare EOF")
	up.DieAfter(-1)

	page, err := c.Models.List(ctx, asdk.ModelListParams{})
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, "llama", page.Data[0].ID)
}
