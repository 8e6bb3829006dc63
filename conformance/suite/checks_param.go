package suite

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// paramChecks hold request parameters (checklist items 38 and 54): custom keys of every kind must
// not crash a server; Triton reserves the triton_ prefix and checks the types of the keys it
// interprets.
func paramChecks() []Check {
	return []Check{
		{ID: "params.custom-kinds", Title: "a custom request parameter of each kind (bool, int64, string, double, uint64) is ignored, used or refused as INVALID_ARGUMENT, never a server fault", Class: Standard, Cite: v2("\"parameters\" : An object containing zero or more parameters for this inference request expressed as key/value pairs."), Item: 38, Run: func(t *T) {
			m := t.generic()
			var accepted, refused []string
			for _, k := range []struct {
				kind string
				p    *inference.InferParameter
			}{
				{"bool", inferParam(true)}, {"int64", inferParam(int64(-42))}, {"string", inferParam("conformance")},
				{"double", inferParam(0.5)}, {"uint64", inferParam(uint64(1) << 63)}, {"unset", &inference.InferParameter{}},
			} {
				req := validRequest(m)
				req.Parameters = map[string]*inference.InferParameter{"conformance_custom": k.p}
				_, err := t.infer(req)
				if err == nil {
					accepted = append(accepted, k.kind)
					continue
				}
				t.expectRefusal(err, inferWhat(m, "custom parameter 'conformance_custom' of kind %s", k.kind), codes.InvalidArgument, "")
				refused = append(refused, fmt.Sprintf("%s (%s)", k.kind, codeName(status.Code(err))))
			}
			t.Note("accepted: %s; refused: %s", listOrNone(accepted), listOrNone(refused))
		}},
		// Triton reserves triton_ keys on every version that has the rule, yet its extension list
		// does not reliably name "parameters": the check holds a server to the rule when it calls
		// itself Triton or advertises "parameters", and skips on other servers that take such a key
		// as a custom parameter.
		{ID: "params.reserved-prefix", Title: "an unknown request parameter starting with triton_ is INVALID_ARGUMENT", Class: TritonExtension, Cite: citeReserve, Item: 54, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.Parameters = map[string]*inference.InferParameter{"triton_conformance": inferParam(true)}
			what := inferWhat(m, "request parameter 'triton_conformance'")
			if !t.isTriton() && !t.env.ext["parameters"] {
				if _, err := t.infer(req); t.expectCode(err, what, codes.InvalidArgument, codes.OK).Code() == codes.OK {
					t.Skip("the server takes 'triton_conformance' as a custom parameter; it neither calls itself Triton nor lists the parameters extension")
				}
				return
			}
			t.noteRefusal(m, t.expectInvalid(req, what, "reserved for Triton usage"))
		}},
		{ID: "params.empty-final-type", Title: "triton_enable_empty_final_response as int64 on ModelStreamInfer is refused (error_message or INVALID_ARGUMENT)", Class: TritonExtension, Cite: citeReserve, Item: 54, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.Id = "conformance-empty-final-type"
			req.Parameters = map[string]*inference.InferParameter{"triton_enable_empty_final_response": inferParam(int64(1))}
			what := fmt.Sprintf("ModelStreamInfer('%s') with triton_enable_empty_final_response as int64_param", m.name)
			t.streamRefusal(req, what, "invalid value type")
		}},
		{ID: "params.wrong-type", Title: "sequence_start as a string parameter is INVALID_ARGUMENT", Class: TritonExtension, Cite: citeSeqStart, Item: 54, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.Parameters = map[string]*inference.InferParameter{"sequence_start": inferParam("true")}
			what := inferWhat(m, "sequence_start as string_param")
			if !t.isTriton() && !t.env.ext["sequence"] {
				if _, err := t.infer(req); t.expectCode(err, what, codes.InvalidArgument, codes.OK).Code() == codes.OK {
					t.Skip("the server takes sequence_start as a custom parameter; it neither calls itself Triton nor lists the sequence extension")
				}
				return
			}
			t.noteRefusal(m, t.expectInvalid(req, what, "invalid value type for 'sequence_start'"))
		}},
	}
}

// streamRefusal sends req alone on a ModelStreamInfer stream and fails the check unless the server
// refuses it: with an error_message response (Triton's default) or by ending the stream with
// INVALID_ARGUMENT. On Triton the message must contain phrase. It skips the check when the server
// has no ModelStreamInfer.
func (t *T) streamRefusal(req *inference.ModelInferRequest, what, phrase string) {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	stream, err := t.client().ModelStreamInfer(ctx)
	t.expectOK(err, "ModelStreamInfer")
	if err := stream.Send(req); err != nil && err != io.EOF {
		t.Fail("ModelStreamInfer send: OK", describeErr(err))
	}
	_ = stream.CloseSend()
	r, err := stream.Recv()
	if err != nil {
		s := t.expectCode(err, what, codes.InvalidArgument, codes.Unimplemented)
		if s.Code() == codes.Unimplemented {
			t.Skip("the server does not implement ModelStreamInfer: %s", describeErr(err))
		}
		if t.isTriton() {
			t.expectContains(s, what, phrase)
		}
		t.Note("stream ended with %s", describeErr(err))
		return
	}
	msg := r.GetErrorMessage()
	if msg == "" {
		t.Fail(what+": a response with error_message (or the stream ended with INVALID_ARGUMENT)", "a response without error_message")
	}
	if t.isTriton() && !strings.Contains(msg, phrase) {
		t.Fail(fmt.Sprintf("%s: error_message containing %q", what, phrase), msg)
	}
	t.Note("error_message: %s", msg)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
