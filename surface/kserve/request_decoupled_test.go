package kserve_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countModel is not decoupled by config but decides per request, as the OpenAI bridge's LLMs do:
// with STREAM true it sends N responses (OUT = 1..N, the last final), else one (OUT = N). It also
// takes N as [1,1] (engines.InputReshaper).
type countModel struct{}

func (countModel) Config() *inference.ModelConfig {
	return &inference.ModelConfig{Name: "count", Platform: "test",
		Input: []*inference.ModelInput{
			{Name: "N", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}},
			{Name: "STREAM", DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
		},
		Output: []*inference.ModelOutput{{Name: "OUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}}},
	}
}

func (countModel) RequestDecoupled(r *engines.Request) bool {
	s := r.Input("STREAM")
	return s != nil && s.Data[0] != 0
}

func (countModel) ReshapeInputs(r *engines.Request) {
	for i := range r.Inputs {
		if s := r.Inputs[i].Shape; len(s) == 2 && s[0] == 1 && s[1] == 1 {
			r.Inputs[i].Shape = []int64{1}
		}
	}
}

func (m countModel) Execute(_ context.Context, r *engines.Request, send func(*engines.Response) error) error {
	n := tensor.View[int32](r.Input("N").Data)[0]
	out := func(v int32, final bool) *engines.Response {
		return &engines.Response{Final: final, Outputs: []engines.Tensor{
			{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1}, Data: tensor.Bytes([]int32{v})}}}
	}
	if !m.RequestDecoupled(r) {
		return send(out(n, false))
	}
	for i := int32(1); i <= n; i++ {
		if err := send(out(i, i == n)); err != nil {
			return err
		}
	}
	return nil
}

func countRequest(id string, n int32, stream bool, shape ...int64) *inference.ModelInferRequest {
	if shape == nil {
		shape = []int64{1}
	}
	req := &inference.ModelInferRequest{ModelName: "count", Id: id,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("N", "INT32", shape)},
		RawInputContents: [][]byte{tensor.Bytes([]int32{n})}}
	if stream {
		req.Inputs = append(req.Inputs, rawInput("STREAM", "BOOL", []int64{1}))
		req.RawInputContents = append(req.RawInputContents, []byte{1})
	}
	return req
}

// TestRequestDecoupledModel: a model that decides per request answers ModelInfer once, refuses a
// streaming request there (INVALID_ARGUMENT), and streams on ModelStreamInfer and REST
// generate_stream with the final flag on its last response.
func TestRequestDecoupledModel(t *testing.T) {
	srv := start(t, countModel{})
	ctx := context.Background()
	for _, c := range clients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			res, err := infer(ctx, c, countRequest("u", 3, false))
			require.NoError(t, err)
			assert.Equal(t, []int32{3}, int32s(res.RawOutputContents[0]))
			res, err = infer(ctx, c, countRequest("u", 4, false, 1, 1))
			require.NoError(t, err, "[1,1] is reshaped to the declared [1]")
			assert.Equal(t, []int32{4}, int32s(res.RawOutputContents[0]))
			_, err = infer(ctx, c, countRequest("u", 2, false, 2))
			requireStatus(t, err, connect.CodeInvalidArgument, "unexpected shape for input 'N' for model 'count'. Expected [1], got [2]")
			_, err = infer(ctx, c, countRequest("u", 3, true))
			requireStatus(t, err, connect.CodeInvalidArgument, "Streaming is not supported for this endpoint")
		})
	}
	for _, c := range streamClients(t, srv) {
		t.Run(c.name+"/stream", func(t *testing.T) {
			s := openStream(ctx, t, c)
			require.NoError(t, s.Send(countRequest("one", 5, false)))
			require.NoError(t, s.Send(countRequest("many", 3, true)))
			require.NoError(t, s.CloseSend())
			got, err := recvAll(t, s)
			require.NoError(t, err)
			require.Len(t, got, 4)
			assert.Equal(t, "one", got[0].InferResponse.Id, "the one-response request runs in order, first")
			assert.Equal(t, []int32{5}, int32s(got[0].InferResponse.RawOutputContents[0]))
			v, ok := final(got[0].InferResponse)
			assert.True(t, ok && v)
			for i, m := range got[1:] {
				require.Empty(t, m.ErrorMessage)
				assert.Equal(t, "many", m.InferResponse.Id)
				assert.Equal(t, []int32{int32(i + 1)}, int32s(m.InferResponse.RawOutputContents[0]))
				v, ok := final(m.InferResponse)
				assert.True(t, ok)
				assert.Equal(t, i == 2, v, "only the last response is final")
			}
		})
	}
	for _, p := range restPeers(srv) {
		t.Run(p.name+"/rest", func(t *testing.T) {
			r := p.post(t, "/v2/models/count/generate_stream", `{"N":3,"STREAM":true}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, []string{
				`{"model_name":"count","model_version":"1","OUT":1}`,
				`{"model_name":"count","model_version":"1","OUT":2}`,
				`{"model_name":"count","model_version":"1","OUT":3}`,
			}, sseEvents(t, bytes.NewReader(r.body)))
			r = p.post(t, "/v2/models/count/generate", `{"N":3}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, `{"model_name":"count","model_version":"1","OUT":3}`, string(r.body))
			requireRESTError(t, p.post(t, "/v2/models/count/generate", `{"N":3,"STREAM":true}`), 400,
				"generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses")
			requireRESTError(t, p.post(t, "/v2/models/count/infer", `{"inputs":[{"name":"N","datatype":"INT32","shape":[1],"data":[3]},{"name":"STREAM","datatype":"BOOL","shape":[1],"data":[true]}]}`), 400,
				"Streaming is not supported for this endpoint")
		})
	}
}
