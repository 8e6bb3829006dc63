package suite

import (
	"fmt"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
)

// streamChecks hold Triton's ModelStreamInfer (kserve.md §1.6) on non-decoupled models: pipelined
// requests answered in order and marked final, errors reported in-band without ending the stream,
// and the triton_grpc_error header that turns them into the stream's status.
func streamChecks() []Check {
	return []Check{
		{ID: "stream.pipelined", Title: "10 pipelined stream requests get 10 responses in order, ids echoed, each triton_final_response=true", Class: TritonExtension, Cite: citeFinal, Item: 49, Run: func(t *T) {
			m := t.generic()
			ref := t.mustInfer(validRequest(m))
			const n = 10
			reqs := make([]*inference.ModelInferRequest, n)
			for i := range reqs {
				reqs[i] = validRequest(m)
				reqs[i].Id = fmt.Sprintf("conformance-pipelined-%d", i)
			}
			s := t.streamRun(nil, reqs...)
			t.expectCleanEnd(s, "10 pipelined requests")
			if len(s.responses) != n {
				t.Fail(fmt.Sprintf("%d responses to %d requests", n, n), fmt.Sprintf("%d", len(s.responses)))
			}
			for i, r := range s.responses {
				what := fmt.Sprintf("stream response %d", i+1)
				if r.GetErrorMessage() != "" {
					t.Fail(what+": no error_message", r.GetErrorMessage())
				}
				resp := r.GetInferResponse()
				equal(t, what+" id (responses in request order)", reqs[i].Id, resp.GetId())
				equal(t, what+" model_name", m.name, resp.GetModelName())
				sameOutputs(t, what, ref, resp)
				final, ok := finalFlag(resp)
				if !ok {
					t.missingFinal(what, resp)
				} else if !final {
					t.Fail(what+": triton_final_response = true (a non-decoupled model's only response)", "false")
				}
			}
			t.Note("model '%s'", m.name)
		}},
		{ID: "stream.error-continues", Title: "a bad stream request gets an error_message with its id and the stream goes on", Class: TritonExtension, Cite: triton("protocol/extension_sequence.md", "The message describing the error. The empty message indicates the inference was successful without errors."), Item: 50, Run: func(t *T) {
			m := t.generic()
			good1, good2 := validRequest(m), validRequest(m)
			good1.Id, good2.Id = "conformance-good-1", "conformance-good-3"
			bad := validRequest(m)
			bad.Id, bad.ModelName = "conformance-bad-2", unknownModel
			s := t.streamRun(nil, good1, bad, good2)
			t.expectCleanEnd(s, "good, bad (unknown model), good")
			byID := map[string]*inference.ModelStreamInferResponse{}
			var ids []string
			for _, r := range s.responses {
				id := r.GetInferResponse().GetId()
				ids = append(ids, fmt.Sprintf("%q", id))
				if byID[id] != nil {
					t.Fail("one response per request", fmt.Sprintf("two responses with id %q", id))
				}
				byID[id] = r
			}
			if len(s.responses) != 3 {
				t.Fail("3 responses to 3 requests", fmt.Sprintf("%d, ids %v", len(s.responses), ids))
			}
			r := byID[bad.Id]
			if r == nil {
				t.Fail(fmt.Sprintf("an error response with infer_response.id %q", bad.Id), fmt.Sprintf("responses with ids %v", ids))
			}
			if r.GetErrorMessage() == "" {
				t.Fail("a non-empty error_message for the request to an unknown model", "none")
			}
			for _, g := range []*inference.ModelInferRequest{good1, good2} {
				r := byID[g.Id]
				if r == nil {
					t.Fail(fmt.Sprintf("a response with id %q", g.Id), fmt.Sprintf("responses with ids %v", ids))
				}
				if r.GetErrorMessage() != "" {
					t.Fail(fmt.Sprintf("request %q succeeds", g.Id), r.GetErrorMessage())
				}
				if len(r.GetInferResponse().GetOutputs()) == 0 {
					t.Fail(fmt.Sprintf("request %q answered with outputs", g.Id), "none")
				}
			}
			t.Note("error_message: %s", r.GetErrorMessage())
		}},
		{ID: "stream.grpc-error-header", Title: "with metadata triton_grpc_error=true a bad request ends the stream with its gRPC status", Class: TritonExtension, Cite: triton("customization_guide/inference_protocols.md", "Upon encountering an error, Triton returns the appropriate GRPC error code and subsequently closes the stream."), Item: 51, Run: func(t *T) {
			m := t.generic()
			good := validRequest(m)
			good.Id = "conformance-good-1"
			bad := validRequest(m)
			bad.Id, bad.ModelName = "conformance-bad-2", unknownModel
			s := t.streamRun([]string{"triton_grpc_error", "true"}, good, bad)
			// The good request's response may or may not beat the bad request's end of the stream.
			for i, r := range s.responses {
				if i > 0 || r.GetErrorMessage() != "" || r.GetInferResponse().GetId() != good.Id {
					t.Fail(fmt.Sprintf("at most a successful response to %q, then the stream ends with the bad request's gRPC status", good.Id), describeStreamed(s))
				}
			}
			if s.end == nil {
				t.Fail("the stream ends with NOT_FOUND or INVALID_ARGUMENT", "OK")
			}
			t.expectCode(s.end, "the stream's status after a request to an unknown model", codes.NotFound, codes.InvalidArgument)
			t.Note("stream ended with %s", describeErr(s.end))
		}},
	}
}

func describeResponse(r *inference.ModelStreamInferResponse) string {
	if r.GetErrorMessage() != "" {
		return fmt.Sprintf("error_message %q (id %q)", r.GetErrorMessage(), r.GetInferResponse().GetId())
	}
	return fmt.Sprintf("a response with id %q and %d outputs", r.GetInferResponse().GetId(), len(r.GetInferResponse().GetOutputs()))
}

func describeStreamed(s streamed) string {
	out := fmt.Sprintf("%d responses", len(s.responses))
	for _, r := range s.responses {
		out += "; " + describeResponse(r)
	}
	return out + "; end " + describeErr(s.end)
}
