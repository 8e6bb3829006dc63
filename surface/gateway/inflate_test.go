package gateway_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/status"
)

// A gzip message over native gRPC inflates to at most the server's message limit, as an
// uncompressed one may be: grpc-go checks its limit against the compressed bytes only, which the
// gateway now passes on to be inflated later. And one that fits inflates and runs.
func TestGRPCCompressedMessageLimit(t *testing.T) {
	srv := gatewaytest.Start(t, gateway.Config{MaxMessageBytes: 1 << 20})
	conn := dial(t, srv.Addr)
	c := inference.NewGRPCInferenceServiceClient(conn)
	// 2 MiB of a four-letter alphabet: about 512 KiB gzipped, under the limit on the wire.
	r := rand.New(rand.NewPCG(3, 4))
	big := make([]byte, 2<<20)
	for i := range big {
		big[i] = "ACGT"[r.IntN(4)]
	}
	req := &inference.ModelInferRequest{ModelName: "simple", RawInputContents: [][]byte{big}}
	_, err := c.ModelInfer(context.Background(), req, grpc.UseCompressor("gzip"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "decompresses to more than 1048576 bytes")

	res, err := c.ModelInfer(context.Background(), simpleRequest(), grpc.UseCompressor("gzip"))
	require.NoError(t, err)
	checkSimple(t, res)
}
