package engines_test

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// echoText is a remote backend's ExecuteFunc: text_output = text_input.
func echoText(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("text_input")
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "text_output", Datatype: inference.DataType_TYPE_STRING, Shape: in.Shape, Data: in.Data},
	}})
}

func startRemote(t *testing.T, models ...engines.Model) inference.GRPCInferenceServiceClient {
	t.Helper()
	srv := gatewaytest.Start(t, gateway.Config{}, models...)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return inference.NewGRPCInferenceServiceClient(conn)
}

func bytesInput(name string, shape []int64, elems ...string) (*inference.ModelInferRequest_InferInputTensor, []byte) {
	var raw []byte
	for _, e := range elems {
		raw = tensor.AppendBytes(raw, []byte(e))
	}
	return &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: "BYTES", Shape: shape}, raw
}

// A backend's serialized Triton ModelConfig supersedes its tensor list: ModelConfig returns it
// verbatim through a real gateway (fields infergate never sets, and fields unknown to its copy of
// model_config.proto, included), and ModelMetadata and validation follow it.
func TestRemoteTritonModelConfigIsServedVerbatim(t *testing.T) {
	supplied := &inference.ModelConfig{
		Name: "remote_llm", Platform: "vllm", Backend: "python", MaxBatchSize: 4,
		Input: []*inference.ModelInput{
			{Name: "text_input", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}},
			{Name: "stream", DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
		},
		Output:        []*inference.ModelOutput{{Name: "text_output", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}}},
		InstanceGroup: []*inference.ModelInstanceGroup{{Name: "remote_llm_0", Kind: inference.ModelInstanceGroup_KIND_MODEL, Count: 3}},
		Parameters:    map[string]*inference.ModelParameter{"max_tokens": {StringValue: "128"}},
		SchedulingChoice: &inference.ModelConfig_DynamicBatching{DynamicBatching: &inference.ModelDynamicBatching{
			PreferredBatchSize: []int32{2, 4}, MaxQueueDelayMicroseconds: 100,
		}},
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(supplied)
	require.NoError(t, err)
	// A field from a newer Triton model_config.proto survives as an unknown field.
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 9999, protowire.VarintType), 7)
	b = append(b, unknown...)
	want := new(inference.ModelConfig)
	require.NoError(t, proto.Unmarshal(b, want))

	var executed int
	m, err := engines.NewRemoteModel(&tensorv1.TensorModelConfig{
		Name: "remote_llm",
		// Superseded by triton_model_config: none of this shows.
		Inputs:            []*tensorv1.TensorMetadata{{Name: "prompt", Datatype: "FP32", Shape: []int64{-1, 3}}},
		Outputs:           []*tensorv1.TensorMetadata{{Name: "answer", Datatype: "FP32", Shape: []int64{-1, 3}}},
		MaxBatchSize:      16,
		Decoupled:         true,
		TritonModelConfig: b,
	}, func(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
		executed++
		return echoText(ctx, req, send)
	})
	require.NoError(t, err)
	kc := startRemote(t, m)
	ctx := context.Background()

	cfg, err := kc.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "remote_llm"})
	require.NoError(t, err)
	assert.True(t, proto.Equal(want, cfg.Config), "ModelConfig returns the supplied config:\n got %v\nwant %v", cfg.Config, want)
	assert.Equal(t, unknown, []byte(cfg.Config.ProtoReflect().GetUnknown()))
	got, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg.Config)
	require.NoError(t, err)
	assert.Equal(t, b, got, "byte for byte")

	meta, err := kc.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "remote_llm"})
	require.NoError(t, err)
	assert.True(t, proto.Equal(&inference.ModelMetadataResponse{
		Name: "remote_llm", Versions: []string{"1"}, Platform: "vllm",
		Inputs: []*inference.ModelMetadataResponse_TensorMetadata{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{-1, 1}},
			{Name: "stream", Datatype: "BOOL", Shape: []int64{-1, 1}},
		},
		Outputs: []*inference.ModelMetadataResponse_TensorMetadata{{Name: "text_output", Datatype: "BYTES", Shape: []int64{-1, -1}}},
	}, meta), "metadata follows the Triton config: %v", meta)

	// Validation follows the Triton config, with Triton's messages; the backend never sees a bad request.
	for _, tc := range []struct {
		name  string
		input func() (*inference.ModelInferRequest_InferInputTensor, []byte)
		msg   string
	}{
		{"superseded input", func() (*inference.ModelInferRequest_InferInputTensor, []byte) {
			return &inference.ModelInferRequest_InferInputTensor{Name: "prompt", Datatype: "FP32", Shape: []int64{1, 3}}, make([]byte, 12)
		}, "unexpected inference input 'prompt' for model 'remote_llm'"},
		{"datatype", func() (*inference.ModelInferRequest_InferInputTensor, []byte) {
			return &inference.ModelInferRequest_InferInputTensor{Name: "text_input", Datatype: "FP32", Shape: []int64{1, 1}}, make([]byte, 4)
		}, "inference input 'text_input' data-type is 'FP32', but model 'remote_llm' expects 'BYTES'"},
		{"batch size", func() (*inference.ModelInferRequest_InferInputTensor, []byte) {
			return bytesInput("text_input", []int64{5, 1}, "a", "b", "c", "d", "e")
		}, "inference request batch-size must be <= 4 for 'remote_llm'"},
	} {
		in, raw := tc.input()
		_, err := kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "remote_llm",
			Inputs: []*inference.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{raw}})
		assert.Equal(t, codes.InvalidArgument, status.Code(err), tc.name)
		assert.Equal(t, tc.msg, status.Convert(err).Message(), tc.name)
	}
	assert.Zero(t, executed)

	in, raw := bytesInput("text_input", []int64{2, 1}, "hello", "world")
	resp, err := kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "remote_llm",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{raw}})
	require.NoError(t, err)
	assert.Equal(t, 1, executed)
	require.Len(t, resp.Outputs, 1)
	assert.Equal(t, "text_output", resp.Outputs[0].Name)
	assert.Equal(t, []int64{2, 1}, resp.Outputs[0].Shape)
	assert.Equal(t, raw, resp.RawOutputContents[0])
}

// A backend that describes itself by its tensors gets a config built from them: shapes as
// ModelMetadata reports them, the batch dimension left out of the config's dims.
func TestRemoteTensorModelConfig(t *testing.T) {
	reg := engines.NewRegistry()
	desc := &tensorv1.TensorModelConfig{
		Name:         "remote_tensors",
		MaxBatchSize: 8,
		Inputs: []*tensorv1.TensorMetadata{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{-1, 1}},
			{Name: "stream", Datatype: "BOOL", Shape: []int64{-1, 1}, Optional: true},
		},
		Outputs: []*tensorv1.TensorMetadata{{Name: "text_output", Datatype: "BYTES", Shape: []int64{-1, -1}}},
	}
	e, err := reg.RegisterRemote(desc, echoText)
	require.NoError(t, err)
	assert.True(t, proto.Equal(&inference.ModelConfig{
		Name: "remote_tensors", Platform: engines.RemotePlatform, Backend: engines.RemoteBackend, MaxBatchSize: 8,
		VersionPolicy: &inference.ModelVersionPolicy{
			PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}},
		},
		Input: []*inference.ModelInput{
			{Name: "text_input", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}},
			{Name: "stream", DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
		},
		Output: []*inference.ModelOutput{{Name: "text_output", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}}},
	}, e.Config()), "%v", e.Config())
	assert.False(t, e.Decoupled())
	_, err = reg.RegisterRemote(desc, echoText)
	assert.Equal(t, connect.CodeAlreadyExists, connect.CodeOf(err))

	// Through a gateway: metadata reports the supplied shapes, validation follows them.
	m, err := engines.NewRemoteModel(desc, echoText)
	require.NoError(t, err)
	kc := startRemote(t, m)
	ctx := context.Background()
	meta, err := kc.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "remote_tensors"})
	require.NoError(t, err)
	assert.True(t, proto.Equal(&inference.ModelMetadataResponse{
		Name: "remote_tensors", Versions: []string{"1"}, Platform: engines.RemotePlatform,
		Inputs: []*inference.ModelMetadataResponse_TensorMetadata{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{-1, 1}},
			{Name: "stream", Datatype: "BOOL", Shape: []int64{-1, 1}},
		},
		Outputs: []*inference.ModelMetadataResponse_TensorMetadata{{Name: "text_output", Datatype: "BYTES", Shape: []int64{-1, -1}}},
	}, meta), "%v", meta)
	in, raw := bytesInput("text_input", []int64{1, 2}, "a", "b")
	_, err = kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "remote_tensors",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{raw}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "unexpected shape for input 'text_input' for model 'remote_tensors'. Expected [-1,1], got [1,2]")
	in, raw = bytesInput("text_input", []int64{1, 1}, "hi")
	resp, err := kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "remote_tensors",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{raw}})
	require.NoError(t, err)
	assert.Equal(t, raw, resp.RawOutputContents[0])

	// decoupled reaches the config.
	desc.Name, desc.Decoupled = "remote_stream", true
	e, err = reg.RegisterRemote(desc, echoText)
	require.NoError(t, err)
	assert.True(t, e.Decoupled())
}

func TestRemoteModelConfigErrors(t *testing.T) {
	triton := func(cfg *inference.ModelConfig) []byte {
		b, err := proto.Marshal(cfg)
		require.NoError(t, err)
		return b
	}
	out := []*tensorv1.TensorMetadata{{Name: "y", Datatype: "FP32", Shape: []int64{1}}}
	for _, tc := range []struct {
		name string
		desc *tensorv1.TensorModelConfig
		msg  string
	}{
		{"no name", &tensorv1.TensorModelConfig{Outputs: out}, "remote model '': the config has no name"},
		{"unknown datatype", &tensorv1.TensorModelConfig{Name: "m", Outputs: []*tensorv1.TensorMetadata{{Name: "y", Datatype: "FP17", Shape: []int64{1}}}},
			"remote model 'm': output 'y' has unknown datatype 'FP17'"},
		{"no batch dimension", &tensorv1.TensorModelConfig{Name: "m", MaxBatchSize: 2, Outputs: out},
			"remote model 'm': output 'y' has shape [1], but the model batches (max_batch_size 2): it must start with the batch dimension -1"},
		{"bad dimension", &tensorv1.TensorModelConfig{Name: "m", Outputs: []*tensorv1.TensorMetadata{{Name: "y", Datatype: "FP32", Shape: []int64{-2}}}},
			"remote model 'm': output 'y' has dimension -2"},
		{"negative batch", &tensorv1.TensorModelConfig{Name: "m", MaxBatchSize: -1, Outputs: out}, "remote model 'm': max_batch_size -1 is negative"},
		{"optional output", &tensorv1.TensorModelConfig{Name: "m", Outputs: []*tensorv1.TensorMetadata{{Name: "y", Datatype: "FP32", Shape: []int64{1}, Optional: true}}},
			"remote model 'm': output 'y' is optional; only inputs can be"},
		{"no outputs", &tensorv1.TensorModelConfig{Name: "m"}, "remote model 'm': the config has no outputs"},
		{"duplicate input", &tensorv1.TensorModelConfig{Name: "m", Outputs: out, Inputs: []*tensorv1.TensorMetadata{
			{Name: "x", Datatype: "FP32", Shape: []int64{1}}, {Name: "x", Datatype: "INT32", Shape: []int64{1}}}},
			"remote model 'm': input 'x' is declared twice"},
		{"triton bytes", &tensorv1.TensorModelConfig{Name: "m", TritonModelConfig: []byte{0xff}},
			"remote model 'm': triton_model_config is not a serialized inference.ModelConfig: "},
		{"triton no name", &tensorv1.TensorModelConfig{Name: "m", TritonModelConfig: triton(&inference.ModelConfig{MaxBatchSize: 1})},
			"remote model 'm': triton_model_config has no name"},
		{"triton other name", &tensorv1.TensorModelConfig{Name: "m", TritonModelConfig: triton(&inference.ModelConfig{Name: "n"})},
			"remote model 'm': triton_model_config names model 'n'"},
		{"triton invalid datatype", &tensorv1.TensorModelConfig{TritonModelConfig: triton(&inference.ModelConfig{Name: "n",
			Output: []*inference.ModelOutput{{Name: "y", Dims: []int64{1}}}})},
			"remote model 'n': output 'y' has datatype TYPE_INVALID, which KServe cannot carry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engines.NewRemoteModel(tc.desc, echoText)
			var ce *connect.Error
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, connect.CodeInvalidArgument, ce.Code())
			if strings.HasSuffix(tc.msg, ": ") { // followed by the decoder's own message
				assert.True(t, strings.HasPrefix(ce.Message(), tc.msg), ce.Message())
			} else {
				assert.Equal(t, tc.msg, ce.Message())
			}
		})
	}
	_, err := engines.NewRemoteModel(&tensorv1.TensorModelConfig{Name: "m", Outputs: out}, nil)
	assert.EqualError(t, err, "engines: remote model has no ExecuteFunc")
}

// TestRegistryRemove: a removed model leaves RepositoryIndex and is unknown to requests, and its
// name can be registered again (a backend whose lease expired and that registers anew).
func TestRegistryRemove(t *testing.T) {
	desc := &tensorv1.TensorModelConfig{Name: "echo",
		Inputs:  []*tensorv1.TensorMetadata{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		Outputs: []*tensorv1.TensorMetadata{{Name: "text_output", Datatype: "BYTES", Shape: []int64{1}}}}
	m, err := engines.NewRemoteModel(desc, echoText)
	require.NoError(t, err)
	srv := gatewaytest.Start(t, gateway.Config{}, m)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := inference.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()

	require.True(t, srv.Registry.Remove("echo"))
	require.False(t, srv.Registry.Remove("echo"))
	idx, err := c.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
	require.NoError(t, err)
	for _, m := range idx.GetModels() {
		assert.NotEqual(t, "echo", m.GetName())
	}
	_, err = c.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "echo"})
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Equal(t, "Request for unknown model: 'echo' is not found", status.Convert(err).Message())

	_, err = srv.Registry.RegisterRemote(desc, echoText)
	require.NoError(t, err)
	in, raw := bytesInput("text_input", []int64{1}, "back")
	out, err := c.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "echo",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{in}, RawInputContents: [][]byte{raw}})
	require.NoError(t, err)
	assert.Equal(t, raw, out.GetRawOutputContents()[0])
}
