package kserveproxy_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/models/builtin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

var builtins = []string{"identity_fp32", "repeat_int32", "simple", "simple_dyna_sequence", "simple_identity",
	"simple_int8", "simple_sequence", "simple_string", "square_int32"}

// TestProxiesUpstreamModels: every upstream model is served by the front with the upstream's own
// ModelConfig and ModelMetadata, and ModelInfer computes through the upstream.
func TestProxiesUpstreamModels(t *testing.T) {
	up := startUpstream(t)
	f := startFront(t, fast(ep("triton", up.Addr, 0)))
	ctx := context.Background()
	direct := client(t, up.Addr)

	assert.Equal(t, builtins, f.proxy.Models())
	idx, err := f.client.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
	require.NoError(t, err)
	var names []string
	for _, m := range idx.Models {
		names = append(names, m.Name)
	}
	assert.ElementsMatch(t, builtins, names)

	for _, name := range builtins {
		want, err := direct.ModelConfig(ctx, &inference.ModelConfigRequest{Name: name})
		require.NoError(t, err)
		got, err := f.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: name})
		require.NoError(t, err)
		assert.True(t, proto.Equal(want, got), "%s: config\nfront:    %v\nupstream: %v", name, got, want)
		wantMD, err := direct.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: name})
		require.NoError(t, err)
		gotMD, err := f.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: name})
		require.NoError(t, err)
		assert.True(t, proto.Equal(wantMD, gotMD), "%s: metadata\nfront:    %v\nupstream: %v", name, gotMD, wantMD)
	}

	res, err := f.client.ModelInfer(ctx, simpleRequest("simple", "req-1"))
	require.NoError(t, err)
	checkSimple(t, res)
	assert.Equal(t, "simple", res.ModelName)
	assert.Equal(t, "1", res.ModelVersion)
	assert.Equal(t, "req-1", res.Id)
	assert.Equal(t, uint64(1), inferences(up.Registry, "simple"), "the upstream ran the request")

	// Typed contents, one output requested: converted to raw by the front, forwarded, and only
	// that output comes back.
	typed := simpleRequest("simple", "")
	typed.RawInputContents = nil
	seq := make([]int32, 16)
	ones := make([]int32, 16)
	for i := range seq {
		seq[i], ones[i] = int32(i), 1
	}
	typed.Inputs[0].Contents = &inference.InferTensorContents{IntContents: seq}
	typed.Inputs[1].Contents = &inference.InferTensorContents{IntContents: ones}
	typed.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}}
	res, err = f.client.ModelInfer(ctx, typed)
	require.NoError(t, err)
	require.Len(t, res.Outputs, 1)
	assert.Equal(t, "OUTPUT1", res.Outputs[0].Name)
	assert.Equal(t, []int32{-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, int32s(res.RawOutputContents[0]))

	// BYTES through simple_string, byte for byte.
	strs := make([]string, 16)
	onesS := make([]string, 16)
	for i := range strs {
		strs[i], onesS[i] = string(rune('0'+i%10)), "1"
	}
	sreq := &inference.ModelInferRequest{ModelName: "simple_string",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "BYTES", 1, 16), rawInput("INPUT1", "BYTES", 1, 16)},
		RawInputContents: [][]byte{tensor.JoinBytes(strs), tensor.JoinBytes(onesS)},
	}
	want, err := direct.ModelInfer(ctx, sreq)
	require.NoError(t, err)
	got, err := f.client.ModelInfer(ctx, sreq)
	require.NoError(t, err)
	assert.True(t, proto.Equal(want, got), "front:    %v\nupstream: %v", got, want)
}

// TestValidationAtFront: a bad request is refused by the front with Triton's message, the same the
// upstream would give, and never reaches the upstream; unknown models and decoupled models on
// ModelInfer get Triton's errors too.
func TestValidationAtFront(t *testing.T) {
	up := startUpstream(t)
	f := startFront(t, fast(ep("triton", up.Addr, 0)))
	ctx := context.Background()
	direct := client(t, startUpstream(t).Addr) // another upstream: the proxied one must see nothing

	for name, mutate := range map[string]func(*inference.ModelInferRequest){
		"shape":    func(r *inference.ModelInferRequest) { r.Inputs[0].Shape = []int64{1, 15} },
		"datatype": func(r *inference.ModelInferRequest) { r.Inputs[1].Datatype = "FP32" },
		"missing": func(r *inference.ModelInferRequest) {
			r.Inputs, r.RawInputContents = r.Inputs[:1], r.RawInputContents[:1]
		},
		"raw size": func(r *inference.ModelInferRequest) { r.RawInputContents[0] = r.RawInputContents[0][4:] },
		"batch": func(r *inference.ModelInferRequest) {
			r.Inputs[0].Shape, r.Inputs[1].Shape = []int64{9, 16}, []int64{9, 16}
		},
		"output": func(r *inference.ModelInferRequest) {
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "NOPE"}}
		},
		"reserved": func(r *inference.ModelInferRequest) {
			r.Parameters = map[string]*inference.InferParameter{"triton_x": {}}
		},
		"unknown":   func(r *inference.ModelInferRequest) { r.ModelName = "nope" },
		"version":   func(r *inference.ModelInferRequest) { r.ModelVersion = "2" },
		"decoupled": func(r *inference.ModelInferRequest) { r.ModelName = "repeat_int32" },
	} {
		t.Run(name, func(t *testing.T) {
			req := simpleRequest("simple", "")
			mutate(req)
			_, wantErr := direct.ModelInfer(ctx, req)
			require.Error(t, wantErr)
			_, err := f.client.ModelInfer(ctx, req)
			require.Error(t, err)
			assert.Equal(t, status.Code(wantErr), status.Code(err))
			assert.Equal(t, status.Convert(wantErr).Message(), status.Convert(err).Message())
		})
	}
	assert.Zero(t, up.Registry.Lookup("simple").Stats.Fail.Count()+up.Registry.Lookup("simple").Stats.Success.Count(),
		"no bad request reached the upstream")
}

// TestUpstreamErrorsPassThrough: an upstream model's error reaches the client with its code and
// message, on ModelInfer and in a stream.
func TestUpstreamErrorsPassThrough(t *testing.T) {
	busy := &testModel{name: "busy", exec: func(context.Context, *engines.Request, func(*engines.Response) error) error {
		return connect.NewError(connect.CodeResourceExhausted, errNew("model 'busy' is out of slots"))
	}}
	up := startUpstream(t, busy)
	f := startFront(t, fast(ep("triton", up.Addr, 0)))
	ctx := context.Background()

	_, err := f.client.ModelInfer(ctx, testRequest("busy", 1))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, "model 'busy' is out of slots", status.Convert(err).Message())

	// repeat_int32's own check (DELAY shorter than IN) runs in the upstream: the front's
	// validation cannot know it.
	bad := repeatRequest("bad", []int32{1, 2})
	bad.Inputs[1].Shape = []int64{1}
	bad.RawInputContents[1] = tensor.Bytes([]uint32{0})
	want, err := stream(ctx, t, client(t, up.Addr), bad)
	require.NoError(t, err)
	got, err := stream(ctx, t, f.client, bad)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, want[0].ErrorMessage, got[0].ErrorMessage)
	assert.Equal(t, "bad", got[0].InferResponse.GetId())
	assert.Contains(t, got[0].ErrorMessage, "expects DELAY to have one element per IN element")
}

type strErr string

func (e strErr) Error() string { return string(e) }

func errNew(s string) error { return strErr(s) }

// TestDecoupledStreams: decoupled models are relayed response by response with Triton's final
// flags: the front's stream equals the upstream's, with and without an empty final response.
func TestDecoupledStreams(t *testing.T) {
	up := startUpstream(t)
	f := startFront(t, fast(ep("triton", up.Addr, 0)))
	ctx := context.Background()
	direct := client(t, up.Addr)

	emptyFinal := func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
		r.Parameters = map[string]*inference.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
		return r
	}
	square := func(id string, n int32) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "square_int32", Id: id,
			Inputs: []*inference.ModelInferRequest_InferInputTensor{rawInput("IN", "INT32", 1)}, RawInputContents: [][]byte{tensor.Bytes([]int32{n})}}
	}
	for name, req := range map[string]*inference.ModelInferRequest{
		"repeat":             repeatRequest("r", []int32{5, 6, 7}, 1, 1, 1),
		"repeat empty final": emptyFinal(repeatRequest("r", []int32{5, 6, 7})),
		"repeat none":        repeatRequest("r", nil),
		"repeat none final":  emptyFinal(repeatRequest("r", nil)),
		"square":             square("s", 3),
		"square empty final": emptyFinal(square("s", 4)),
	} {
		t.Run(name, func(t *testing.T) {
			want, err := stream(ctx, t, direct, req)
			require.NoError(t, err)
			got, err := stream(ctx, t, f.client, req)
			require.NoError(t, err)
			require.Equal(t, len(want), len(got))
			for i := range want {
				assert.True(t, proto.Equal(want[i], got[i]), "response %d\nfront:    %v\nupstream: %v", i, got[i], want[i])
			}
		})
	}
	// The values, not just sameness: OUT = IN[i], IDX = i, the last marked final.
	got, err := stream(ctx, t, f.client, emptyFinal(repeatRequest("r", []int32{5, 6, 7})))
	require.NoError(t, err)
	require.Len(t, got, 4)
	for i, m := range got[:3] {
		assert.Equal(t, []int32{int32(5 + i)}, int32s(m.InferResponse.RawOutputContents[0]))
		v, ok := final(m.InferResponse)
		assert.True(t, ok && !v)
	}
	v, _ := final(got[3].InferResponse)
	assert.True(t, v)
	assert.Empty(t, got[3].InferResponse.Outputs)

	// A non-decoupled model in a stream goes through ModelInfer upstream, final as Triton marks it.
	got, err = stream(ctx, t, f.client, simpleRequest("simple", "a"), simpleRequest("simple", "b"))
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, m := range got {
		assert.Equal(t, []string{"a", "b"}[i], m.InferResponse.Id)
		checkSimple(t, m.InferResponse)
		v, _ := final(m.InferResponse)
		assert.True(t, v)
	}
}

// TestAliasesAndTakenNames: a front that serves the built-ins itself keeps them; the upstream's
// simple is reachable under an alias, with its config renamed and otherwise verbatim.
func TestAliasesAndTakenNames(t *testing.T) {
	up := startUpstream(t)
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	e := ep("triton", up.Addr, 0)
	e.Aliases = map[string]string{"up_simple": "simple"}
	opts := fast(e)
	opts.Registry = reg
	f := startFront(t, opts)
	ctx := context.Background()

	assert.Equal(t, []string{"up_simple"}, f.proxy.Models(), "every other name is a built-in of the front")
	res, err := f.client.ModelInfer(ctx, simpleRequest("simple", ""))
	require.NoError(t, err)
	checkSimple(t, res)
	assert.Zero(t, inferences(up.Registry, "simple"), "simple is the front's own")

	res, err = f.client.ModelInfer(ctx, simpleRequest("up_simple", "x"))
	require.NoError(t, err)
	checkSimple(t, res)
	assert.Equal(t, "up_simple", res.ModelName)
	assert.Equal(t, uint64(1), inferences(up.Registry, "simple"))

	want, err := client(t, up.Addr).ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple"})
	require.NoError(t, err)
	got, err := f.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "up_simple"})
	require.NoError(t, err)
	assert.Equal(t, "up_simple", got.Config.Name)
	got.Config.Name = "simple"
	assert.True(t, proto.Equal(want, got))
	md, err := f.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "up_simple"})
	require.NoError(t, err)
	assert.Equal(t, "up_simple", md.Name)
}

// TestModelRemovedAndChanged: a model the upstream no longer lists leaves the front; one whose
// config changed is registered again with the new config.
func TestModelRemovedAndChanged(t *testing.T) {
	up := startUpstream(t, &testModel{name: "m", exec: echo})
	f := startFront(t, fast(ep("triton", up.Addr, 0)))
	ctx := context.Background()
	f.waitModel(t, "simple_int8")

	require.True(t, up.Registry.Remove("simple_int8"))
	f.waitGone(t, "simple_int8")
	_, err := f.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "simple_int8"})
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Equal(t, "Request for unknown model: 'simple_int8' is not found", status.Convert(err).Message())

	require.NoError(t, up.Registry.Unload("simple_string")) // RepositoryIndex(ready) leaves it out
	f.waitGone(t, "simple_string")
	assert.NotContains(t, f.proxy.Models(), "simple_string")

	// m changes its config: a decoupled model of the same name.
	require.True(t, up.Registry.Remove("m"))
	_, err = up.Registry.Register(&testModel{name: "m", decoupled: true, exec: echo})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		res, err := f.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "m"})
		return err == nil && res.Config.GetModelTransactionPolicy().GetDecoupled()
	}, 10*time.Second, 10*time.Millisecond)
	got, err := stream(ctx, t, f.client, testRequest("m", 4, 2))
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, []int32{4, 2}, int32s(got[0].InferResponse.RawOutputContents[0]))
	assert.True(t, slices.Contains(f.proxy.Models(), "m"))
}
