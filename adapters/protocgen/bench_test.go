package protocgen_test

import (
	"context"
	"testing"

	"github.com/infergate/infergate/adapters/gateway"
	"github.com/infergate/infergate/adapters/gateway/gatewaytest"
	"github.com/infergate/infergate/adapters/tensor"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/infergate/tensortest/v1/tensortestv1infergate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkGeneratedVsHandwritten is unary ModelInfer from one grpc-go client on one gateway:
// /infergate calls `simple_generated`, Triton's simple served through the generated adapter
// (schema/infergate/tensortest, handler `simple` in generated_test.go); /baseline calls the
// hand-written built-in `simple`. Same request bytes, same server, so the ratio of ns/op and the
// difference of allocs/op are the generated adapter's cost. Goal: >= 0.95x throughput, no more
// allocations per request.
func BenchmarkGeneratedVsHandwritten(b *testing.B) {
	srv := gatewaytest.Start(b, gateway.Config{}, tensortestv1infergate.NewSimpleServiceModels(simple{})...)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	client := inference.NewGRPCInferenceServiceClient(conn)
	in0, in1 := make([]int32, 16), make([]int32, 16)
	for i := range in0 {
		in0[i], in1[i] = int32(i), 1
	}
	for _, tc := range []struct{ name, model string }{{"infergate", "simple_generated"}, {"baseline", "simple"}} {
		b.Run(tc.name, func(b *testing.B) {
			req := &inference.ModelInferRequest{
				ModelName: tc.model,
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
					{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
				},
				RawInputContents: [][]byte{tensor.Bytes(in0), tensor.Bytes(in1)},
			}
			// One checked call first, so a broken model cannot look fast.
			resp, err := client.ModelInfer(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			if got := tensor.View[int32](resp.RawOutputContents[1]); len(got) != 16 || got[15] != 14 {
				b.Fatalf("%s: OUTPUT1 = %v", tc.model, got)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := client.ModelInfer(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
