package kserveproxy_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/upstream/kserveproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	wait = 10 * time.Second
	tick = 10 * time.Millisecond
)

// recorder is a bare KServe server for endpoints whose configs are supplied: it has no
// repository or config RPCs (a discovered endpoint of it would serve nothing), answers
// ServerReady as told, keeps every ModelInfer request it gets and answers OUTPUT = INPUT.
type recorder struct {
	inference.UnimplementedGRPCInferenceServiceServer
	Addr      string
	ready     atomic.Bool
	checks    atomic.Int64 // ServerReady calls
	described atomic.Int64 // RepositoryIndex, ModelConfig and ModelMetadata calls

	mu   sync.Mutex
	reqs []*inference.ModelInferRequest
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}
	r.ready.Store(true)
	srv := grpc.NewServer()
	inference.RegisterGRPCInferenceServiceServer(srv, r)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r.Addr = ln.Addr().String()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *recorder) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	r.checks.Add(1)
	return &inference.ServerReadyResponse{Ready: r.ready.Load()}, nil
}

func (r *recorder) RepositoryIndex(context.Context, *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	r.described.Add(1)
	return nil, status.Error(codes.Unimplemented, "no repository")
}

func (r *recorder) ModelConfig(context.Context, *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	r.described.Add(1)
	return nil, status.Error(codes.Unimplemented, "no configs")
}

func (r *recorder) ModelMetadata(context.Context, *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	r.described.Add(1)
	return nil, status.Error(codes.Unimplemented, "no metadata")
}

func (r *recorder) ModelInfer(_ context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, proto.Clone(req).(*inference.ModelInferRequest))
	r.mu.Unlock()
	for i, in := range req.Inputs {
		if in.Name == "INPUT" {
			return &inference.ModelInferResponse{ModelName: req.ModelName, Id: req.Id,
				Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "OUTPUT", Datatype: in.Datatype, Shape: in.Shape}},
				RawOutputContents: [][]byte{req.RawInputContents[i]}}, nil
		}
	}
	return nil, status.Error(codes.InvalidArgument, "no INPUT")
}

func (r *recorder) requests() []*inference.ModelInferRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*inference.ModelInferRequest(nil), r.reqs...)
}

// seqConfig is a Triton config of a sequence model: INPUT INT32 [1] -> OUTPUT, with START and
// READY control inputs, and fields the gateway has no use for but must serve as they are.
func seqConfig(name string) *inference.ModelConfig {
	ctl := func(kind inference.ModelSequenceBatching_Control_Kind) []*inference.ModelSequenceBatching_Control {
		return []*inference.ModelSequenceBatching_Control{{Kind: kind, Int32FalseTrue: []int32{0, 1}}}
	}
	return &inference.ModelConfig{Name: name, Platform: "pytorch_libtorch", Backend: "pytorch",
		Input:  []*inference.ModelInput{{Name: "INPUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
		Output: []*inference.ModelOutput{{Name: "OUTPUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
		SchedulingChoice: &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{
			ControlInput: []*inference.ModelSequenceBatching_ControlInput{
				{Name: "START", Control: ctl(inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START)},
				{Name: "READY", Control: ctl(inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY)},
			}}},
		Parameters: map[string]*inference.ModelParameter{"execution_env_path": {StringValue: "/opt/env.tar.gz"}},
	}
}

func tritonDesc(t *testing.T, cfg *inference.ModelConfig) *tensorv1.TensorModelConfig {
	b, err := proto.Marshal(cfg)
	require.NoError(t, err)
	return &tensorv1.TensorModelConfig{TritonModelConfig: b}
}

// tensorsDesc describes INPUT <dt> [-1] -> OUTPUT <dt> [-1] by its tensors.
func tensorsDesc(name, dt string) *tensorv1.TensorModelConfig {
	return &tensorv1.TensorModelConfig{Name: name,
		Inputs:  []*tensorv1.TensorMetadata{{Name: "INPUT", Datatype: dt, Shape: []int64{-1}}},
		Outputs: []*tensorv1.TensorMetadata{{Name: "OUTPUT", Datatype: dt, Shape: []int64{-1}}}}
}

// TestSuppliedConfigs: an endpoint added with its models' configs serves exactly those, with
// those configs (a Triton config verbatim, a tensors description as engines.NewRemoteModel builds
// it), without being asked for its repository or configs, once its health check passes.
// Requests reach it as KServe requests: tensors and custom parameters as they came, sequence flags
// as Triton's parameters, and no control inputs (its own sequence batcher adds them).
func TestSuppliedConfigs(t *testing.T) {
	up := startRecorder(t)
	up.ready.Store(false)
	f := startFront(t, fast())
	seq := seqConfig("seq")
	require.NoError(t, f.proxy.Add(ep("reg", up.Addr, 0), tritonDesc(t, seq), tensorsDesc("echo_t", "FP32")))
	// The second check starts after the first's answer was taken in.
	require.Eventually(t, func() bool { return up.checks.Load() >= 2 }, wait, tick)
	assert.Empty(t, f.proxy.Models(), "nothing is served before the endpoint is healthy")
	assert.Nil(t, f.Registry.Lookup("seq"))

	up.ready.Store(true)
	f.waitModel(t, "seq")
	f.waitModel(t, "echo_t")
	assert.Equal(t, []string{"echo_t", "seq"}, f.status("reg").Models)
	ctx := context.Background()
	got, err := f.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "seq"})
	require.NoError(t, err)
	assert.True(t, proto.Equal(seq, got.Config), "the supplied Triton config, verbatim: %v", got.Config)
	meta, err := f.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "echo_t"})
	require.NoError(t, err)
	assert.Equal(t, engines.RemotePlatform, meta.Platform)
	assert.Equal(t, "FP32", meta.Inputs[0].Datatype)

	req := &inference.ModelInferRequest{ModelName: "seq", Id: "r1",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT", "INT32", 1)},
		RawInputContents: [][]byte{tensor.Bytes([]int32{5})},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT"}},
		Parameters: map[string]*inference.InferParameter{
			"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 7}},
			"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
			"custom":         {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "v"}},
		}}
	res, err := f.client.ModelInfer(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, []int32{5}, int32s(res.RawOutputContents[0]))

	reqs := up.requests()
	require.Len(t, reqs, 1)
	w := reqs[0]
	assert.Equal(t, "seq", w.ModelName)
	assert.Equal(t, "r1", w.Id)
	require.Len(t, w.Inputs, 1, "the control inputs the gateway added are not forwarded")
	assert.Equal(t, "INPUT", w.Inputs[0].Name)
	assert.Equal(t, "INT32", w.Inputs[0].Datatype)
	assert.Equal(t, []int64{1}, w.Inputs[0].Shape)
	assert.Equal(t, [][]byte{{5, 0, 0, 0}}, w.RawInputContents)
	require.Len(t, w.Outputs, 1)
	assert.Equal(t, "OUTPUT", w.Outputs[0].Name)
	assert.Equal(t, "v", w.Parameters["custom"].GetStringParam())
	assert.Equal(t, int64(7), w.Parameters["sequence_id"].GetInt64Param())
	assert.True(t, w.Parameters["sequence_start"].GetBoolParam())
	assert.False(t, w.Parameters["sequence_end"].GetBoolParam())
	assert.Len(t, w.Parameters, 3, "custom and the sequence flags, nothing else: %v", w.Parameters)

	assert.Zero(t, up.described.Load(), "a supplied endpoint is never discovered")

	require.True(t, f.proxy.Remove("reg"))
	assert.Nil(t, f.Registry.Lookup("seq"), "the only endpoint serving it is gone")
	assert.Empty(t, f.proxy.Models())
}

// TestSuppliedConfigErrors: Add refuses configs it cannot serve, and names the registry holds for
// something else, and adds nothing then.
func TestSuppliedConfigErrors(t *testing.T) {
	up := startRecorder(t)
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	f := startFront(t, withRegistry(reg))

	err := f.proxy.Add(ep("x", up.Addr, 0), tensorsDesc("simple", "INT32"))
	assert.Equal(t, connect.CodeAlreadyExists, connect.CodeOf(err), "%v", err)
	assert.ErrorContains(t, err, `endpoint "x": model 'simple' is already served by the gateway, not by a KServe upstream`)
	assert.Equal(t, "infergate_cpu", f.Registry.Lookup("simple").Config().GetPlatform(), "the built-in stays")

	noOutputs := &tensorv1.TensorModelConfig{Name: "m", Inputs: []*tensorv1.TensorMetadata{{Name: "INPUT", Datatype: "INT32", Shape: []int64{1}}}}
	err = f.proxy.Add(ep("x", up.Addr, 0), noOutputs)
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)

	err = f.proxy.Add(ep("x", up.Addr, 0), tensorsDesc("m", "INT32"), tensorsDesc("m", "FP32"))
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	assert.ErrorContains(t, err, "two configs describe model 'm'")

	withModels := ep("x", up.Addr, 0)
	withModels.Models = []string{"m"}
	assert.ErrorContains(t, f.proxy.Add(withModels, tensorsDesc("m", "INT32")), `endpoint "x": models: must be empty when the models' configs are supplied`)

	assert.Empty(t, f.proxy.Status(), "nothing was added")
	require.NoError(t, f.proxy.Add(ep("x", up.Addr, 0), tensorsDesc("m", "INT32")), "the name is still free")
	f.waitModel(t, "m")
}

// TestSuppliedConfigsConflict: endpoints offering one name with different configs follow the
// rule of discovered ones: the first-added of the highest priority gives the config, endpoints
// whose tensors differ from it are not routed to; when it goes, the next one's config is served.
// Endpoints with the same config share the requests.
func TestSuppliedConfigsConflict(t *testing.T) {
	a, b, c := startRecorder(t), startRecorder(t), startRecorder(t)
	f := startFront(t, fast())
	require.NoError(t, f.proxy.Add(ep("a", a.Addr, 0), tensorsDesc("m", "INT32")))
	f.waitModel(t, "m")
	require.NoError(t, f.proxy.Add(ep("b", b.Addr, 0), tensorsDesc("m", "FP32")))
	require.NoError(t, f.proxy.Add(ep("c", c.Addr, 0), tensorsDesc("m", "INT32")))
	require.Eventually(t, func() bool { return f.status("b").Healthy && f.status("c").Healthy }, wait, tick)
	ctx := context.Background()
	for range 4 {
		res, err := f.client.ModelInfer(ctx, testRequest("m", 3))
		require.NoError(t, err)
		assert.Equal(t, []int32{3}, int32s(res.RawOutputContents[0]))
	}
	assert.Len(t, a.requests(), 2, "a and c share the work")
	assert.Len(t, c.requests(), 2)
	assert.Empty(t, b.requests(), "b's config differs: not routed")
	assert.Empty(t, f.status("b").Models)

	require.True(t, f.proxy.Remove("a"))
	require.True(t, f.proxy.Remove("c"))
	cfg, err := f.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "m"})
	require.NoError(t, err)
	assert.Equal(t, inference.DataType_TYPE_FP32, cfg.Config.Input[0].DataType, "b's config now")
	_, err = f.client.ModelInfer(ctx, testRequest("m", 3))
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "validated against b's config")
	fp := &inference.ModelInferRequest{ModelName: "m",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT", "FP32", 1)},
		RawInputContents: [][]byte{tensor.Bytes([]float32{1.5})}}
	res, err := f.client.ModelInfer(ctx, fp)
	require.NoError(t, err)
	assert.Equal(t, tensor.Bytes([]float32{1.5}), res.RawOutputContents[0])
	assert.Len(t, b.requests(), 1)
}

func withRegistry(reg *engines.Registry) kserveproxy.Options {
	o := fast()
	o.Registry = reg
	return o
}
