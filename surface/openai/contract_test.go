package openai_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/h1contract"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// TestHTTP1Contract: the gateway's HTTP/1.1 serving of the OpenAI routes behind the gateway's
// protocol router, on each server it can use (its own connection loop, the default, and
// net/http's), keeps the contract any server of these routes must (internal/h1contract): no
// smuggling, safe framing, pipelining, Expect, HTTP/1.0, bounds, and a trickled header cut off
// (with a 1 s header timeout, unless -short).
func TestHTTP1Contract(t *testing.T) {
	for _, server := range []string{gateway.HTTP1Gateway, gateway.HTTP1NetHTTP} {
		t.Run(server, func(t *testing.T) {
			up := openaitest.Start(t, "up", "llama")
			p, err := openai.New(openai.Options{Endpoints: []upstream.Endpoint{openaitest.SlowChecks(up.Endpoint(0))}, Logger: quiet()})
			require.NoError(t, err)
			p.Start(context.Background())
			t.Cleanup(p.Close)
			srv := gatewaytest.Start(t, gateway.Config{HeaderTimeout: time.Second, HTTP1: server,
				Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
			h1contract.Run(t, h1contract.Target{Addr: srv.Addr, Chat: openaitest.ChatBody("llama"), Upstream: up.Requests,
				HeaderTimeout: time.Second})
		})
	}
}
