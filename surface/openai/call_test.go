package openai_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// TestCall: internal callers reach upstreams with the routing HTTP clients get.
func TestCall(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	ctx := context.Background()

	res, err := e.proxy.Call(pipeline.WithRequestID(ctx, "req-7"), "/v1/completions", []byte(`{"model":"llama","prompt":"hi"}`))
	require.NoError(t, err)
	body, err := io.ReadAll(res)
	require.NoError(t, err)
	require.NoError(t, res.Close())
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "a", res.Endpoint)
	assert.False(t, res.Stream)
	assert.Contains(t, string(body), `"text":"Hello from a"`)
	assert.Equal(t, "req-7", a.LastHeader().Get(openai.HeaderRequestID))
	assert.Equal(t, "application/json", a.LastHeader().Get("Content-Type"))

	a.SetStream(3, 0)
	res, err = e.proxy.Call(ctx, "/v1/completions", []byte(`{"model":"llama","prompt":"hi","stream":true}`))
	require.NoError(t, err)
	require.True(t, res.Stream)
	ev := pipeline.NewEvents(res)
	var texts []string
	for {
		data, err := ev.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		texts = append(texts, string(data))
	}
	require.NoError(t, res.Close())
	require.Len(t, texts, 4, "3 content chunks and the finish chunk; [DONE] ends the events")
	assert.Contains(t, texts[2], `"text":"tok2 "`)

	_, err = e.proxy.Call(ctx, "/v1/completions", []byte(`{"model":"nope"}`))
	var gwErr *pipeline.Error
	require.True(t, errors.As(err, &gwErr), "%v", err)
	assert.Equal(t, http.StatusNotFound, gwErr.Status)
	assert.Equal(t, "model_not_found", gwErr.Code)
	_, err = e.proxy.Call(ctx, "/v1/completions", []byte(`{"prompt":"x"}`))
	require.True(t, errors.As(err, &gwErr), "%v", err)
	assert.Equal(t, "missing_required_parameter", gwErr.Code)

	// Closing a stream early cancels the upstream request and frees the endpoint.
	a.SetStream(1000, 10*time.Millisecond)
	res, err = e.proxy.Call(ctx, "/v1/completions", []byte(`{"model":"llama","prompt":"hi","stream":true}`))
	require.NoError(t, err)
	_, err = pipeline.NewEvents(res).Next()
	require.NoError(t, err)
	require.NoError(t, res.Close())
	require.Eventually(t, func() bool { return a.Canceled() == 1 }, 10*time.Second, 5*time.Millisecond)
	_, m := e.Get(t, "/metrics")
	assert.Contains(t, m, `infergate_openai_in_flight_requests{endpoint="a",model="llama"} 0`)
	assert.Contains(t, m, `infergate_openai_requests_total{code="499",endpoint="a",model="llama"} 1`)
	assert.Contains(t, m, `infergate_openai_requests_total{code="200",endpoint="a",model="llama"} 2`)
}

// TestAddRemoveEndpoint: endpoints added at run time serve their fixed models; removing one takes
// its models away; the model set's changes are announced.
func TestAddRemoveEndpoint(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	reg := openaitest.Start(t, "reg", "llama", "mistral")
	var changes atomic.Int32
	p, err := openai.New(openai.Options{Logger: quiet(), Endpoints: []upstream.Endpoint{openaitest.SlowChecks(a.Endpoint(10))}})
	require.NoError(t, err)
	p.Watch(func() { changes.Add(1) })
	p.Start(context.Background())
	defer p.Close()
	assert.Equal(t, []openaipool.ModelInfo{{Name: "llama"}}, p.Models())
	before := changes.Load()

	added := upstream.Endpoint{Name: "reg", URL: reg.URL, Type: upstream.TypeVLLM, Priority: 20, Kind: upstream.KindChat,
		SkipDiscovery: true, Models: []string{"llama", "mistral", "unlisted"}, CheckInterval: time.Hour}
	require.NoError(t, p.AddEndpoint(added))
	require.Eventually(t, func() bool { return len(p.Models()) > 1 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, []openaipool.ModelInfo{{Name: "llama"}, {Name: "mistral", Kind: "chat"}, {Name: "unlisted", Kind: "chat"}}, p.Models(),
		"exactly the registered models, whatever the upstream lists; llama's kinds differ")
	assert.Greater(t, changes.Load(), before)

	res, err := p.Call(context.Background(), "/v1/chat/completions", []byte(openaitest.ChatBody("llama")))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res)
	res.Close()
	assert.Equal(t, "reg", res.Endpoint, "the added endpoint's higher priority wins")

	var fe *upstream.FieldError
	require.True(t, errors.As(p.AddEndpoint(added), &fe), "duplicate name")
	assert.Equal(t, "name", fe.Field)
	bad := added
	bad.Name, bad.Kind = "bad", "images"
	require.True(t, errors.As(p.AddEndpoint(bad), &fe))
	assert.Equal(t, "kind", fe.Field)

	require.True(t, p.RemoveEndpoint("reg"))
	require.False(t, p.RemoveEndpoint("reg"))
	assert.Equal(t, []openaipool.ModelInfo{{Name: "llama"}}, p.Models())
	res, err = p.Call(context.Background(), "/v1/chat/completions", []byte(openaitest.ChatBody("llama")))
	require.NoError(t, err)
	res.Close()
	assert.Equal(t, "a", res.Endpoint)
}

// TestAdmission: the proxy asks Admit before every request, HTTP and Call alike; a refusal
// answers with its status, error object and headers and never reaches the upstream; an admitted
// request's headers reach the client and its Done gets the upstream's usage.
func TestAdmission(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	var usage []pipeline.Usage
	var mu sync.Mutex
	p, err := openai.New(openai.Options{Logger: quiet(), Endpoints: []upstream.Endpoint{openaitest.SlowChecks(a.Endpoint(0))},
		Stages: pipeline.ForAll(pipeline.Admit(func(ctx context.Context, r *pipeline.Request) (pipeline.Admitted, error) {
			model, body := r.Model(), r.Body()
			if strings.Contains(string(body), "deny") {
				return pipeline.Admitted{}, &pipeline.Error{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded",
					Message: "slow down " + model, Header: http.Header{"Retry-After": {"2"}}}
			}
			return pipeline.Admitted{Header: http.Header{"X-Ratelimit-Remaining-Requests": {"9"}}, Done: func(u pipeline.Usage) {
				mu.Lock()
				usage = append(usage, u)
				mu.Unlock()
			}}, nil
		}))})
	require.NoError(t, err)
	p.Start(context.Background())
	defer p.Close()
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	e := &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}}

	res, body := e.Post(t, "/v1/chat/completions", `{"model":"llama","user":"deny"}`)
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	assert.Equal(t, "2", res.Header.Get("Retry-After"))
	assert.JSONEq(t, `{"error":{"message":"slow down llama","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, body)
	assert.Zero(t, a.Requests(), "a refused request never reaches the upstream")
	_, err = p.Call(context.Background(), "/v1/completions", []byte(`{"model":"llama","user":"deny"}`))
	var gwErr *pipeline.Error
	require.True(t, errors.As(err, &gwErr))
	assert.Equal(t, http.StatusTooManyRequests, gwErr.Status)

	res, _ = e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "9", res.Header.Get("X-Ratelimit-Remaining-Requests"))
	cr, err := p.Call(context.Background(), "/v1/completions", []byte(`{"model":"llama","prompt":"x"}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, cr)
	cr.Close()
	// A stream without a usage chunk reports its chunks: 4 content chunks, the finish chunk
	// and [DONE].
	res, _ = e.Post(t, "/v1/chat/completions", `{"model":"llama","stream":true}`)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	// An unknown model is answered without asking Admit; a request that never reached an
	// upstream reports Status 0.
	res, _ = e.Post(t, "/v1/chat/completions", openaitest.ChatBody("nope"))
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	a.Stop()
	res, _ = e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	assert.Equal(t, http.StatusBadGateway, res.StatusCode)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []pipeline.Usage{{PromptTokens: 7, CompletionTokens: 4, Status: 200}, {PromptTokens: 7, CompletionTokens: 4, Status: 200},
		{Chunks: 6, Status: 200}, {}}, usage)
}
