package suite

import (
	"fmt"
	"slices"
	"strings"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// client is the server's gRPC inference client.
func (t *T) client() inference.GRPCInferenceServiceClient { return t.env.client }

// model returns the named model, skipping the check when the server does not serve it.
func (t *T) model(name string) *model {
	for _, m := range t.env.models {
		if m.name == name {
			return m
		}
	}
	t.Skip("the server has no model '%s'", name)
	return nil
}

// generic returns a model for checks that work on any model: not decoupled, not a sequence
// model, every input of a datatype the suite can synthesize, and passing every filter. Triton's
// `simple` is preferred when it qualifies, since its results are known.
func (t *T) generic(filters ...func(*model) bool) *model {
	found := t.drivable(filters...)
	if len(found) == 0 {
		t.Skip("no model fits this check (non-decoupled, non-sequence, inputs of known datatypes%s)", filterNote(filters))
	}
	return found[0]
}

func filterNote(filters []func(*model) bool) string {
	if len(filters) > 0 {
		return ", and the check's own requirements"
	}
	return ""
}

// requireExtension skips the check unless ServerMetadata advertises ext.
func (t *T) requireExtension(ext string) {
	if !t.env.ext[ext] {
		t.Skip("the server does not advertise the '%s' extension", ext)
	}
}

// requireConfig skips the check unless some model has a ModelConfig: max_batch_size, decoupled
// and sequence batching live there, in Triton's model_configuration extension, not in KServe v2.
func (t *T) requireConfig() {
	for _, m := range t.env.models {
		if m.config != nil {
			return
		}
	}
	t.Skip("no model has a ModelConfig (Triton's model_configuration extension, not part of KServe v2)")
}

// requireHTTP skips the check unless a REST URL was given.
func (t *T) requireHTTP() string {
	if t.env.cfg.HTTPURL == "" {
		t.Skip("no REST URL given (-http)")
	}
	return t.env.cfg.HTTPURL
}

// isTriton reports whether the server calls itself Triton, whose documented behaviour some
// checks then hold it to strictly (other servers get a warning for the same divergence).
func (t *T) isTriton() bool { return t.env.server.GetName() == "triton" }

// inputShape is the shape the suite sends for in: the metadata shape with every -1 as 1.
func inputShape(m *model, in *inference.ModelMetadataResponse_TensorMetadata) []int64 {
	shape := slices.Clone(in.GetShape())
	for i, d := range shape {
		if d == -1 {
			shape[i] = 1
		}
	}
	return shape
}

// validRequest builds a request the model must accept: every input with its metadata shape
// (-1 as 1) and synthesized raw data, no outputs named.
func validRequest(m *model) *inference.ModelInferRequest {
	req := &inference.ModelInferRequest{ModelName: m.name}
	for _, in := range m.meta.GetInputs() {
		shape := inputShape(m, in)
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{
			Name: in.GetName(), Datatype: in.GetDatatype(), Shape: shape,
		})
		req.RawInputContents = append(req.RawInputContents, fill(in.GetDatatype(), int(elements(shape))))
	}
	return req
}

// infer calls ModelInfer with the check's context.
func (t *T) infer(req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return t.client().ModelInfer(t.ctx, req)
}

// mustInfer calls ModelInfer and fails the check unless it succeeds.
func (t *T) mustInfer(req *inference.ModelInferRequest) *inference.ModelInferResponse {
	resp, err := t.infer(req)
	t.expectOK(err, fmt.Sprintf("ModelInfer on '%s'", req.GetModelName()))
	return resp
}

// expectOK fails the check when err is not nil.
func (t *T) expectOK(err error, what string) {
	if err != nil {
		t.Fail(what+": OK", describeErr(err))
	}
}

// expectCode fails the check unless err is a gRPC status with one of the codes in want. It
// returns the status for further checks of the message.
func (t *T) expectCode(err error, what string, want ...codes.Code) *status.Status {
	s, _ := status.FromError(err)
	if slices.Contains(want, s.Code()) {
		return s
	}
	names := make([]string, len(want))
	for i, c := range want {
		names[i] = codeName(c)
	}
	t.Fail(what+": "+strings.Join(names, " or "), describeErr(err))
	return nil
}

// expectContains fails the check unless the status message contains want.
func (t *T) expectContains(s *status.Status, what, want string) {
	if !strings.Contains(s.Message(), want) {
		t.Fail(fmt.Sprintf("%s: message containing %q", what, want), describeErr(s.Err()))
	}
}

// equal fails the check unless got equals want, describing what was compared.
func equal[V comparable](t *T, what string, want, got V) {
	if want != got {
		t.Fail(fmt.Sprintf("%s = %v", what, want), fmt.Sprintf("%v", got))
	}
}

// equalSlices fails the check unless got equals want element by element.
func equalSlices[V comparable](t *T, what string, want, got []V) {
	if !slices.Equal(want, got) {
		t.Fail(fmt.Sprintf("%s = %v", what, want), fmt.Sprintf("%v", got))
	}
}
