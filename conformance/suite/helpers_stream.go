package suite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Helpers of the transport, config, stream, decoupled and sequence checks.

// streamWait bounds how long a stream check waits for the server to finish a stream after the
// client half-closed it; a server that never ends a stream fails the check before its timeout.
const streamWait = 10 * time.Second

// paramFinal is the response parameter that marks the last response of a streamed request.
const paramFinal = "triton_final_response"

// streamed is what one ModelStreamInfer call brought back.
type streamed struct {
	responses []*inference.ModelStreamInferResponse
	// end is the status the stream ended with: nil for a clean end (io.EOF after the client's
	// half-close).
	end error
}

// streamRun opens a ModelStreamInfer stream (with the gRPC metadata in md, key-value pairs), sends
// every request without waiting for responses, half-closes and reads until the server ends the
// stream. A server without ModelStreamInfer skips the check. The stream never outlives the call.
func (t *T) streamRun(md []string, reqs ...*inference.ModelInferRequest) streamed {
	ctx, cancel := context.WithTimeout(t.ctx, streamWait)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	stream, err := t.client().ModelStreamInfer(ctx)
	if err != nil {
		t.skipUnimplementedStream(err)
		t.Fail("ModelStreamInfer: a stream", describeErr(err))
	}
	for _, req := range reqs {
		// A send fails only when the stream has ended; Recv below says why.
		if stream.Send(req) != nil {
			break
		}
	}
	_ = stream.CloseSend()
	var out streamed
	for {
		r, err := stream.Recv()
		if err == nil {
			out.responses = append(out.responses, r)
			if len(out.responses) > 100000 {
				t.Failf("ModelStreamInfer sent more than 100000 responses for %d requests", len(reqs))
			}
			continue
		}
		if errors.Is(err, io.EOF) {
			return out
		}
		if len(out.responses) == 0 {
			t.skipUnimplementedStream(err)
		}
		if status.Code(err) == codes.DeadlineExceeded && t.ctx.Err() == nil {
			t.Fail(fmt.Sprintf("ModelStreamInfer ends within %s of the client's half-close", streamWait),
				fmt.Sprintf("still open after %d responses", len(out.responses)))
		}
		out.end = err
		return out
	}
}

func (t *T) skipUnimplementedStream(err error) {
	if status.Code(err) == codes.Unimplemented {
		t.Skip("the server does not implement ModelStreamInfer: %s", describeErr(err))
	}
}

// expectCleanEnd fails the check unless the stream ended with OK.
func (t *T) expectCleanEnd(s streamed, what string) {
	if s.end != nil {
		t.Fail(what+": stream ends with OK after the client's half-close",
			fmt.Sprintf("%s after %d responses", describeErr(s.end), len(s.responses)))
	}
}

// finalFlag returns the triton_final_response parameter of a stream response and whether it is
// there as a bool_param.
func finalFlag(r *inference.ModelInferResponse) (final, present bool) {
	p, ok := r.GetParameters()[paramFinal]
	if !ok {
		return false, false
	}
	b, isBool := p.GetParameterChoice().(*inference.InferParameter_BoolParam)
	if !isBool {
		return false, false
	}
	return b.BoolParam, true
}

// missingFinal reports a stream response without triton_final_response: a failure on Triton,
// which documents the parameter on every response, a warning elsewhere.
func (t *T) missingFinal(what string, r *inference.ModelInferResponse) {
	p := r.GetParameters()[paramFinal]
	got := "no such parameter"
	if p != nil {
		got = fmt.Sprintf("%v", p.GetParameterChoice())
	}
	if t.isTriton() {
		t.Fail(what+": parameters[\""+paramFinal+"\"] as a bool_param", got)
	}
	t.Warn("%s: no bool_param %s (%s); Triton sets it on every stream response", what, paramFinal, got)
}

func boolParameter(v bool) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: v}}
}

func int64Parameter(v int64) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
}

func stringParameter(v string) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: v}}
}

// sameOutputs fails the check unless got has the outputs of want: same names, datatypes, shapes and
// data, in the same order.
func sameOutputs(t *T, what string, want, got *inference.ModelInferResponse) {
	if len(want.GetOutputs()) != len(got.GetOutputs()) {
		t.Fail(fmt.Sprintf("%s: %d outputs", what, len(want.GetOutputs())), fmt.Sprintf("%d", len(got.GetOutputs())))
	}
	for i, w := range want.GetOutputs() {
		g := got.GetOutputs()[i]
		if w.GetName() != g.GetName() || w.GetDatatype() != g.GetDatatype() || !slices.Equal(w.GetShape(), g.GetShape()) {
			t.Fail(fmt.Sprintf("%s: output %d '%s' %s %v", what, i, w.GetName(), w.GetDatatype(), w.GetShape()),
				fmt.Sprintf("'%s' %s %v", g.GetName(), g.GetDatatype(), g.GetShape()))
		}
		wd, err := outputData(want, i)
		if err != nil {
			t.Fail(fmt.Sprintf("%s: reference output '%s' with data", what, w.GetName()), err.Error())
		}
		gd, err := outputData(got, i)
		if err != nil {
			t.Fail(fmt.Sprintf("%s: output '%s' with data", what, g.GetName()), err.Error())
		}
		if !bytes.Equal(wd, gd) {
			t.Fail(fmt.Sprintf("%s: output '%s' equal to the reference call's (%d bytes)", what, w.GetName(), len(wd)),
				fmt.Sprintf("%d bytes, first difference at byte %d", len(gd), firstDiff(wd, gd)))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// largeTarget is a model input that can be made as large as a check needs.
type largeTarget struct {
	m *model
	// in is the index of the input to grow, dim the index of its variable dimension.
	in, dim int
	// identity is true when the model looks like an identity (one input, one output, same datatype
	// and shape), so its output must equal the input byte for byte.
	identity bool
}

// largeInputModel finds the non-decoupled, non-sequence model best suited to a large input: exactly
// one input with a variable (-1) non-batch dimension of a fixed-size datatype, every other input
// synthesizable. Identity-like models come first, then FP32 inputs. ok is false when none fits.
func (t *T) largeInputModel() (largeTarget, bool) {
	var best largeTarget
	bestScore := -1
	for _, m := range t.env.models {
		if m.decoupled() || m.sequence() || len(m.meta.GetInputs()) == 0 {
			continue
		}
		target, flexible, ok := largeTarget{m: m, in: -1, dim: -1}, 0, true
		for i, in := range m.meta.GetInputs() {
			if _, known := datatypes[in.GetDatatype()]; !known {
				ok = false
			}
			dim := variableDim(m, in.GetShape())
			if dim < 0 {
				continue
			}
			flexible++
			if datatypes[in.GetDatatype()] > 0 {
				target.in, target.dim = i, dim
			}
		}
		if !ok || flexible != 1 || target.in < 0 {
			continue
		}
		in := m.meta.GetInputs()[target.in]
		outs := m.meta.GetOutputs()
		target.identity = len(m.meta.GetInputs()) == 1 && len(outs) == 1 &&
			outs[0].GetDatatype() == in.GetDatatype() && slices.Equal(outs[0].GetShape(), in.GetShape())
		score := 0
		if target.identity {
			score += 2
		}
		if in.GetDatatype() == "FP32" {
			score++
		}
		if score > bestScore {
			best, bestScore = target, score
		}
	}
	return best, bestScore >= 0
}

// variableDim is the index of the first -1 in shape that is not the batch dimension, or -1. Without
// a config the batch dimension is unknown, so a leading -1 of a shape with more dimensions is
// taken to be one.
func variableDim(m *model, shape []int64) int {
	first := 0
	if m.maxBatch() > 0 || (m.config == nil && len(shape) > 1) {
		first = 1
	}
	for i := first; i < len(shape); i++ {
		if shape[i] == -1 {
			return i
		}
	}
	return -1
}

// largeRequest is a valid request for target whose grown input holds about size bytes (at least one
// element): its variable dimension is stretched, its data a pattern of small values that shows any
// shifted or reordered block.
func largeRequest(target largeTarget, size int) (*inference.ModelInferRequest, []byte) {
	req := validRequest(target.m)
	in := req.Inputs[target.in]
	rest := int64(1)
	for i, d := range in.Shape {
		if i != target.dim {
			rest *= d
		}
	}
	esize := datatypes[in.Datatype]
	n := max(int64(size)/(int64(esize)*max(rest, 1)), 1)
	in.Shape[target.dim] = n
	data := patternData(in.Datatype, int(elements(in.Shape)))
	req.RawInputContents[target.in] = data
	return req, data
}

// patternData is n elements of a fixed-size datatype with values i mod 97 (BOOL: i mod 2), each
// exact in every datatype.
func patternData(dt string, n int) []byte { return pattern(dt, n, 97) }

// configTypeName is the model_config.proto DataType name of a KServe datatype: TYPE_ and the
// datatype, but TYPE_STRING for BYTES.
func configTypeName(datatype string) string {
	if datatype == "BYTES" {
		return "TYPE_STRING"
	}
	return "TYPE_" + datatype
}

// sequenceControls are the names of the control inputs of a sequence model's config, which the
// server supplies: the suite never sends them, whether or not metadata lists them.
func sequenceControls(m *model) []string {
	var names []string
	for _, c := range m.config.GetSequenceBatching().GetControlInput() {
		names = append(names, c.GetName())
	}
	return names
}

// sequenceModel is the sequence-batching model the sequence checks use: simple_sequence when
// served, else the first one.
func (t *T) sequenceModel() *model {
	t.requireConfig()
	var found *model
	for _, m := range t.env.models {
		if !m.sequence() || m.decoupled() {
			continue
		}
		if m.name == "simple_sequence" {
			return m
		}
		if found == nil {
			found = m
		}
	}
	if found == nil {
		t.Skip("no model has sequence_batching in its ModelConfig")
	}
	return found
}

// stringCorrelationID reports whether the model takes string sequence ids: its CORRID control is
// TYPE_STRING.
func stringCorrelationID(m *model) bool {
	for _, ci := range m.config.GetSequenceBatching().GetControlInput() {
		for _, c := range ci.GetControl() {
			if c.GetKind() == inference.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID &&
				c.GetDataType() == inference.DataType_TYPE_STRING {
				return true
			}
		}
	}
	return false
}

// sequenceRequest is a request of sequence id for m: its non-control inputs, with value v in every
// element of INT32 inputs (synthesized data otherwise), and the sequence flags.
func sequenceRequest(m *model, id int64, start, end bool, v int32) *inference.ModelInferRequest {
	req := &inference.ModelInferRequest{ModelName: m.name, Parameters: map[string]*inference.InferParameter{
		"sequence_id":    int64Parameter(id),
		"sequence_start": boolParameter(start),
		"sequence_end":   boolParameter(end),
	}}
	if stringCorrelationID(m) {
		req.Parameters["sequence_id"] = stringParameter(fmt.Sprint(id))
	}
	controls := sequenceControls(m)
	for _, in := range m.meta.GetInputs() {
		if slices.Contains(controls, in.GetName()) {
			continue
		}
		shape := inputShape(m, in)
		data := fill(in.GetDatatype(), int(elements(shape)))
		if in.GetDatatype() == "INT32" {
			vs := make([]int32, elements(shape))
			for i := range vs {
				vs[i] = v
			}
			data = rawInt32s(vs...)
		}
		req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: in.GetName(), Datatype: in.GetDatatype(), Shape: shape})
		req.RawInputContents = append(req.RawInputContents, data)
	}
	return req
}
