package openai_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUpstreamsThenProxy: the two-step construction. The pool routes without a surface (Post,
// Serves, Models), so what the stages need from it exists before them; a Proxy built on it, even
// after it started, runs each model's stages from its first request, and keeps them in step
// with the routing table as models come and go.
func TestUpstreamsThenProxy(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	u, err := openaipool.New(openaipool.Options{Endpoints: []upstream.Endpoint{up.Endpoint(0)}, Logger: quiet()})
	require.NoError(t, err)
	t.Cleanup(u.Close)
	assert.False(t, u.Serves("llama"), "nothing routed before Start")
	u.Start(context.Background())
	require.True(t, u.Serves("llama"))
	assert.False(t, u.Serves("qwen"))
	assert.Equal(t, []openaipool.ModelInfo{{Name: "llama"}}, u.Models())
	status, _, err := u.Post(context.Background(), upstream.TypeVLLM, "llama", "/v1/chat/completions", []byte(openaitest.ChatBody("llama")))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status, "Post routes without a surface")

	var mu sync.Mutex
	var asked, ran []string
	stages := func(model string) []pipeline.Interceptor {
		mu.Lock()
		asked = append(asked, model)
		mu.Unlock()
		return []pipeline.Interceptor{func(next pipeline.Handler) pipeline.Handler {
			return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
				mu.Lock()
				ran = append(ran, model)
				mu.Unlock()
				return next(ctx, req)
			}
		}}
	}
	p := openai.NewProxy(u, openai.ProxyOptions{Stages: stages})
	mu.Lock()
	assert.Equal(t, []string{"llama"}, asked, "the chains of the table already built")
	mu.Unlock()
	call := func(model string) (*pipeline.Response, error) {
		res, err := p.Call(context.Background(), "/v1/chat/completions", []byte(openaitest.ChatBody(model)))
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Finish(nil)
		}
		return res, err
	}
	res, err := call("llama")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	_, err = call("qwen")
	var perr *pipeline.Error
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, "model_not_found", perr.Code)

	// A model that appears gets its chain with the table that routes it.
	up2 := openaitest.Start(t, "up2", "qwen")
	require.NoError(t, u.AddEndpoint(up2.Endpoint(0)))
	require.Eventually(t, func() bool { return u.Serves("qwen") }, 5*time.Second, 5*time.Millisecond)
	res, err = call("qwen")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	mu.Lock()
	assert.Equal(t, []string{"llama", "qwen"}, ran, "each model's stages ran")
	assert.True(t, slices.Contains(asked, "qwen"))
	mu.Unlock()

	// And one that goes loses it with its routes.
	require.True(t, u.RemoveEndpoint("up2"))
	assert.False(t, u.Serves("qwen"))
	_, err = call("qwen")
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, "model_not_found", perr.Code)
}
