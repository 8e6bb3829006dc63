//go:build linux

package kserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkSharedMemoryInfer compares a 4 MiB identity_fp32 request over grpc-go with its tensor
// in the message (the baseline) against the same tensor in and out through shared memory, and
// reports the ratio of the shared memory time to the baseline's.
func BenchmarkSharedMemoryInfer(b *testing.B) {
	const n = 1 << 20 // FP32 elements: 4 MiB
	srv := gatewaytest.Start(b, gateway.Config{})
	ctx := context.Background()
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close() })
	c := &client{name: "grpc-go", conn: conn}
	in, out := newClientRegion(b, 4*n), newClientRegion(b, 4*n)
	require.NoError(b, register(ctx, c, "bin", in.key, 0, 4*n))
	require.NoError(b, register(ctx, c, "bout", out.key, 0, 4*n))
	raw := &inference.ModelInferRequest{ModelName: "identity_fp32",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "FP32", []int64{n})},
		RawInputContents: [][]byte{make([]byte, 4*n)}}
	viaShm := &inference.ModelInferRequest{ModelName: "identity_fp32",
		Inputs:  []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{n}, Parameters: shmParams("bin", 4*n, 0)}},
		Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0", Parameters: shmParams("bout", 4*n, 0)}}}
	b.ResetTimer()
	var base, shmNs int64
	for range b.N {
		t0 := time.Now().UnixNano()
		_, err := infer(ctx, c, raw)
		t1 := time.Now().UnixNano()
		require.NoError(b, err)
		_, err = infer(ctx, c, viaShm)
		t2 := time.Now().UnixNano()
		require.NoError(b, err)
		base += t1 - t0
		shmNs += t2 - t1
	}
	b.ReportMetric(float64(base)/float64(b.N)/1e3, "raw-us/op")
	b.ReportMetric(float64(shmNs)/float64(b.N)/1e3, "shm-us/op")
	b.ReportMetric(float64(shmNs)/float64(base), "shm/raw")
}
