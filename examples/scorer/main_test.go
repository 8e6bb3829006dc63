package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/conformance/suite"
	scorerv1 "github.com/infergate/infergate/examples/scorer/gen/scorer/v1"
	"github.com/infergate/infergate/examples/scorer/gen/scorer/v1/scorerv1connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// start serves the example exactly as main does, on a loopback port.
func start(t *testing.T) (addr string) {
	t.Helper()
	gw, err := newGateway(newScorer(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestModelInfer(t *testing.T) {
	conn := dial(t, start(t))
	kc := inference.NewGRPCInferenceServiceClient(conn)
	// Two rows: all 1s (mean 1) and 0..31 (mean 15.5).
	rows := make([]float32, 2*features)
	for i := range features {
		rows[i], rows[features+i] = 1, float32(i)
	}
	resp, err := kc.ModelInfer(context.Background(), &inference.ModelInferRequest{
		ModelName:        "scorer",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{2, features}}},
		RawInputContents: [][]byte{tensor.Bytes(rows)},
	})
	require.NoError(t, err)
	require.Len(t, resp.Outputs, 1)
	assert.Equal(t, "OUTPUT__0", resp.Outputs[0].Name)
	assert.Equal(t, "FP32", resp.Outputs[0].Datatype)
	assert.Equal(t, []int64{2, 1}, resp.Outputs[0].Shape)
	assert.InDeltaSlice(t, []float32{1, 15.5}, tensor.View[float32](resp.RawOutputContents[0]), 1e-5)

	meta, err := kc.ModelMetadata(context.Background(), &inference.ModelMetadataRequest{Name: "scorer"})
	require.NoError(t, err)
	assert.Equal(t, []int64{-1, features}, meta.Inputs[0].Shape)
	assert.Equal(t, []int64{-1, 1}, meta.Outputs[0].Shape)

	// A batch larger than max_batch_size is refused with Triton's message.
	_, err = kc.ModelInfer(context.Background(), &inference.ModelInferRequest{
		ModelName:        "scorer",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{65, features}}},
		RawInputContents: [][]byte{make([]byte, 65*features*4)},
	})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "inference request batch-size must be <= 64 for 'scorer'")
}

// The same handler is the typed service, for gRPC and Connect clients.
func TestTypedService(t *testing.T) {
	addr := start(t)
	req := &scorerv1.ScoreRequest{Features: make([]float32, features)}
	for i := range req.Features {
		req.Features[i] = 2
	}
	resp, err := scorerv1.NewScorerServiceClient(dial(t, addr)).Score(context.Background(), req)
	require.NoError(t, err)
	assert.InDeltaSlice(t, []float32{2}, resp.Score, 1e-5)
	resp, err = scorerv1connect.NewScorerServiceClient(gatewaytest.H2CClient(), "http://"+addr).Score(context.Background(), req)
	require.NoError(t, err)
	assert.InDeltaSlice(t, []float32{2}, resp.Score, 1e-5)
}

// The example passes the conformance suite's checks for a generic model; skips are only for what
// the model cannot be asked (reported in the log).
func TestConformance(t *testing.T) {
	addr := start(t)
	rep, err := suite.Run(context.Background(), suite.Config{
		GRPCAddr: addr, Models: []string{"scorer"}, Infergate: true,
		Run: regexp.MustCompile(`^(health|metadata|infer|validate|data|transport)\.`),
	})
	require.NoError(t, err)
	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table, false))
	t.Log("\n" + table.String())
	require.NotZero(t, rep.Summary.Passed)
	for _, res := range rep.Results {
		// The recommendations too.
		if res.Outcome == suite.Fail || res.Outcome == suite.Warn {
			t.Errorf("%s (%s): %s expected %s, got %s", res.ID, res.Title, res.Message, res.Expect, res.Got)
		}
	}
}
