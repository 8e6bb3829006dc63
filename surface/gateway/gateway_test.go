package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/stretchr/testify/require"
)

func TestServeAfterShutdownReturnsAndReleasesThePort(t *testing.T) {
	gw := gateway.New(engines.NewRegistry(), gateway.Config{})
	require.NoError(t, gw.Shutdown(context.Background()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ln) }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, http.ErrServerClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve kept running after Shutdown")
	}
	_, err = net.DialTimeout("tcp", ln.Addr().String(), time.Second)
	require.Error(t, err, "the listener was closed")
}

// TestIdleConnectionsClose: a keep-alive connection that sends nothing after its request is
// closed after IdleTimeout, and so is one that never sends a request.
func TestIdleConnectionsClose(t *testing.T) {
	srv := gatewaytest.Start(t, gateway.Config{IdleTimeout: 200 * time.Millisecond})
	for name, req := range map[string]string{
		"after a request": "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n",
		"before any":      "",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Addr)
			require.NoError(t, err)
			defer c.Close()
			br := bufio.NewReader(c)
			// Taken before the request: the gateway's idle clock starts no earlier than this, and
			// a slow client between the answer and here must not shorten the measured wait.
			start := time.Now()
			if req != "" {
				_, err = io.WriteString(c, req)
				require.NoError(t, err)
				res, err := http.ReadResponse(br, nil)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, res.Body)
				require.Equal(t, http.StatusOK, res.StatusCode)
			}
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			_, err = br.ReadByte()
			require.ErrorIs(t, err, io.EOF, "the gateway closed the idle connection")
			require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "not before IdleTimeout")
		})
	}
}

// TestIdleGRPCConnectionsClose: a native gRPC connection with no call open for IdleTimeout is
// ended by the gateway (GOAWAY), and the client reconnects for its next call.
func TestIdleGRPCConnectionsClose(t *testing.T) {
	srv := gatewaytest.Start(t, gateway.Config{IdleTimeout: 200 * time.Millisecond})
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	client := healthgrpc.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = client.Check(ctx, &healthgrpc.HealthCheckRequest{})
	require.NoError(t, err)
	// The connection may already have been ended by the time we look (a loaded machine can take
	// longer than IdleTimeout between the call's answer and here), so wait only while it is Ready.
	for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
		require.True(t, conn.WaitForStateChange(ctx, s), "the gateway ended the idle connection")
	}
	_, err = client.Check(ctx, &healthgrpc.HealthCheckRequest{})
	require.NoError(t, err, "the next call reconnects")
}
