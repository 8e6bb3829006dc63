package suite

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Helpers of the infer, validate, data and params checks.

type tensorMeta = inference.ModelMetadataResponse_TensorMetadata

// drivable returns every model the suite can drive with synthesized requests (the rules of
// generic: not decoupled, not a sequence model, inputs of known datatypes and computable shapes)
// that passes every filter, Triton's simple first, then by name. Unlike generic it does not skip.
func (t *T) drivable(filters ...func(*model) bool) []*model {
	var found []*model
	for _, m := range t.env.models {
		if m.decoupled() || m.sequence() || len(m.meta.GetInputs()) == 0 {
			continue
		}
		ok := true
		for _, in := range m.meta.GetInputs() {
			if _, known := datatypes[in.GetDatatype()]; !known || elements(inputShape(m, in)) < 0 {
				ok = false
			}
		}
		for _, f := range filters {
			ok = ok && f(m)
		}
		if ok {
			found = append(found, m)
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].name == "simple" && found[j].name != "simple" })
	return found
}

// requireDrivable is drivable that skips the check when no model qualifies.
func (t *T) requireDrivable(why string, filters ...func(*model) bool) []*model {
	ms := t.drivable(filters...)
	if len(ms) == 0 {
		t.Skip("no model fits this check (non-decoupled, non-sequence, inputs of known datatypes%s)", why)
	}
	return ms
}

// inputPred selects an input of a model.
type inputPred func(m *model, in *tensorMeta) bool

// findInput returns the first drivable model, and the index of its first input, that satisfies a
// predicate, trying the predicates in order of preference. filters narrow the models.
func (t *T) findInput(filters []func(*model) bool, preds ...inputPred) (*model, int, bool) {
	ms := t.drivable(filters...)
	for _, p := range preds {
		for _, m := range ms {
			for i, in := range m.meta.GetInputs() {
				if p(m, in) {
					return m, i, true
				}
			}
		}
	}
	return nil, 0, false
}

// pickInput is findInput that skips the check, saying what was missing, when nothing fits.
func (t *T) pickInput(why string, filters []func(*model) bool, preds ...inputPred) (*model, int) {
	m, i, ok := t.findInput(filters, preds...)
	if !ok {
		t.Skip("no model the suite can drive has %s", why)
	}
	return m, i
}

// hasTypedField reports whether datatype dt has an InferTensorContents field (all but FP16, BF16).
func hasTypedField(dt string) bool {
	_, known := datatypes[dt]
	return known && dt != "FP16" && dt != "BF16"
}

// allInputsTyped is a model filter: every input can be sent as typed contents.
func allInputsTyped(m *model) bool {
	for _, in := range m.meta.GetInputs() {
		if !hasTypedField(in.GetDatatype()) {
			return false
		}
	}
	return true
}

// ofDatatype is an input predicate: the input's datatype is one of dts.
func ofDatatype(dts ...string) inputPred {
	return func(_ *model, in *tensorMeta) bool { return slices.Contains(dts, in.GetDatatype()) }
}

// typedRequest is validRequest with every input's data in typed contents instead of raw.
func typedRequest(m *model) (*inference.ModelInferRequest, error) {
	req := validRequest(m)
	for i, in := range req.Inputs {
		c, err := toTyped(in.GetDatatype(), req.RawInputContents[i])
		if err != nil {
			return nil, fmt.Errorf("input '%s': %w", in.GetName(), err)
		}
		in.Contents = c
	}
	req.RawInputContents = nil
	return req, nil
}

// mustTyped is typedRequest that fails the check on an encoding error (a suite bug).
func (t *T) mustTyped(m *model) *inference.ModelInferRequest {
	req, err := typedRequest(m)
	if err != nil {
		t.Failf("building a typed request for model '%s': %v", m.name, err)
	}
	return req
}

// expectInvalid sends req, which breaks one input rule, and holds the answer to expectRefusal
// with INVALID_ARGUMENT preferred.
func (t *T) expectInvalid(req *inference.ModelInferRequest, what, phrase string) *status.Status {
	_, err := t.infer(req)
	return t.expectRefusal(err, what, codes.InvalidArgument, phrase)
}

// clientCodes are the codes that put a refusal down to the request. KServe v2 says only that
// "other codes indicate failure"; google.rpc.Code gives these four to a client's mistake.
var clientCodes = []codes.Code{codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.OutOfRange}

// expectRefusal holds err, the answer to a request the server must refuse, to what the v2 text
// and google.rpc.Code say: OK fails (the request breaks the rule the check cites), want passes
// (on Triton its message must contain phrase, Triton's documented text, unless phrase is
// empty), another client code warns, and a server-fault code (INTERNAL, UNKNOWN, ...) fails: it
// blames the server for the client's mistake. It returns the status for notes.
func (t *T) expectRefusal(err error, what string, want codes.Code, phrase string) *status.Status {
	s, _ := status.FromError(err)
	switch {
	case s.Code() == codes.OK:
		t.Fail(what+": a refusal ("+codeName(want)+")", "OK")
	case s.Code() == want:
		if phrase != "" && t.isTriton() {
			t.expectContains(s, what, phrase)
		}
	case slices.Contains(clientCodes, s.Code()):
		t.Warn("%s: %s instead of %s, which google.rpc.Code gives to this case", what, describeErr(err), codeName(want))
	default:
		t.Fail(fmt.Sprintf("%s: a refusal with a client-error code (%s preferred)", what, codeName(want)), describeErr(err)+"; "+faultMeaning(s.Code()))
	}
	return s
}

// preferRefusal is expectRefusal for requests the v2 text does not forbid: OK is a warning.
func (t *T) preferRefusal(err error, what string, want codes.Code, phrase, whyOK string) *status.Status {
	if err == nil {
		t.Warn("%s: OK; %s prefers %s (%s)", what, "google.rpc.Code", codeName(want), whyOK)
		return status.New(codes.OK, "")
	}
	return t.expectRefusal(err, what, want, phrase)
}

// faultMeaning says, quoting google.rpc.Code, why code is wrong for a refused request.
func faultMeaning(c codes.Code) string {
	switch c {
	case codes.Internal:
		return internalMeaning
	case codes.Unknown:
		return unknownMeaning
	case codes.Unimplemented:
		return `google.rpc.Code UNIMPLEMENTED: "The operation is not implemented or is not supported/enabled in this service." (the operation is, the request is wrong)`
	case codes.DeadlineExceeded, codes.Canceled:
		return "the server did not answer in time"
	}
	return "a code google.rpc.Code does not give to a client's invalid request"
}

// noteRefusal notes the model a validation check used and the server's answer.
func (t *T) noteRefusal(m *model, s *status.Status) {
	t.Note("model '%s': %s", m.name, describeErr(s.Err()))
}

// inferWhat names a ModelInfer call on m for failure messages.
func inferWhat(m *model, format string, args ...any) string {
	return fmt.Sprintf("ModelInfer('%s') with ", m.name) + fmt.Sprintf(format, args...)
}

// outputSizeProblem describes how an output's data disagrees with its datatype and shape, or is
// empty when they agree: raw length prod(shape) * size, or prod(shape) framed BYTES elements.
func outputSizeProblem(o *inference.ModelInferResponse_InferOutputTensor, data []byte) string {
	n := elements(o.GetShape())
	if n < 0 {
		return fmt.Sprintf("output '%s' has shape %v with a negative dimension", o.GetName(), o.GetShape())
	}
	size, known := datatypes[o.GetDatatype()]
	if !known {
		return fmt.Sprintf("output '%s' has datatype %q, not one of the 13 KServe datatypes", o.GetName(), o.GetDatatype())
	}
	if size == 0 {
		elems, err := unframe(data)
		if err != nil {
			return fmt.Sprintf("output '%s' is not framed BYTES data: %v", o.GetName(), err)
		}
		if int64(len(elems)) != n {
			return fmt.Sprintf("output '%s' (BYTES, shape %v): %d framed elements, want %d", o.GetName(), o.GetShape(), len(elems), n)
		}
		return ""
	}
	if int64(len(data)) != n*int64(size) {
		return fmt.Sprintf("output '%s' (%s, shape %v): %d bytes, want %d", o.GetName(), o.GetDatatype(), o.GetShape(), len(data), n*int64(size))
	}
	return ""
}

// checkOutputSizes fails the check when an output of resp disagrees with its own shape and
// datatype or has no data.
func checkOutputSizes(t *T, m *model, resp *inference.ModelInferResponse) {
	for i, o := range resp.GetOutputs() {
		data, err := outputData(resp, i)
		if err != nil {
			t.Fail(fmt.Sprintf("model '%s' output '%s': data in raw_output_contents or contents", m.name, o.GetName()), err.Error())
		}
		if p := outputSizeProblem(o, data); p != "" {
			t.Fail(fmt.Sprintf("model '%s': output data matching its shape and datatype", m.name), p)
		}
	}
}

// shapeFits reports whether shape is an instance of the metadata shape meta (same rank, equal
// fixed dimensions).
func shapeFits(meta, shape []int64) bool {
	if len(meta) != len(shape) {
		return false
	}
	for i, d := range meta {
		if d != -1 && d != shape[i] {
			return false
		}
	}
	return true
}

// requiredInput reports whether the model's config (when it has one) does not mark in optional.
func requiredInput(m *model, in *tensorMeta) bool {
	for _, c := range m.config.GetInput() {
		if c.GetName() == in.GetName() {
			return !c.GetOptional()
		}
	}
	return true
}

// inferParam wraps v (bool, int64, string, float64 or uint64) as an InferParameter.
func inferParam(v any) *inference.InferParameter {
	p := &inference.InferParameter{}
	switch v := v.(type) {
	case bool:
		p.ParameterChoice = &inference.InferParameter_BoolParam{BoolParam: v}
	case int64:
		p.ParameterChoice = &inference.InferParameter_Int64Param{Int64Param: v}
	case string:
		p.ParameterChoice = &inference.InferParameter_StringParam{StringParam: v}
	case float64:
		p.ParameterChoice = &inference.InferParameter_DoubleParam{DoubleParam: v}
	case uint64:
		p.ParameterChoice = &inference.InferParameter_Uint64Param{Uint64Param: v}
	default:
		panic(fmt.Sprintf("inferParam: unsupported %T", v))
	}
	return p
}

// quotedElems renders byte strings for messages, escaping NUL and non-UTF-8 bytes.
func quotedElems(elems [][]byte) string {
	q := make([]string, len(elems))
	for i, e := range elems {
		q[i] = fmt.Sprintf("%q", e)
	}
	return "[" + strings.Join(q, " ") + "]"
}
