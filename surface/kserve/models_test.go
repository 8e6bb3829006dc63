package kserve_test

import (
	"context"
	"strconv"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBuiltinModelsEveryClient(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	for _, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			t.Run("simple raw", func(t *testing.T) {
				res, err := infer(ctx, c, simpleRequest("req-42"))
				require.NoError(t, err)
				assert.Equal(t, "simple", res.ModelName)
				assert.Equal(t, "1", res.ModelVersion)
				assert.Equal(t, "req-42", res.Id)
				require.Len(t, res.Outputs, 2)
				require.Len(t, res.RawOutputContents, 2)
				assert.Equal(t, "OUTPUT0", res.Outputs[0].Name)
				assert.Equal(t, "INT32", res.Outputs[0].Datatype)
				assert.Equal(t, []int64{1, 16}, res.Outputs[0].Shape)
				assert.Equal(t, seq(16, func(i int) int32 { return int32(i) + 1 }), int32s(res.RawOutputContents[0]))
				assert.Equal(t, seq(16, func(i int) int32 { return int32(i) - 1 }), int32s(res.RawOutputContents[1]))
				assert.Empty(t, res.Outputs[0].Contents, "Triton clients read raw_output_contents only")
			})
			t.Run("simple typed, outputs in requested order", func(t *testing.T) {
				req := &inference.ModelInferRequest{ModelName: "simple", ModelVersion: "1",
					Inputs: []*inference.ModelInferRequest_InferInputTensor{
						{Name: "INPUT0", Datatype: "INT32", Shape: []int64{2, 16}, Contents: &inference.InferTensorContents{IntContents: seq(32, func(i int) int32 { return int32(i) })}},
						{Name: "INPUT1", Datatype: "INT32", Shape: []int64{2, 16}, Contents: &inference.InferTensorContents{IntContents: seq(32, func(int) int32 { return 2 })}},
					},
					Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}, {Name: "OUTPUT0"}},
				}
				res, err := infer(ctx, c, req)
				require.NoError(t, err)
				assert.Empty(t, res.Id)
				require.Len(t, res.Outputs, 2)
				assert.Equal(t, "OUTPUT1", res.Outputs[0].Name)
				assert.Equal(t, []int64{2, 16}, res.Outputs[0].Shape)
				assert.Equal(t, seq(32, func(i int) int32 { return int32(i) - 2 }), int32s(res.RawOutputContents[0]))
				assert.Equal(t, seq(32, func(i int) int32 { return int32(i) + 2 }), int32s(res.RawOutputContents[1]))
			})
			t.Run("simple single output", func(t *testing.T) {
				req := simpleRequest("")
				req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}}
				res, err := infer(ctx, c, req)
				require.NoError(t, err)
				require.Len(t, res.Outputs, 1)
				require.Len(t, res.RawOutputContents, 1)
				assert.Equal(t, "OUTPUT1", res.Outputs[0].Name)
			})
			t.Run("simple_int8 wraps", func(t *testing.T) {
				req := &inference.ModelInferRequest{ModelName: "simple_int8",
					Inputs: []*inference.ModelInferRequest_InferInputTensor{
						{Name: "INPUT0", Datatype: "INT8", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: seq(16, func(i int) int32 { return int32(120 + i) })}},
						rawInput("INPUT1", "INT8", []int64{1, 16}),
					},
				}
				// Mixing typed and raw across inputs is allowed only without raw; use typed for both.
				req.Inputs[1].Contents = &inference.InferTensorContents{IntContents: seq(16, func(int) int32 { return 10 })}
				res, err := infer(ctx, c, req)
				require.NoError(t, err)
				sum := tensor.View[int8](res.RawOutputContents[0])
				assert.Equal(t, int8(-126), sum[0], "120+10 wraps in int8")
				assert.Equal(t, "INT8", res.Outputs[0].Datatype)
			})
			t.Run("simple_string", func(t *testing.T) {
				var in0, in1 []string
				for i := range 16 {
					in0 = append(in0, strconv.Itoa(i))
					in1 = append(in1, "1")
				}
				req := &inference.ModelInferRequest{ModelName: "simple_string",
					Inputs: []*inference.ModelInferRequest_InferInputTensor{
						rawInput("INPUT0", "BYTES", []int64{1, 16}), rawInput("INPUT1", "BYTES", []int64{1, 16}),
					},
					RawInputContents: [][]byte{tensor.JoinBytes(in0), tensor.JoinBytes(in1)},
				}
				res, err := infer(ctx, c, req)
				require.NoError(t, err)
				sum, err := tensor.SplitBytes(res.RawOutputContents[0])
				require.NoError(t, err)
				diff, err := tensor.SplitBytes(res.RawOutputContents[1])
				require.NoError(t, err)
				for i := range 16 {
					assert.Equal(t, strconv.Itoa(i+1), string(sum[i]))
					assert.Equal(t, strconv.Itoa(i-1), string(diff[i]))
				}
				assert.Equal(t, "BYTES", res.Outputs[0].Datatype)
			})
			t.Run("simple_identity byte exact", func(t *testing.T) {
				elems := [][]byte{{}, []byte("a\x00b"), {0xff, 0xfe, 0x00, 0x01}, []byte("héllo")}
				req := &inference.ModelInferRequest{ModelName: "simple_identity",
					Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{1, 4},
						Contents: &inference.InferTensorContents{BytesContents: elems}}},
				}
				res, err := infer(ctx, c, req)
				require.NoError(t, err)
				got, err := tensor.SplitBytes(res.RawOutputContents[0])
				require.NoError(t, err)
				require.Len(t, got, 4)
				for i := range elems {
					assert.Equal(t, elems[i], append([]byte{}, got[i]...))
				}
				assert.Equal(t, []int64{1, 4}, res.Outputs[0].Shape)
			})
			t.Run("identity_fp32 zero-size", func(t *testing.T) {
				req := &inference.ModelInferRequest{ModelName: "identity_fp32",
					Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "FP32", []int64{0})},
					RawInputContents: [][]byte{{}},
				}
				res, err := infer(ctx, c, req)
				require.NoError(t, err)
				require.Len(t, res.RawOutputContents, 1, "one raw entry per output even when empty")
				assert.Empty(t, res.RawOutputContents[0])
				assert.Equal(t, []int64{0}, res.Outputs[0].Shape)
			})
			t.Run("simple_sequence", func(t *testing.T) {
				step := sequenceStep(t, c, "simple_sequence")
				id := int64Param(1000)
				assert.Equal(t, int32(6), step(5, map[string]*inference.InferParameter{"sequence_id": id, "sequence_start": boolParam(true)}), "START adds 1")
				assert.Equal(t, int32(7), step(7, map[string]*inference.InferParameter{"sequence_id": id}))
				assert.Equal(t, int32(9), step(9, map[string]*inference.InferParameter{"sequence_id": id, "sequence_end": boolParam(true)}))
				// The sequence ended, so a non-start request is refused.
				req := &inference.ModelInferRequest{ModelName: "simple_sequence",
					Parameters:       map[string]*inference.InferParameter{"sequence_id": id},
					Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT", "INT32", []int64{1, 1})},
					RawInputContents: [][]byte{tensor.Bytes([]int32{1})},
				}
				_, err := infer(ctx, c, req)
				requireStatus(t, err, connect.CodeInvalidArgument,
					"inference request for sequence 1000 to model 'simple_sequence' must specify the START flag on the first request of the sequence")
			})
			t.Run("simple_dyna_sequence adds CORRID on END", func(t *testing.T) {
				step := sequenceStep(t, c, "simple_dyna_sequence")
				id := int64Param(1001)
				assert.Equal(t, int32(11), step(10, map[string]*inference.InferParameter{"sequence_id": id, "sequence_start": boolParam(true)}))
				assert.Equal(t, int32(20), step(20, map[string]*inference.InferParameter{"sequence_id": id}))
				assert.Equal(t, int32(1031), step(30, map[string]*inference.InferParameter{"sequence_id": id, "sequence_end": boolParam(true)}))
			})
			t.Run("decoupled models refuse ModelInfer", func(t *testing.T) {
				for _, m := range []string{"repeat_int32", "square_int32"} {
					_, err := infer(ctx, c, &inference.ModelInferRequest{ModelName: m})
					requireStatus(t, err, connect.CodeUnimplemented, "ModelInfer RPC doesn't support models with decoupled transaction policy")
				}
			})
			t.Run("metadata and config", func(t *testing.T) {
				md, err := call[inference.ModelMetadataRequest, inference.ModelMetadataResponse](ctx, c, "ModelMetadata", &inference.ModelMetadataRequest{Name: "simple"})
				require.NoError(t, err)
				assert.Equal(t, "simple", md.Name)
				assert.Equal(t, []string{"1"}, md.Versions)
				require.Len(t, md.Inputs, 2)
				assert.Equal(t, []int64{-1, 16}, md.Inputs[0].Shape)
				assert.Equal(t, "INT32", md.Inputs[0].Datatype)
				cfg, err := call[inference.ModelConfigRequest, inference.ModelConfigResponse](ctx, c, "ModelConfig", &inference.ModelConfigRequest{Name: "simple"})
				require.NoError(t, err)
				assert.Equal(t, "simple", cfg.Config.Name)
				assert.Equal(t, int32(8), cfg.Config.MaxBatchSize)
				assert.Equal(t, []int64{16}, cfg.Config.Input[0].Dims, "config dims exclude the batch dimension")
				assert.Equal(t, inference.DataType_TYPE_INT32, cfg.Config.Input[0].DataType)
				rc, err := call[inference.ModelConfigRequest, inference.ModelConfigResponse](ctx, c, "ModelConfig", &inference.ModelConfigRequest{Name: "repeat_int32"})
				require.NoError(t, err)
				assert.True(t, rc.Config.GetModelTransactionPolicy().GetDecoupled())
				sc, err := call[inference.ModelConfigRequest, inference.ModelConfigResponse](ctx, c, "ModelConfig", &inference.ModelConfigRequest{Name: "simple_dyna_sequence"})
				require.NoError(t, err)
				require.Len(t, sc.Config.GetSequenceBatching().GetControlInput(), 4)
				assert.Equal(t, uint64(10_000_000), sc.Config.GetSequenceBatching().GetMaxSequenceIdleMicroseconds())
				sm, err := call[inference.ModelMetadataRequest, inference.ModelMetadataResponse](ctx, c, "ModelMetadata", &inference.ModelMetadataRequest{Name: "simple_string"})
				require.NoError(t, err)
				assert.Equal(t, "BYTES", sm.Inputs[0].Datatype)
			})
		})
	}
}

// sequenceStep returns a function that sends INPUT = v with the given parameters to a sequence
// model and returns OUTPUT.
func sequenceStep(t *testing.T, c *client, model string) func(v int32, params map[string]*inference.InferParameter) int32 {
	return func(v int32, params map[string]*inference.InferParameter) int32 {
		req := &inference.ModelInferRequest{ModelName: model, Parameters: params,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT", "INT32", []int64{1, 1})},
			RawInputContents: [][]byte{tensor.Bytes([]int32{v})},
		}
		res, err := infer(context.Background(), c, req)
		require.NoError(t, err)
		return int32s(res.RawOutputContents[0])[0]
	}
}
