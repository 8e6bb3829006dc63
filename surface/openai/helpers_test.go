package openai_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// env is a real gateway on a loopback port with the OpenAI proxy mounted, in front of fakes.
type env struct {
	srv   *gatewaytest.Server
	proxy *openai.Proxy
	URL   string
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(tb testing.TB, eps ...upstream.Endpoint) *env {
	tb.Helper()
	p, err := openai.New(openai.Options{Endpoints: eps, Logger: quiet()})
	require.NoError(tb, err)
	p.Start(context.Background())
	tb.Cleanup(p.Close) // runs after the gateway's drain (cleanups run last-in first-out)
	srv := gatewaytest.Start(tb, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	srv.Gateway.Metrics().MustRegister(p.Collectors()...)
	return &env{srv: srv, proxy: p, URL: srv.URL}
}

// ep is a vLLM endpoint for a fake with fast health checks.
func ep(u *openaitest.Upstream, priority int) upstream.Endpoint {
	return upstream.Endpoint{Name: u.Name, URL: u.URL, Type: upstream.TypeVLLM, Priority: priority,
		CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second}
}

// slowChecks makes an endpoint's health checks rare, so only the proxy's own failures move it.
func slowChecks(e upstream.Endpoint) upstream.Endpoint {
	e.CheckInterval = time.Hour
	return e
}

func (e *env) sdk() oai.Client {
	return oai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
}

// post sends a raw JSON body and returns the response with its body read.
func (e *env) post(t testing.TB, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func (e *env) get(t testing.TB, path string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(e.URL + path)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func chatBody(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

// servedBy sends a chat request and returns the endpoint that answered it.
func (e *env) servedBy(t testing.TB, model string) string {
	t.Helper()
	res, body := e.post(t, "/v1/chat/completions", chatBody(model))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	return res.Header.Get(openai.HeaderEndpoint)
}
