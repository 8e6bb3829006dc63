package suite_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/conformance/suite"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// transport.deflate skips cleanly on a server without deflate: here connect-go's handler serving
// gRPC with gzip only, which answers deflate UNIMPLEMENTED (a grpc-go server in this process
// cannot be one: grpc-go's compressors are process-wide, and infergate's deflate is registered).
func TestDeflateCheckSkipsWithoutDeflate(t *testing.T) {
	t.Parallel()
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	mux := http.NewServeMux()
	// Not "triton", which must accept deflate; deflate taken off the handler's compressions.
	mux.Handle(kserve.NewService(reg, kserve.WithServerName("fixture")).Handler(connect.WithCompression("deflate", nil, nil)))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	rep, err := suite.Run(context.Background(), suite.Config{GRPCAddr: srv.Listener.Addr().String(),
		Run: regexp.MustCompile(`^transport\.(deflate|gzip)$`)})
	require.NoError(t, err)
	got := map[string]suite.Result{}
	for _, r := range rep.Results {
		got[r.ID] = r
	}
	assert.Equal(t, suite.Pass, got["transport.gzip"].Outcome, "the server is reached: %+v", got["transport.gzip"])
	assert.Equal(t, suite.Skip, got["transport.deflate"].Outcome, "%+v", got["transport.deflate"])
	assert.Contains(t, got["transport.deflate"].Message, "does not accept deflate")
}
