package kserveproxy_test

import (
	"context"
	"net"
	"testing"

	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// A traced ModelInfer on a proxied model: the upstream call is a child span of the request's,
// and the upstream Triton receives that span's traceparent (next to the endpoint's own
// metadata), on a unary and on a decoupled model.
func TestUpstreamCallIsAChildSpan(t *testing.T) {
	t.Parallel()
	seen := make(chan string, 4)
	peek := func(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
		md, _ := metadata.FromIncomingContext(ctx)
		seen <- first(md.Get("traceparent"))
		return echo(ctx, req, send)
	}
	up := startUpstream(t, &testModel{name: "peek", exec: peek}, &testModel{name: "peek_stream", decoupled: true, exec: peek})
	f := startFront(t, fast(ep("up", up.Addr, 100)))
	f.waitModel(t, "peek")
	f.waitModel(t, "peek_stream")

	spans := tracetest.NewInMemoryExporter()
	on := tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1, Count: -1}
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: spans, Synchronous: true, Settings: &on})
	require.NoError(t, err)
	svc := kserve.NewService(f.Registry, kserve.WithTracing(tr))
	gs := grpc.NewServer(svc.ServerOptions()...)
	svc.RegisterGRPC(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	c := client(t, ln.Addr().String())

	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", parent)
	_, err = c.ModelInfer(ctx, testRequest("peek", 1, 2))
	require.NoError(t, err)
	got := spans.GetSpans()
	require.Len(t, got, 2)
	upSpan, srv := got[0], got[1]
	assert.Equal(t, "upstream up", upSpan.Name)
	assert.Equal(t, srv.SpanContext.SpanID(), upSpan.Parent.SpanID())
	assert.Equal(t, "b7ad6b7169203331", srv.Parent.SpanID().String())
	assert.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-"+upSpan.SpanContext.SpanID().String()+"-01", <-seen)

	spans.Reset()
	res, err := stream(ctx, t, c, testRequest("peek_stream", 3))
	require.NoError(t, err)
	require.NotEmpty(t, res)
	got = spans.GetSpans()
	require.Len(t, got, 2, "the stream's span and its request's upstream call")
	assert.Equal(t, "upstream up", got[0].Name)
	assert.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-"+got[0].SpanContext.SpanID().String()+"-01", <-seen)
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
