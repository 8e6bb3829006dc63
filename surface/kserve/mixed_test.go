package kserve_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOneProtocolFamilyPerH2CConnection pins the documented limitation: a cleartext HTTP/2
// connection first used for gRPC answers gRPC-Web on it with a clear error, not a hang or a crash,
// while gRPC on it keeps working.
func TestOneProtocolFamilyPerH2CConnection(t *testing.T) {
	srv := start(t)
	shared := gatewaytest.H2CClient()
	grpcClient := &client{name: "grpc", http: shared, url: srv.URL, options: []connect.ClientOption{connect.WithGRPC()}}
	webClient := &client{name: "grpcweb", http: shared, url: srv.URL, options: []connect.ClientOption{connect.WithGRPCWeb()}}
	ctx := context.Background()
	_, err := infer(ctx, grpcClient, simpleRequest("first"))
	require.NoError(t, err)
	_, err = infer(ctx, webClient, simpleRequest("second"))
	require.Error(t, err)
	t.Logf("gRPC-Web on a gRPC connection: %v", err)
	assert.Contains(t, err.Error(), "415")
	_, err = infer(ctx, grpcClient, simpleRequest("third"))
	require.NoError(t, err)
}
