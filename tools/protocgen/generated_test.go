package protocgen_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	tt "github.com/infergate/infergate/gen/infergate/tensortest/v1"
	"github.com/infergate/infergate/gen/infergate/tensortest/v1/tensortestv1connect"
	"github.com/infergate/infergate/gen/infergate/tensortest/v1/tensortestv1infergate"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The models of schema/infergate/tensortest/v1, implemented as a user would, served by a real
// gateway and called by real clients: this is what the generated code must get right.

type simple struct{}

func (simple) Simple(_ context.Context, req *tt.SimpleRequest) (*tt.SimpleResponse, error) {
	n := len(req.Input0)
	out := make([]int32, 2*n) // one buffer for both outputs, as the hand-written simple does
	sum, diff := out[:n], out[n:]
	for i := range n {
		sum[i] = req.Input0[i] + req.Input1[i]
		diff[i] = req.Input0[i] - req.Input1[i]
	}
	return &tt.SimpleResponse{Output0: sum, Output1: diff}, nil
}

type echo struct{}

func (echo) Echo(_ context.Context, r *tt.EchoRequest) (*tt.EchoResponse, error) {
	return &tt.EchoResponse{
		Bool: r.Bool, Uint8: r.Uint8, Uint16: r.Uint16, Uint32: r.Uint32, Uint64: r.Uint64,
		Int8: r.Int8, Int16: r.Int16, Int32: r.Int32, Int64: r.Int64, Fp16: r.Fp16, Fp32: r.Fp32,
		Fp64: r.Fp64, Bytes: r.Bytes, Bf16: r.Bf16, String_: r.String_, Image: r.Image, ImageShape: r.ImageShape,
	}, nil
}

func (echo) Countdown(ctx context.Context, r *tt.CountdownRequest, send func(*tt.CountdownResponse) error) error {
	if r.From[0] < 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("FROM must be >= 0"))
	}
	for v := r.From[0]; v > 0; v-- {
		if err := send(&tt.CountdownResponse{Value: []int32{v}}); err != nil {
			return err
		}
	}
	return nil
}

type accumulate struct{ sums map[uint64]int64 }

func (a *accumulate) Accumulate(_ context.Context, r *tt.AccumulateRequest) (*tt.AccumulateResponse, error) {
	id := r.Corrid[0]
	if r.Start[0] {
		a.sums[id] = 0
	}
	a.sums[id] += int64(r.Input[0])
	return &tt.AccumulateResponse{Sum: []int64{a.sums[id]}}, nil
}

func testModels() []engines.Model {
	var models []engines.Model
	models = append(models, tensortestv1infergate.NewSimpleServiceModels(simple{})...)
	models = append(models, tensortestv1infergate.NewEchoServiceModels(echo{})...)
	models = append(models, tensortestv1infergate.NewAccumulateServiceModels(&accumulate{sums: map[uint64]int64{}})...)
	return models
}

func startTest(t *testing.T) (*gatewaytest.Server, inference.GRPCInferenceServiceClient, *grpc.ClientConn) {
	t.Helper()
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){
		tensortestv1infergate.MountSimpleService(simple{}),
		tensortestv1infergate.MountEchoService(echo{}),
	}}, testModels()...)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return srv, inference.NewGRPCInferenceServiceClient(conn), conn
}

func raw(name, dt string, shape []int64) *inference.ModelInferRequest_InferInputTensor {
	return &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape}
}

func TestGeneratedSimple(t *testing.T) {
	_, kc, _ := startTest(t)
	ctx := context.Background()
	a, b := make([]int32, 32), make([]int32, 32)
	for i := range a {
		a[i], b[i] = int32(i), 1
	}
	resp, err := kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple_generated",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{raw("INPUT0", "INT32", []int64{2, 16}), raw("INPUT1", "INT32", []int64{2, 16})},
		RawInputContents: [][]byte{tensor.Bytes(a), tensor.Bytes(b)},
	})
	require.NoError(t, err)
	require.Len(t, resp.Outputs, 2)
	assert.Equal(t, "OUTPUT0", resp.Outputs[0].Name)
	assert.Equal(t, "INT32", resp.Outputs[0].Datatype)
	assert.Equal(t, []int64{2, 16}, resp.Outputs[0].Shape)
	assert.Equal(t, []int64{2, 16}, resp.Outputs[1].Shape)
	sum, diff := tensor.View[int32](resp.RawOutputContents[0]), tensor.View[int32](resp.RawOutputContents[1])
	for i := range a {
		require.Equal(t, a[i]+1, sum[i])
		require.Equal(t, a[i]-1, diff[i])
	}

	// Metadata and config come from the annotations, Triton-style: dims without the batch dim,
	// metadata shapes with a leading -1.
	meta, err := kc.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "simple_generated"})
	require.NoError(t, err)
	assert.Equal(t, []int64{-1, 16}, meta.Inputs[0].Shape)
	assert.Equal(t, "INT32", meta.Outputs[1].Datatype)
	assert.Equal(t, "infergate_go", meta.Platform)
	cfg, err := kc.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple_generated"})
	require.NoError(t, err)
	assert.Equal(t, int32(8), cfg.Config.MaxBatchSize)
	assert.Equal(t, []int64{16}, cfg.Config.Input[1].Dims)

	// The registry validates against the generated config with Triton's messages.
	_, err = kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple_generated",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{raw("INPUT0", "INT32", []int64{1, 15}), raw("INPUT1", "INT32", []int64{1, 15})},
		RawInputContents: [][]byte{make([]byte, 60), make([]byte, 60)},
	})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "unexpected shape for input 'INPUT0' for model 'simple_generated'. Expected [-1,16], got [1,15]")
}

func TestGeneratedEveryDatatype(t *testing.T) {
	_, kc, _ := startTest(t)
	// name, datatype, raw bytes of 3 elements (BYTES: 3 framed elements).
	inputs := []struct {
		name, dt string
		data     []byte
	}{
		{"BOOL", "BOOL", []byte{1, 0, 1}},
		{"UINT8", "UINT8", []byte{0, 7, 255}},
		{"UINT16", "UINT16", tensor.Bytes([]uint16{0, 7, 65535})},
		{"UINT32", "UINT32", tensor.Bytes([]uint32{0, 7, 1<<32 - 1})},
		{"UINT64", "UINT64", tensor.Bytes([]uint64{0, 7, 1<<64 - 1})},
		{"INT8", "INT8", tensor.Bytes([]int8{-128, 7, 127})},
		{"INT16", "INT16", tensor.Bytes([]int16{-32768, 7, 32767})},
		{"INT32", "INT32", tensor.Bytes([]int32{-1 << 31, 7, 1<<31 - 1})},
		{"INT64", "INT64", tensor.Bytes([]int64{-1 << 63, 7, 1<<63 - 1})},
		{"FP16", "FP16", tensor.Bytes([]uint16{0x3c00, 0xc000, 0x7bff})},
		{"FP32", "FP32", tensor.Bytes([]float32{-1.5, 0, 3.25})},
		{"FP64", "FP64", tensor.Bytes([]float64{-1.5, 0, 1e300})},
		{"BYTES", "BYTES", tensor.JoinBytes([]string{"a", "", "\x00\xff"})},
		{"BF16", "BF16", tensor.Bytes([]uint16{0x3f80, 0xc000, 0x7f7f})},
		{"STRING", "BYTES", tensor.JoinBytes([]string{"héllo", "", "z"})},
	}
	req := &inference.ModelInferRequest{ModelName: "echo_all_types"}
	for _, in := range inputs {
		req.Inputs = append(req.Inputs, raw(in.name, in.dt, []int64{3}))
		req.RawInputContents = append(req.RawInputContents, in.data)
	}
	// IMAGE is optional and 2-D: its shape travels in image_shape.
	req.Inputs = append(req.Inputs, raw("IMAGE", "UINT8", []int64{2, 3}))
	req.RawInputContents = append(req.RawInputContents, []byte{1, 2, 3, 4, 5, 6})
	resp, err := kc.ModelInfer(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, resp.Outputs, len(inputs)+1)
	for i, in := range inputs {
		assert.Equal(t, in.name, resp.Outputs[i].Name)
		assert.Equal(t, in.dt, resp.Outputs[i].Datatype, in.name)
		assert.Equal(t, []int64{3}, resp.Outputs[i].Shape, in.name)
		assert.Equal(t, in.data, resp.RawOutputContents[i], in.name)
	}
	assert.Equal(t, []int64{2, 3}, resp.Outputs[len(inputs)].Shape)
	assert.Equal(t, []byte{1, 2, 3, 4, 5, 6}, resp.RawOutputContents[len(inputs)])

	// Without the optional IMAGE the output is empty, its variable dims inferred as far as they
	// can be: both -1, so the empty shape field makes it an error naming the output.
	req.Inputs, req.RawInputContents = req.Inputs[:len(inputs)], req.RawInputContents[:len(inputs)]
	_, err = kc.ModelInfer(context.Background(), req)
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "model 'echo_all_types' output 'IMAGE': shape [-1,-1] has more than one variable dimension; set its shape field")
}

func TestGeneratedDecoupled(t *testing.T) {
	_, kc, _ := startTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "countdown",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{raw("FROM", "INT32", []int64{1})}, RawInputContents: [][]byte{tensor.Bytes([]int32{3})}})
	assert.Equal(t, codes.Unimplemented, status.Code(err), "ModelInfer on a decoupled model")

	stream, err := kc.ModelStreamInfer(ctx)
	require.NoError(t, err)
	// With the empty final response asked for, the end of the request is a flags-only final.
	require.NoError(t, stream.Send(&inference.ModelInferRequest{ModelName: "countdown", Id: "c",
		Parameters: map[string]*inference.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}},
		Inputs:     []*inference.ModelInferRequest_InferInputTensor{raw("FROM", "INT32", []int64{1})}, RawInputContents: [][]byte{tensor.Bytes([]int32{3})}}))
	require.NoError(t, stream.CloseSend())
	var values []int32
	finals := 0
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Empty(t, m.ErrorMessage)
		if m.InferResponse.Parameters["triton_final_response"].GetBoolParam() {
			finals++
			assert.Empty(t, m.InferResponse.RawOutputContents, "the final is flags-only")
		}
		if len(m.InferResponse.RawOutputContents) > 0 {
			values = append(values, tensor.View[int32](m.InferResponse.RawOutputContents[0])...)
		}
	}
	assert.Equal(t, []int32{3, 2, 1}, values)
	assert.Equal(t, 1, finals)
}

func TestGeneratedSequence(t *testing.T) {
	_, kc, _ := startTest(t)
	step := func(id uint64, start bool, v int32) (int64, error) {
		params := map[string]*inference.InferParameter{
			"sequence_id":    {ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: id}},
			"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: start}},
		}
		resp, err := kc.ModelInfer(context.Background(), &inference.ModelInferRequest{ModelName: "accumulate", Parameters: params,
			Inputs: []*inference.ModelInferRequest_InferInputTensor{raw("INPUT", "INT32", []int64{1})}, RawInputContents: [][]byte{tensor.Bytes([]int32{v})}})
		if err != nil {
			return 0, err
		}
		return tensor.View[int64](resp.RawOutputContents[0])[0], nil
	}
	_, err := step(7, false, 1)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "a sequence must start with START")
	for i, want := range []int64{5, 8, 18} {
		got, err := step(7, i == 0, []int32{5, 3, 10}[i])
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	cfg, err := kc.ModelConfig(context.Background(), &inference.ModelConfigRequest{Name: "accumulate"})
	require.NoError(t, err)
	sb := cfg.Config.GetSequenceBatching()
	require.Len(t, sb.ControlInput, 2)
	assert.Equal(t, []bool{false, true}, sb.ControlInput[0].Control[0].BoolFalseTrue)
	assert.Equal(t, inference.DataType_TYPE_UINT64, sb.ControlInput[1].Control[0].DataType)
	assert.Len(t, cfg.Config.Input, 1, "controls are not inputs")
}

// The same implementation is the typed service itself, over gRPC (grpc-go's native transport)
// and over Connect.
func TestGeneratedTypedService(t *testing.T) {
	srv, _, conn := startTest(t)
	req := &tt.SimpleRequest{Input0: []int32{1, 2}, Input1: []int32{10, 20}}
	want := &tt.SimpleResponse{Output0: []int32{11, 22}, Output1: []int32{-9, -18}}

	got, err := tt.NewSimpleServiceClient(conn).Simple(context.Background(), req)
	require.NoError(t, err)
	assert.True(t, proto.Equal(want, got), "grpc: %v", got)

	for _, opt := range []connect.ClientOption{connect.WithGRPC(), connect.WithGRPCWeb(), connect.WithProtoJSON()} {
		c := tensortestv1connect.NewSimpleServiceClient(gatewaytest.H2CClient(), srv.URL, opt)
		got, err := c.Simple(context.Background(), req)
		require.NoError(t, err)
		assert.True(t, proto.Equal(want, got), "connect: %v", got)
	}

	stream, err := tt.NewEchoServiceClient(conn).Countdown(context.Background(), &tt.CountdownRequest{From: []int32{2}})
	require.NoError(t, err)
	var values []int32
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		values = append(values, m.Value...)
	}
	assert.Equal(t, []int32{2, 1}, values)
}
