package suite

import (
	"fmt"
	"slices"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
)

// decoupledChecks hold decoupled models (ModelConfig model_transaction_policy.decoupled) to
// Triton's behaviour (kserve.md §1.6): zero or more responses per streamed request, the last one
// marked triton_final_response, an empty final only on request, and no unary ModelInfer.
func decoupledChecks() []Check {
	return []Check{
		{ID: "decoupled.repeat", Title: "repeat_int32 streams one response per IN element (OUT = IN[i], IDX = i), the last marked final", Class: TritonExtension, Cite: triton("user_guide/decoupled_models.md", "In order to run inference on a decoupled model, the client must use the bi-directional streaming RPC."), Item: 52, Run: func(t *T) {
			m := t.repeatModel()
			withFinal := repeatRequest(m, "conformance-repeat-1", []int32{100, 101, 102, 103, 104}, true)
			without := repeatRequest(m, "conformance-repeat-2", []int32{7, 8, 9}, false)
			s := t.streamRun(nil, withFinal, without)
			t.expectCleanEnd(s, "two repeat_int32 requests")
			byID := groupByID(t, s, withFinal.Id, without.Id)
			checkRepeat(t, withFinal.Id, byID[withFinal.Id], []int32{100, 101, 102, 103, 104}, true)
			checkRepeat(t, without.Id, byID[without.Id], []int32{7, 8, 9}, false)
			t.Note("%d and %d responses, correlated by id", len(byID[withFinal.Id]), len(byID[without.Id]))
		}},
		{ID: "decoupled.empty-final", Title: "repeat_int32 with IN shape [0] and triton_enable_empty_final_response answers exactly one empty final response", Class: TritonExtension, Cite: triton("user_guide/decoupled_models.md", "In these cases where no response is sent by the backend, the streaming GRPC client can opt-in to receive an empty final response for each request."), Item: 52, Run: func(t *T) {
			m := t.repeatModel()
			req := repeatRequest(m, "conformance-repeat-empty", nil, true)
			s := t.streamRun(nil, req)
			t.expectCleanEnd(s, "repeat_int32 with IN shape [0]")
			if len(s.responses) != 1 {
				t.Fail("exactly one response (the empty final)", describeStreamed(s))
			}
			r := s.responses[0]
			if r.GetErrorMessage() != "" {
				t.Fail("no error_message", r.GetErrorMessage())
			}
			resp := r.GetInferResponse()
			equal(t, "empty final response id", req.Id, resp.GetId())
			if len(resp.GetOutputs()) != 0 || len(resp.GetRawOutputContents()) != 0 {
				t.Fail("an empty final response: no outputs", fmt.Sprintf("%d outputs", len(resp.GetOutputs())))
			}
			final, ok := finalFlag(resp)
			if !ok {
				t.missingFinal("the empty final response", resp)
			} else if !final {
				t.Fail("the empty final response has triton_final_response = true", "false")
			}
		}},
		{ID: "decoupled.model-infer-rejected", Title: "ModelInfer on a decoupled model is UNIMPLEMENTED", Class: TritonExtension, Cite: triton("user_guide/decoupled_models.md", "Even standard ModelInfer RPC in the GRPC endpoint does not support decoupled responses."), Item: 53, Run: func(t *T) {
			t.requireConfig()
			var m *model
			for _, x := range t.env.models {
				if x.decoupled() && (m == nil || x.name == "repeat_int32") {
					m = x
				}
			}
			if m == nil {
				t.Skip("no model is decoupled according to ModelConfig")
			}
			_, err := t.infer(validRequest(m))
			s := t.expectCode(err, fmt.Sprintf("ModelInfer on decoupled model '%s'", m.name), codes.Unimplemented)
			if t.isTriton() {
				t.expectContains(s, "ModelInfer on a decoupled model", "doesn't support models with decoupled transaction policy")
			}
			t.Note("model '%s'", m.name)
		}},
	}
}

// repeatModel returns repeat_int32 when it is served with the tensors of Triton's example (IN
// INT32, DELAY UINT32, WAIT UINT32 -> OUT INT32, IDX UINT32) and is not known to be non-decoupled.
func (t *T) repeatModel() *model {
	m := t.model("repeat_int32")
	if m.config != nil && !m.decoupled() {
		t.Skip("'repeat_int32' is not decoupled according to its ModelConfig")
	}
	ins, outs := m.meta.GetInputs(), m.meta.GetOutputs()
	if !hasTensor(ins, "IN", "INT32") || !hasTensor(ins, "DELAY", "UINT32") || !hasTensor(ins, "WAIT", "UINT32") ||
		!hasTensor(outs, "OUT", "INT32") || !hasTensor(outs, "IDX", "UINT32") || len(ins) != 3 {
		t.Skip("'repeat_int32' does not have the tensors of Triton's example (IN, DELAY, WAIT -> OUT, IDX)")
	}
	return m
}

// repeatRequest asks repeat_int32 to send back in, one element per response, without delays.
func repeatRequest(m *model, id string, in []int32, emptyFinal bool) *inference.ModelInferRequest {
	shape := func(n int) []int64 {
		if m.maxBatch() > 0 {
			return []int64{1, int64(n)}
		}
		return []int64{int64(n)}
	}
	req := &inference.ModelInferRequest{ModelName: m.name, Id: id,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "IN", Datatype: "INT32", Shape: shape(len(in))},
			{Name: "DELAY", Datatype: "UINT32", Shape: shape(len(in))},
			{Name: "WAIT", Datatype: "UINT32", Shape: shape(1)},
		},
		RawInputContents: [][]byte{rawInt32s(in...), make([]byte, 4*len(in)), make([]byte, 4)},
	}
	if emptyFinal {
		req.Parameters = map[string]*inference.InferParameter{"triton_enable_empty_final_response": boolParameter(true)}
	}
	return req
}

// groupByID splits a stream's responses by request id, failing on errors and unknown ids.
func groupByID(t *T, s streamed, ids ...string) map[string][]*inference.ModelInferResponse {
	out := map[string][]*inference.ModelInferResponse{}
	for _, r := range s.responses {
		id := r.GetInferResponse().GetId()
		if r.GetErrorMessage() != "" {
			t.Fail(fmt.Sprintf("no error_message (request %q)", id), r.GetErrorMessage())
		}
		if !slices.Contains(ids, id) {
			t.Fail(fmt.Sprintf("responses with the request ids %v", ids), fmt.Sprintf("a response with id %q", id))
		}
		out[id] = append(out[id], r.GetInferResponse())
	}
	return out
}

// checkRepeat checks one request's responses from repeat_int32: one per element of in, in order,
// then, with emptyFinal, either the last data response or one more empty response marked final.
func checkRepeat(t *T, id string, resps []*inference.ModelInferResponse, in []int32, emptyFinal bool) {
	data, flagged := 0, true
	for i, r := range resps {
		what := fmt.Sprintf("request %q response %d of %d", id, i+1, len(resps))
		last := i == len(resps)-1
		final, ok := finalFlag(r)
		if !ok {
			if flagged {
				t.missingFinal(what, r)
			}
			flagged = false
		} else if final != last && (final || emptyFinal) {
			// Without the empty final, Triton leaves every response non-final when the model ends
			// with a flags-only final; only a final before the last response is wrong then.
			t.Fail(fmt.Sprintf("%s: triton_final_response = %v", what, last), fmt.Sprint(final))
		}
		if len(r.GetOutputs()) == 0 {
			if !last {
				t.Fail(what+": OUT and IDX (only the final response may be empty)", "no outputs")
			}
			if !emptyFinal {
				if t.isTriton() {
					t.Fail(what+": no empty final response without triton_enable_empty_final_response", "an empty response")
				}
				t.Warn("%s: an empty final response although the request did not ask for one", what)
			}
			continue
		}
		if data >= len(in) {
			t.Fail(fmt.Sprintf("request %q: %d data responses (one per IN element)", id, len(in)), fmt.Sprintf("more (%d responses)", len(resps)))
		}
		out, idx := int32s(outputBytes(t, r, "OUT")), int32s(outputBytes(t, r, "IDX"))
		equalSlices(t, what+" OUT", []int32{in[data]}, out)
		equalSlices(t, what+" IDX", []int32{int32(data)}, idx)
		data++
	}
	if data != len(in) {
		t.Fail(fmt.Sprintf("request %q: %d data responses (one per IN element)", id, len(in)), fmt.Sprint(data))
	}
	if emptyFinal && flagged && len(resps) > 0 {
		if final, _ := finalFlag(resps[len(resps)-1]); !final {
			t.Fail(fmt.Sprintf("request %q with triton_enable_empty_final_response: a last response with triton_final_response = true", id), "none marked final")
		}
	}
}
