package protocgen_test

import (
	"context"
	"testing"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkGeneratedVsHandwritten is unary ModelInfer from one grpc-go client on one gateway:
// /infergate calls the built-in `simple`, served through the code generated from
// schema/infergate/builtin (models/builtin); /baseline calls `simple_handwritten`, the same model as
// the hand-written engines.Model it was before (below). Same request bytes, same server, so the
// ratio of ns/op and the difference of allocs/op are the generated adapter's cost. Goal: >= 0.95x
// throughput, no more allocations per request.
func BenchmarkGeneratedVsHandwritten(b *testing.B) {
	srv := gatewaytest.Start(b, gateway.Config{}, handwrittenSimple{})
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
	for _, tc := range []struct{ name, model string }{{"infergate", "simple"}, {"baseline", "simple_handwritten"}} {
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

// handwrittenSimple is the baseline: Triton's `simple` as the hand-written engines.Model the
// built-in was before it moved to the generator, converting tensors itself.
type handwrittenSimple struct{}

var handwrittenSimpleConfig = &inference.ModelConfig{
	Name: "simple_handwritten", Platform: "infergate_cpu", Backend: "cpu", MaxBatchSize: 8,
	VersionPolicy: &inference.ModelVersionPolicy{
		PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}},
	},
	Input: []*inference.ModelInput{
		{Name: "INPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}},
		{Name: "INPUT1", DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}},
	},
	Output: []*inference.ModelOutput{
		{Name: "OUTPUT0", DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}},
		{Name: "OUTPUT1", DataType: inference.DataType_TYPE_INT32, Dims: []int64{16}},
	},
	InstanceGroup: []*inference.ModelInstanceGroup{{Name: "simple_handwritten", Kind: inference.ModelInstanceGroup_KIND_CPU, Count: 1}},
}

func (handwrittenSimple) Config() *inference.ModelConfig { return handwrittenSimpleConfig }

func (handwrittenSimple) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in0, in1 := req.Input("INPUT0"), req.Input("INPUT1")
	a, b := tensor.View[int32](in0.Data), tensor.View[int32](in1.Data)
	out := make([]int32, 2*len(a))
	sum, diff := out[:len(a)], out[len(a):]
	for i := range a {
		sum[i] = a[i] + b[i]
		diff[i] = a[i] - b[i]
	}
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "OUTPUT0", Datatype: inference.DataType_TYPE_INT32, Shape: in0.Shape, Data: tensor.Bytes(sum)},
		{Name: "OUTPUT1", Datatype: inference.DataType_TYPE_INT32, Shape: in0.Shape, Data: tensor.Bytes(diff)},
	}})
}
