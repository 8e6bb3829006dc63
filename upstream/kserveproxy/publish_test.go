package kserveproxy

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// TestHealthyOnlyWithRoutes: an endpoint is seen healthy only once its models are registered and
// routed to it (issue 17: it was marked healthy a moment before its routes were rebuilt, so a
// request or a test that saw it healthy could still miss its models). The test holds the lock a
// rebuild needs while the endpoint's first check and discovery run: the endpoint must stay
// unhealthy until the rebuild could happen.
func TestHealthyOnlyWithRoutes(t *testing.T) {
	checked := make(chan struct{})
	gate := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if strings.HasSuffix(info.FullMethod, "/ServerReady") {
			<-checked
		}
		return h(ctx, req)
	})
	up := gatewaytest.Start(t, gateway.Config{GRPCOptions: []grpc.ServerOption{gate}})
	reg := engines.NewRegistry()
	p, err := New(Options{Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)

	require.NoError(t, p.Add(upstream.Endpoint{Name: "a", URL: "http://" + up.Addr, Type: upstream.TypeKServe,
		CheckInterval: time.Hour, CheckTimeout: 10 * time.Second}))
	e := p.endpoints()[0]
	p.mu.Lock()
	close(checked)
	require.Eventually(t, func() bool { return e.models.Load() != nil }, 10*time.Second, time.Millisecond, "discovery ran")
	ok := assert.Never(t, e.Healthy, 200*time.Millisecond, time.Millisecond, "healthy before its routes exist")
	p.mu.Unlock()
	if !ok {
		return
	}

	require.Eventually(t, func() bool { return p.Status()[0].Healthy }, 10*time.Second, time.Millisecond)
	assert.Contains(t, p.Status()[0].Models, "simple", "Status shows the models of a healthy endpoint")
	require.NotNil(t, reg.Lookup("simple"), "the registry serves them")
	p.mu.Lock()
	routes := *p.models["simple"].routes.Load()
	p.mu.Unlock()
	require.Len(t, routes, 1)
	assert.Same(t, e, routes[0].ep)
}
