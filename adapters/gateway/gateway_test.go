package gateway_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/gateway"
	"github.com/infergate/infergate/engines"
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
