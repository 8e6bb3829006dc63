package openai_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

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
	openaitest.Client // the gateway's URL; Post and Get
	srv               *gatewaytest.Server
	proxy             *openai.Proxy
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
	return &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}}
}

func (e *env) sdk() oai.Client {
	return oai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
}

// servedBy sends a chat request and returns the endpoint that answered it.
func (e *env) servedBy(t testing.TB, model string) string {
	t.Helper()
	res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody(model))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	return res.Header.Get(openai.HeaderEndpoint)
}
