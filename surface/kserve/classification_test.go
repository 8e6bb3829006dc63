package kserve_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/require"
)

func classified(name string, k int64) []*inference.ModelInferRequest_InferRequestedOutputTensor {
	return []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: name,
		Parameters: map[string]*inference.InferParameter{"classification": int64Param(k)}}}
}

func strs(t *testing.T, raw []byte) []string {
	t.Helper()
	elems, err := tensor.SplitBytes(raw)
	require.NoError(t, err)
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = string(e)
	}
	return out
}

func TestClassification(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	for _, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			// simple's OUTPUT0 is 1..16: its top 3 are the last three, largest first.
			req := simpleRequest("cls")
			req.Outputs = classified("OUTPUT0", 3)
			resp, err := infer(ctx, c, req)
			require.NoError(t, err)
			require.Len(t, resp.Outputs, 1)
			out := resp.Outputs[0]
			require.Equal(t, "OUTPUT0", out.Name)
			require.Equal(t, "BYTES", out.Datatype)
			require.Equal(t, []int64{1, 3}, out.Shape, "batching model: [batch, k]")
			require.Equal(t, []string{"16:15", "15:14", "14:13"}, strs(t, resp.RawOutputContents[0]))

			// Each batch item is classified on its own; k is capped at the element count.
			req = simpleRequest("cls-batch")
			req.Inputs[0].Shape, req.Inputs[1].Shape = []int64{2, 16}, []int64{2, 16}
			in0 := seq(32, func(i int) int32 { return int32(i % 16) })
			in0[16+2] = 100 // item 1's largest is element 2
			req.RawInputContents = [][]byte{tensor.Bytes(in0), tensor.Bytes(seq(32, func(int) int32 { return 1 }))}
			req.Outputs = classified("OUTPUT1", 20)
			resp, err = infer(ctx, c, req)
			require.NoError(t, err)
			require.Equal(t, []int64{2, 16}, resp.Outputs[0].Shape)
			got := strs(t, resp.RawOutputContents[0])
			require.Equal(t, []string{"14:15", "13:14"}, got[:2])
			require.Equal(t, []string{"99:2", "14:15"}, got[16:18])
			require.Equal(t, "-1:0", got[15], "ties keep index order; the smallest comes last")

			// FP32 values print with six decimals, as Triton's std::to_string does.
			fp := &inference.ModelInferRequest{ModelName: "identity_fp32",
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "FP32", []int64{4})},
				RawInputContents: [][]byte{tensor.Bytes([]float32{0.25, -1, 3.5, float32(math.Pi)})},
				Outputs:          classified("OUTPUT0", 2)}
			resp, err = infer(ctx, c, fp)
			require.NoError(t, err)
			require.Equal(t, []int64{2}, resp.Outputs[0].Shape, "non-batching model: [k]")
			require.Equal(t, []string{"3.500000:2", "3.141593:3"}, strs(t, resp.RawOutputContents[0]))

			for _, tc := range []struct {
				req *inference.ModelInferRequest
				msg string
			}{
				{withOutputs(simpleRequest("0"), classified("OUTPUT0", 0)), "invalid value for 'classification' parameter of output 'OUTPUT0' for model 'simple', expected a count > 0, got 0."},
				{withOutputs(simpleRequest("neg"), classified("OUTPUT0", -2)), "expected a count > 0, got -2."},
				{withOutputs(simpleRequest("type"), []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0",
					Parameters: map[string]*inference.InferParameter{"classification": boolParam(true)}}}), "invalid value type for 'classification' parameter, expected int64_param."},
				{withOutputs(stringRequest(), classified("OUTPUT0", 2)), "class result not available for output 'OUTPUT0' of model 'simple_string' due to unsupported type 'BYTES'"},
			} {
				_, err := infer(ctx, c, tc.req)
				require.Equal(t, connect.CodeInvalidArgument, codeOf(err), "%v", err)
				require.Contains(t, messageOf(err), tc.msg)
			}
		})
	}

	t.Run("rest", func(t *testing.T) {
		body := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},
			{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}],
			"outputs":[{"name":"OUTPUT1","parameters":{"classification":2}}]}`
		resp, err := http.Post(srv.URL+"/v2/models/simple/infer", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		var got struct {
			Outputs []struct {
				Name, Datatype string
				Shape          []int64
				Data           []string
			}
		}
		require.NoError(t, json.Unmarshal(b, &got), string(b))
		require.Len(t, got.Outputs, 1)
		require.Equal(t, "BYTES", got.Outputs[0].Datatype)
		require.Equal(t, []int64{1, 2}, got.Outputs[0].Shape)
		require.Equal(t, []string{"14:15", "13:14"}, got.Outputs[0].Data)
	})
}

func withOutputs(req *inference.ModelInferRequest, outs []*inference.ModelInferRequest_InferRequestedOutputTensor) *inference.ModelInferRequest {
	req.Outputs = outs
	return req
}

func stringRequest() *inference.ModelInferRequest {
	in := make([]string, 16)
	for i := range in {
		in[i] = "1"
	}
	return &inference.ModelInferRequest{ModelName: "simple_string",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			rawInput("INPUT0", "BYTES", []int64{1, 16}), rawInput("INPUT1", "BYTES", []int64{1, 16})},
		RawInputContents: [][]byte{tensor.JoinBytes(in), tensor.JoinBytes(in)}}
}
