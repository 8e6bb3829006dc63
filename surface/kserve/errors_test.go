package kserve_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowModel answers after IN milliseconds unless its context ends first; tests use it for
// timeouts, deadlines and draining.
type slowModel struct{}

func (slowModel) Config() *inference.ModelConfig {
	return &inference.ModelConfig{Name: "slow",
		Input:  []*inference.ModelInput{{Name: "IN", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
		Output: []*inference.ModelOutput{{Name: "OUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
	}
}

func (slowModel) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("IN")
	select {
	case <-time.After(time.Duration(tensor.View[int32](in.Data)[0]) * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: in.Shape, Data: in.Data}}})
}

func slowRequest(ms int32) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{ModelName: "slow",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("IN", "INT32", []int64{1})},
		RawInputContents: [][]byte{tensor.Bytes([]int32{ms})},
	}
}

func frame(elems ...string) []byte { return tensor.JoinBytes(elems) }

func TestInferErrorsMatchTriton(t *testing.T) {
	srv := start(t, slowModel{})
	const mismatchNote = ". NOTE: Setting a non-zero max_batch_size in the model config requires a batch dimension to be prepended to each input shape. If you want to specify the full shape including the batch dim in your input dims config, try setting max_batch_size to zero. See the model configuration docs for allowed max_batch_size values."
	sixteen := func(s string) []string {
		out := make([]string, 16)
		for i := range out {
			out[i] = s
		}
		return out
	}
	stringRequest := func(in0 []byte, shape []int64) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "simple_string",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "BYTES", shape), rawInput("INPUT1", "BYTES", []int64{1, 16})},
			RawInputContents: [][]byte{in0, tensor.JoinBytes(sixteen("1"))},
		}
	}
	cases := []struct {
		name string
		edit func(*inference.ModelInferRequest) *inference.ModelInferRequest
		code connect.Code
		msg  string
	}{
		{"unknown model", func(r *inference.ModelInferRequest) *inference.ModelInferRequest { r.ModelName = "foo"; return r },
			connect.CodeNotFound, "Request for unknown model: 'foo' is not found"},
		{"unknown version", func(r *inference.ModelInferRequest) *inference.ModelInferRequest { r.ModelVersion = "99"; return r },
			connect.CodeNotFound, "Request for unknown model: 'simple' version 99 is not found"},
		{"non-integer version", func(r *inference.ModelInferRequest) *inference.ModelInferRequest { r.ModelVersion = "abc"; return r },
			connect.CodeInvalidArgument, "failed to get model version from specified version string 'abc' (details: stoll), version should be an integral value > 0"},
		{"wrong datatype", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[0].Datatype = "FP32"
			return r
		},
			connect.CodeInvalidArgument, "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"},
		{"unknown datatype", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[0].Datatype = "FOO"
			return r
		},
			connect.CodeInvalidArgument, "inference input 'INPUT0' data-type is '<invalid>', but model 'simple' expects 'INT32'"},
		{"wrong shape", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[0].Shape = []int64{1, 15}
			r.RawInputContents[0] = r.RawInputContents[0][:60]
			return r
		}, connect.CodeInvalidArgument, "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]" + mismatchNote},
		{"no batch dimension: the first dimension is read as the batch", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[0].Shape, r.Inputs[1].Shape = []int64{16}, []int64{16}
			return r
		}, connect.CodeInvalidArgument, "inference request batch-size must be <= 8 for 'simple'"},
		{"missing dimension", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[0].Shape = []int64{1}
			return r
		}, connect.CodeInvalidArgument, "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1]" + mismatchNote},
		{"-1 in request shape", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[0].Shape = []int64{-1, 16}
			return r
		},
			connect.CodeInvalidArgument, "All input dimensions should be specified for input 'INPUT0' for model 'simple', got [-1,16]"},
		{"batch over max_batch_size", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[0].Shape, r.Inputs[1].Shape = []int64{9, 16}, []int64{9, 16}
			r.RawInputContents = [][]byte{make([]byte, 9*64), make([]byte, 9*64)}
			return r
		}, connect.CodeInvalidArgument, "inference request batch-size must be <= 8 for 'simple'"},
		{"missing input", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs, r.RawInputContents = r.Inputs[:1], r.RawInputContents[:1]
			return r
		}, connect.CodeInvalidArgument, "expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s)."},
		{"unknown input", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[1].Name = "INPUT9"
			return r
		},
			connect.CodeInvalidArgument, "unexpected inference input 'INPUT9' for model 'simple'"},
		{"duplicate input", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[1].Name = "INPUT0"
			return r
		},
			connect.CodeInvalidArgument, "input 'INPUT0' already exists in request"},
		{"raw 4 bytes short", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.RawInputContents[0] = r.RawInputContents[0][:60]
			return r
		}, connect.CodeInvalidArgument, "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60"},
		{"raw 4 bytes long", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.RawInputContents[1] = append(r.RawInputContents[1], 0, 0, 0, 0)
			return r
		}, connect.CodeInvalidArgument, "input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 68"},
		{"fewer raw entries than inputs", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.RawInputContents = r.RawInputContents[:1]
			return r
		}, connect.CodeInvalidArgument, "unable to find data for input tensor 'INPUT1' for model 'simple' in request."},
		{"more raw entries than inputs", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.RawInputContents = append(r.RawInputContents, []byte{1})
			return r
		}, connect.CodeInvalidArgument, "expected 2 entries in raw_input_contents (one per input) but got 3 for model 'simple'"},
		{"raw and typed mixed", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Inputs[0].Contents = &inference.InferTensorContents{IntContents: make([]int32, 16)}
			return r
		}, connect.CodeInvalidArgument, "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'"},
		{"typed in the wrong field", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.RawInputContents = nil
			r.Inputs[0].Contents = &inference.InferTensorContents{Fp32Contents: make([]float32, 16)}
			r.Inputs[1].Contents = &inference.InferTensorContents{IntContents: make([]int32, 16)}
			return r
		}, connect.CodeInvalidArgument, "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', expected datatype 'INT32'"},
		{"typed element count", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.RawInputContents = nil
			r.Inputs[0].Contents = &inference.InferTensorContents{IntContents: make([]int32, 15)}
			r.Inputs[1].Contents = &inference.InferTensorContents{IntContents: make([]int32, 16)}
			return r
		}, connect.CodeInvalidArgument, "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60"},
		{"unknown output", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT9"}}
			return r
		}, connect.CodeInvalidArgument, "unexpected inference output 'OUTPUT9' for model 'simple'"},
		{"duplicate output", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}, {Name: "OUTPUT0"}}
			return r
		}, connect.CodeInvalidArgument, "output 'OUTPUT0' already exists in request"},
		{"BYTES truncated length indicator", func(*inference.ModelInferRequest) *inference.ModelInferRequest {
			return stringRequest(append(frame(sixteen("2")[:15]...), 1, 0), []int64{1, 16})
		}, connect.CodeInvalidArgument, "incomplete string length indicator for inference input 'INPUT0' for model 'simple_string', expecting 4 bytes but only 2 bytes available. Please make sure the string length indicator is in one buffer."},
		{"BYTES length past end", func(*inference.ModelInferRequest) *inference.ModelInferRequest {
			b := frame(sixteen("2")[:15]...)
			b = binary.LittleEndian.AppendUint32(b, 0xFFFFFFF0)
			return stringRequest(append(b, '7'), []int64{1, 16})
		}, connect.CodeInvalidArgument, "incomplete string for inference input 'INPUT0' for model 'simple_string', expecting string of length 4294967280 but only 1 bytes available"},
		{"BYTES element count", func(*inference.ModelInferRequest) *inference.ModelInferRequest {
			return stringRequest(frame(sixteen("2")[:15]...), []int64{1, 16})
		}, connect.CodeInvalidArgument, "expected 16 string elements for inference input 'INPUT0' for model 'simple_string', got 15"},
		{"reserved triton_ parameter", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Parameters = map[string]*inference.InferParameter{"triton_foo": boolParam(true)}
			return r
		}, connect.CodeInvalidArgument, "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified."},
		{"empty-final flag of the wrong type", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Parameters = map[string]*inference.InferParameter{"triton_enable_empty_final_response": int64Param(1)}
			return r
		}, connect.CodeInvalidArgument, "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."},
		{"timeout of the wrong type", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.Parameters = map[string]*inference.InferParameter{"timeout": boolParam(true)}
			return r
		}, connect.CodeInvalidArgument, "invalid value type for 'timeout' parameter, expected int64_param."},
		{"sequence_id of the wrong type", func(r *inference.ModelInferRequest) *inference.ModelInferRequest {
			r.ModelName = "simple_sequence"
			r.Parameters = map[string]*inference.InferParameter{"sequence_id": boolParam(true)}
			return r
		}, connect.CodeInvalidArgument, "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."},
		{"sequence model without correlation id", func(*inference.ModelInferRequest) *inference.ModelInferRequest {
			return &inference.ModelInferRequest{ModelName: "simple_sequence",
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT", "INT32", []int64{1, 1})},
				RawInputContents: [][]byte{tensor.Bytes([]int32{1})},
			}
		}, connect.CodeInvalidArgument, "inference request to model 'simple_sequence' must specify a non-zero or non-empty correlation ID"},
		{"timeout parameter expires", func(*inference.ModelInferRequest) *inference.ModelInferRequest {
			r := slowRequest(5000)
			r.Parameters = map[string]*inference.InferParameter{"timeout": int64Param(20_000)}
			return r
		}, connect.CodeUnavailable, "Request timeout expired"},
	}
	ctx := context.Background()
	for _, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					_, err := infer(ctx, c, tc.edit(simpleRequest("")))
					requireStatus(t, err, tc.code, tc.msg)
				})
			}
		})
	}
}

func TestCustomParametersOfEveryKindAreAccepted(t *testing.T) {
	srv := start(t)
	req := simpleRequest("p")
	req.Parameters = map[string]*inference.InferParameter{
		"b": boolParam(true), "i": int64Param(-3),
		"s":        {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "x"}},
		"d":        {ParameterChoice: &inference.InferParameter_DoubleParam{DoubleParam: 1.5}},
		"u":        {ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: 7}},
		"priority": {ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: 1}},
		"timeout":  int64Param(10_000_000),
	}
	res, err := infer(context.Background(), clients(t, srv)[0], req)
	require.NoError(t, err)
	assert.Equal(t, "p", res.Id)
}

func TestMetadataConfigStatisticsErrors(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	for _, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			_, err := call[inference.ModelMetadataRequest, inference.ModelMetadataResponse](ctx, c, "ModelMetadata", &inference.ModelMetadataRequest{Name: "foo"})
			requireStatus(t, err, connect.CodeNotFound, "Request for unknown model: 'foo' is not found")
			_, err = call[inference.ModelMetadataRequest, inference.ModelMetadataResponse](ctx, c, "ModelMetadata", &inference.ModelMetadataRequest{Name: "simple", Version: "99999"})
			requireStatus(t, err, connect.CodeNotFound, "Request for unknown model: 'simple' version 99999 is not found")
			_, err = call[inference.ModelConfigRequest, inference.ModelConfigResponse](ctx, c, "ModelConfig", &inference.ModelConfigRequest{Name: "foo"})
			requireStatus(t, err, connect.CodeNotFound, "Request for unknown model: 'foo' is not found")
			_, err = call[inference.ModelStatisticsRequest, inference.ModelStatisticsResponse](ctx, c, "ModelStatistics", &inference.ModelStatisticsRequest{Name: "foo"})
			requireStatus(t, err, connect.CodeNotFound, "Request for unknown model: 'foo' is not found")
		})
	}
}

func TestDeadlineAndCancellationLeaveServerHealthy(t *testing.T) {
	srv := start(t, slowModel{})
	cs := clients(t, srv)
	for _, c := range cs {
		t.Run(c.name, func(t *testing.T) {
			// Connect first, so the deadline below is spent on the server, not on dialing.
			_, err := call[inference.ServerLiveRequest, inference.ServerLiveResponse](context.Background(), c, "ServerLive", &inference.ServerLiveRequest{})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err = infer(ctx, c, slowRequest(10_000))
			require.Equal(t, connect.CodeDeadlineExceeded, codeOf(err), "%v", err)
			live, err := call[inference.ServerLiveRequest, inference.ServerLiveResponse](context.Background(), c, "ServerLive", &inference.ServerLiveRequest{})
			require.NoError(t, err)
			assert.True(t, live.Live)
		})
	}
	// Each slow call saw its context end instead of running for 10 s: every one is already
	// counted as failed.
	require.Eventually(t, func() bool { return srv.Registry.Lookup("slow").Stats.Fail.Count() == uint64(len(cs)) },
		5*time.Second, 10*time.Millisecond)
}

// failingModel fails every request with a plain Go error, as a broken backend would.
type failingModel struct{}

func (failingModel) Config() *inference.ModelConfig {
	return &inference.ModelConfig{Name: "failing",
		Input:  []*inference.ModelInput{{Name: "IN", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
		Output: []*inference.ModelOutput{{Name: "OUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
	}
}

func (failingModel) Execute(context.Context, *engines.Request, func(*engines.Response) error) error {
	return errors.New("backend exploded")
}

func TestBackendFailureIsInternal(t *testing.T) {
	srv := start(t, failingModel{})
	req := slowRequest(0)
	req.ModelName = "failing"
	for _, c := range clients(t, srv) {
		_, err := infer(context.Background(), c, req)
		requireStatus(t, err, connect.CodeInternal, "backend exploded")
	}
	s := openStream(context.Background(), t, streamClients(t, srv)[0])
	req.Id = "f"
	require.NoError(t, s.Send(req))
	require.NoError(t, s.CloseSend())
	got, err := recvAll(t, s)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "backend exploded", got[0].ErrorMessage)
	assert.Equal(t, "f", got[0].InferResponse.Id)
}
