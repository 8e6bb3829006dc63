package registry

import (
	"context"
	"errors"
	"io"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/adapters/gateway"
	"github.com/infergate/infergate/adapters/gateway/gatewaytest"
	"github.com/infergate/infergate/adapters/tensor"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// front is a gateway serving registered tensor models through RemoteTensors.
type front struct {
	srv     *gatewaytest.Server
	tensors *RemoteTensors
	kserve  inference.GRPCInferenceServiceClient
}

func startFront(t *testing.T) *front {
	srv := gatewaytest.Start(t, gateway.Config{})
	tensors := NewRemoteTensors(srv.Registry, quiet())
	t.Cleanup(tensors.Close)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &front{srv: srv, tensors: tensors, kserve: inference.NewGRPCInferenceServiceClient(conn)}
}

func outputText(t *testing.T, res *inference.ModelInferResponse) []string {
	t.Helper()
	require.Len(t, res.RawOutputContents, 1)
	elems, err := tensor.SplitBytes(res.RawOutputContents[0])
	require.NoError(t, err)
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = string(e)
	}
	return out
}

// A decoupled backend's responses stream through the gateway one by one, then the final flag.
func TestRemoteTensorsDecoupled(t *testing.T) {
	desc := tensorDesc("words")
	desc.Decoupled = true
	m, err := engines.NewRemoteModel(desc, func(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
		elems, err := tensor.SplitBytes(req.Input("text_input").Data)
		if err != nil {
			return err
		}
		for _, e := range elems {
			if err := send(&engines.Response{Outputs: []engines.Tensor{{Name: "text_output", Datatype: inference.DataType_TYPE_STRING,
				Shape: []int64{1}, Data: tensor.AppendBytes(nil, e)}}}); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	backend := gatewaytest.Start(t, gateway.Config{}, m)
	f := startFront(t)
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: newLeaseID(), Model: "words", URL: backend.URL, Config: desc}))

	st, err := f.kserve.ModelStreamInfer(context.Background())
	require.NoError(t, err)
	req := bytesRequest("words", "a", "b", "c")
	req.Parameters = map[string]*inference.InferParameter{paramEmptyFinal: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}
	require.NoError(t, st.Send(req))
	require.NoError(t, st.CloseSend())
	var words []string
	final := false
	for {
		res, err := st.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Empty(t, res.ErrorMessage)
		ir := res.InferResponse
		if ir.Parameters["triton_final_response"].GetBoolParam() {
			final = true
			assert.Empty(t, ir.Outputs, "a flags-only final")
			continue
		}
		words = append(words, outputText(t, ir)...)
	}
	assert.Equal(t, []string{"a", "b", "c"}, words)
	assert.True(t, final)
}

// The backend's errors reach the client with their code and message.
func TestRemoteTensorsBackendErrors(t *testing.T) {
	m, err := engines.NewRemoteModel(tensorDesc("picky"), func(context.Context, *engines.Request, func(*engines.Response) error) error {
		return connect.NewError(connect.CodeResourceExhausted, errors.New("backend is full"))
	})
	require.NoError(t, err)
	backend := gatewaytest.Start(t, gateway.Config{}, m)
	f := startFront(t)
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: newLeaseID(), Model: "picky", URL: backend.URL, Config: tensorDesc("picky")}))
	_, err = f.kserve.ModelInfer(context.Background(), bytesRequest("picky", "x"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, "backend is full", status.Convert(err).Message())

	// A backend that is gone is UNAVAILABLE.
	require.NoError(t, backend.Stop(5e9))
	_, err = f.kserve.ModelInfer(context.Background(), bytesRequest("picky", "x"))
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}

// One lease serves a model at a time; when it ends, the next lease for the name takes over. A
// name the gateway already serves is not taken over, nor removed.
func TestRemoteTensorsLeasesOfOneModel(t *testing.T) {
	first := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "shared"))
	second := gatewaytest.Start(t, gateway.Config{}, echoModel(t, "shared"))
	f := startFront(t)
	l1, l2 := newLeaseID(), newLeaseID()
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: l1, Model: "shared", URL: first.URL, Config: tensorDesc("shared")}))
	require.NoError(t, f.tensors.Add(TensorBackend{LeaseID: l2, Model: "shared", URL: second.URL, Config: tensorDesc("shared")}))
	ctx := context.Background()
	infer := func() {
		t.Helper()
		res, err := f.kserve.ModelInfer(ctx, bytesRequest("shared", "x"))
		require.NoError(t, err)
		assert.Equal(t, []string{"x"}, outputText(t, res))
	}
	infer()
	assert.Equal(t, uint64(1), first.Registry.Lookup("shared").Stats.Inferences())
	assert.Equal(t, uint64(0), second.Registry.Lookup("shared").Stats.Inferences())

	f.tensors.Remove(l1)
	infer()
	assert.Equal(t, uint64(1), first.Registry.Lookup("shared").Stats.Inferences())
	assert.Equal(t, uint64(1), second.Registry.Lookup("shared").Stats.Inferences(), "the second lease took over")

	f.tensors.Remove(l2)
	_, err := f.kserve.ModelInfer(ctx, bytesRequest("shared", "x"))
	assert.Equal(t, codes.NotFound, status.Code(err))
	assert.Nil(t, f.srv.Registry.Lookup("shared"))

	// "simple" is a built-in of every gateway.
	err = f.tensors.Add(TensorBackend{LeaseID: newLeaseID(), Model: "simple", URL: first.URL, Config: tensorDesc("simple")})
	assert.Equal(t, connect.CodeAlreadyExists, connect.CodeOf(err), "%v", err)
	builtin := f.srv.Registry.Lookup("simple")
	require.NotNil(t, builtin)
	assert.Equal(t, "infergate_cpu", builtin.Config().GetPlatform())
}

// Requests go to the backend as KServe requests: tensors and parameters as they came, sequence
// flags as Triton's parameters, and no control inputs (the backend's sequence batcher adds its own).
func TestForwarderRequest(t *testing.T) {
	f := &forwarder{model: "seq"}
	f.configure(&inference.ModelConfig{SchedulingChoice: &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{
		ControlInput: []*inference.ModelSequenceBatching_ControlInput{{Name: "START"}, {Name: "READY"}}}}})
	req := &engines.Request{ID: "r1",
		Inputs: []engines.Tensor{
			{Name: "INPUT", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1}, Data: []byte{1, 0, 0, 0}},
			{Name: "START", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1}, Data: []byte{1, 0, 0, 0}},
			{Name: "READY", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1}, Data: []byte{1, 0, 0, 0}},
		},
		Outputs:    []string{"OUTPUT"},
		Parameters: map[string]*inference.InferParameter{"custom": {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "v"}}},
		Sequence:   engines.Sequence{ID: engines.CorrelationID{Uint: 7}, Start: true},
	}
	w := f.request(req)
	assert.Equal(t, "seq", w.ModelName)
	assert.Equal(t, "r1", w.Id)
	require.Len(t, w.Inputs, 1)
	assert.Equal(t, "INPUT", w.Inputs[0].Name)
	assert.Equal(t, "INT32", w.Inputs[0].Datatype)
	assert.Equal(t, [][]byte{{1, 0, 0, 0}}, w.RawInputContents)
	require.Len(t, w.Outputs, 1)
	assert.Equal(t, "OUTPUT", w.Outputs[0].Name)
	assert.Equal(t, "v", w.Parameters["custom"].GetStringParam())
	assert.Equal(t, int64(7), w.Parameters[paramSequenceID].GetInt64Param())
	assert.True(t, w.Parameters[paramSequenceStart].GetBoolParam())
	assert.False(t, w.Parameters[paramSequenceEnd].GetBoolParam())
}

// A backend's response is checked against the bytes it carries before anything uses it.
func TestForwarderRejectsInconsistentOutputs(t *testing.T) {
	f := &forwarder{model: "m"}
	out := func(dt string, shape ...int64) *inference.ModelInferResponse_InferOutputTensor {
		return &inference.ModelInferResponse_InferOutputTensor{Name: "o", Datatype: dt, Shape: shape}
	}
	for _, tc := range []struct {
		name string
		outs []*inference.ModelInferResponse_InferOutputTensor
		raw  [][]byte
		msg  string
	}{
		{"short raw", []*inference.ModelInferResponse_InferOutputTensor{out("FP32", 2)}, [][]byte{make([]byte, 7)}, "output 'o' of shape [2] has 7 bytes"},
		{"huge shape", []*inference.ModelInferResponse_InferOutputTensor{out("FP64", 1<<40, 1<<30)}, [][]byte{make([]byte, 8)}, "output 'o' has shape [1099511627776 1073741824]"},
		{"negative dim", []*inference.ModelInferResponse_InferOutputTensor{out("INT8", -1)}, [][]byte{{1}}, "output 'o' has shape [-1]"},
		{"bad datatype", []*inference.ModelInferResponse_InferOutputTensor{out("FP9", 1)}, [][]byte{{1}}, "output 'o' has datatype 'FP9'"},
		{"raw count", []*inference.ModelInferResponse_InferOutputTensor{out("INT8", 1), out("INT8", 1)}, [][]byte{{1}}, "it has 2 outputs but 1 raw_output_contents"},
		{"bytes framing", []*inference.ModelInferResponse_InferOutputTensor{out("BYTES", 1)}, [][]byte{{9, 0, 0, 0, 'a'}}, "does not hold 1 framed BYTES elements"},
		{"bytes count", []*inference.ModelInferResponse_InferOutputTensor{out("BYTES", 2)}, [][]byte{tensor.AppendBytes(nil, []byte("a"))}, "does not hold 2 framed BYTES elements"},
		{"wrong contents", []*inference.ModelInferResponse_InferOutputTensor{{Name: "o", Datatype: "INT32", Shape: []int64{1},
			Contents: &inference.InferTensorContents{Fp32Contents: []float32{1}}}}, nil, "unexpected explicit tensor data of type 'FP32'"},
	} {
		_, err := f.response(tc.outs, tc.raw)
		assert.Equal(t, connect.CodeInternal, connect.CodeOf(err), tc.name)
		assert.Contains(t, err.Error(), "backend of model 'm' sent an invalid response", tc.name)
		assert.Contains(t, err.Error(), tc.msg, tc.name)
	}
	// Typed contents are accepted and become raw bytes.
	res, err := f.response([]*inference.ModelInferResponse_InferOutputTensor{{Name: "o", Datatype: "INT32", Shape: []int64{2},
		Contents: &inference.InferTensorContents{IntContents: []int32{1, 2}}}}, nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{1, 0, 0, 0, 2, 0, 0, 0}, res.Outputs[0].Data)
}
