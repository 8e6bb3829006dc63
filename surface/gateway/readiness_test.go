package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadiness: a Readiness created before the gateway is the gateway's: ready until Shutdown
// starts, then not, as Gateway.Ready and KServe's /v2/health/ready say; a gateway without one
// makes its own.
func TestReadiness(t *testing.T) {
	ready := new(gateway.Readiness)
	require.True(t, ready.Ready(), "the zero value is ready")
	srv := gatewaytest.Start(t, gateway.Config{Readiness: ready})
	res, err := http.Get(srv.URL + "/v2/health/ready")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
	require.True(t, srv.Gateway.Ready())

	require.NoError(t, srv.Stop(5*time.Second))
	assert.False(t, ready.Ready(), "turned false by Shutdown")
	assert.False(t, srv.Gateway.Ready())

	own := gateway.New(engines.NewRegistry(), gateway.Config{})
	require.True(t, own.Ready())
	require.NoError(t, own.Shutdown(context.Background()))
	assert.False(t, own.Ready())
}
