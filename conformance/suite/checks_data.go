package suite

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
)

// dataChecks hold the tensor encodings at their edges (checklist items 34-36): BYTES elements that
// are empty, hold NUL or are not UTF-8; BOOL as one byte 0/1; tensors with no elements.
func dataChecks() []Check {
	return []Check{
		{ID: "data.bytes-roundtrip", Title: "empty, NUL-holding and non-UTF-8 BYTES elements come back byte-exact from an identity model", Class: Standard, Cite: v2proto("Representation for BYTES data type. The size must match what is expected by the tensor's shape. The contents must be the flattened, one-dimensional, row-major order of the tensor elements."), Item: 34, Run: func(t *T) {
			special := [][]byte{{}, []byte("a\x00b"), {0}, {0xff, 0xfe, 0x00, 0x01}, {0xc3, 0x28}, []byte("hello")}
			candidates := t.drivable(func(m *model) bool {
				ins, outs := m.meta.GetInputs(), m.meta.GetOutputs()
				return len(ins) == 1 && len(outs) == 1 && ins[0].GetDatatype() == "BYTES" && outs[0].GetDatatype() == "BYTES" &&
					slices.Equal(ins[0].GetShape(), outs[0].GetShape())
			})
			var tried []string
			for _, m := range candidates {
				probe := make([][]byte, len(special))
				for i := range probe {
					probe[i] = fmt.Appendf(nil, "conformance-probe-%d", i)
				}
				// A model that does not echo plain ASCII is not an identity: try the next one.
				if got, err := bytesThrough(t, m, probe); err != nil {
					tried = append(tried, fmt.Sprintf("'%s': %v", m.name, err))
					continue
				} else if !slices.EqualFunc(got, elementsFor(m, probe), bytes.Equal) {
					tried = append(tried, fmt.Sprintf("'%s' does not echo ASCII", m.name))
					continue
				}
				want := elementsFor(m, special)
				what := fmt.Sprintf("model '%s' (an identity on ASCII) echoing %s", m.name, quotedElems(want))
				got, err := bytesThrough(t, m, special)
				if err != nil {
					t.Fail(what, err.Error())
				}
				if !slices.EqualFunc(got, want, bytes.Equal) {
					t.Fail(what, quotedElems(got))
				}
				t.Note("model '%s': %s", m.name, quotedElems(want))
				return
			}
			t.Skip("no BYTES model with one input and one output of the same shape echoes its input (tried: %s)", listOrNone(tried))
		}},
		{ID: "data.bool", Title: "BOOL raw inputs 0x00/0x01 are accepted and BOOL outputs are one byte 0/1 per element", Class: Standard, Cite: v2("Tensor data types are shown in the following table along with the size of each type, in bytes."), Item: 35, Run: func(t *T) {
			m, i := t.pickInput("a BOOL input", nil, ofDatatype("BOOL"))
			req := validRequest(m)
			in := req.Inputs[i]
			// Four elements where a single input has a variable dimension, so both values are sent.
			if dims := zeroDims(m, m.meta.GetInputs()[i]); len(m.meta.GetInputs()) == 1 && len(dims) > 0 {
				in.Shape[dims[len(dims)-1]] = 4
			}
			n := int(elements(in.Shape))
			data := make([]byte, n)
			for k := range data {
				data[k] = byte(k % 2)
			}
			req.RawInputContents[i] = data
			resp := t.mustInfer(req)
			checkOutputSizes(t, m, resp)
			bools := 0
			for k, o := range resp.GetOutputs() {
				if o.GetDatatype() != "BOOL" {
					continue
				}
				bools++
				out, _ := outputData(resp, k)
				for j, b := range out {
					if b > 1 {
						t.Fail(fmt.Sprintf("model '%s' BOOL output '%s': bytes 0x00 or 0x01", m.name, o.GetName()), fmt.Sprintf("byte %d is 0x%02x", j, b))
					}
				}
				// An identity on BOOL must give the input back.
				ins, outs := m.meta.GetInputs(), m.meta.GetOutputs()
				if len(ins) == 1 && len(outs) == 1 && slices.Equal(ins[0].GetShape(), outs[0].GetShape()) && !bytes.Equal(out, data) {
					t.Warn("model '%s' has one BOOL input and output of the same shape but does not echo %x (got %x): not an identity?", m.name, data, out)
				}
			}
			t.Note("model '%s' input '%s' %v; %d BOOL outputs", m.name, in.Name, in.Shape, bools)
		}},
		{ID: "data.zero-size", Title: "a 0 in a variable dimension is OK with empty outputs, or refused as INVALID_ARGUMENT, never a server fault", Class: Standard, Cite: citeUnsigned, Item: 36, Run: func(t *T) {
			// Prefer a variable dimension that is not the batch dimension.
			var m *model
			var withBatch bool
			for _, b := range []bool{false, true} {
				for _, c := range t.drivable() {
					if m == nil && slices.ContainsFunc(c.meta.GetInputs(), func(in *tensorMeta) bool { return len(zeroDims(c, in, b)) > 0 }) {
						m, withBatch = c, b
					}
				}
			}
			if m == nil {
				t.Skip("no model the suite can drive has a variable (-1) input dimension")
			}
			req := validRequest(m)
			var shapes []string
			for i, in := range req.Inputs {
				for _, d := range zeroDims(m, m.meta.GetInputs()[i], withBatch) {
					in.Shape[d] = 0
				}
				req.RawInputContents[i] = fill(in.Datatype, int(elements(in.Shape)))
				shapes = append(shapes, fmt.Sprintf("%s %v", in.Name, in.Shape))
			}
			resp, err := t.infer(req)
			if err != nil {
				// A 0 is a valid dimension; a model may still refuse it, as the client's problem.
				s := t.expectRefusal(err, inferWhat(m, "zero-size inputs %v", shapes), codes.InvalidArgument, "")
				t.Note("model '%s' refuses %v: %s", m.name, shapes, describeErr(s.Err()))
				return
			}
			checkOutputSizes(t, m, resp)
			var outs []string
			for _, o := range resp.GetOutputs() {
				outs = append(outs, fmt.Sprintf("%s %v", o.GetName(), o.GetShape()))
			}
			t.Note("model '%s' accepts %v: outputs %v", m.name, shapes, outs)
		}},
	}
}

// zeroDims returns the indexes of in's variable dimensions that a zero-size request sets to 0:
// those past the batch dimension, or with batch also the batch dimension of a batching model.
func zeroDims(m *model, in *tensorMeta, batch ...bool) []int {
	withBatch := len(batch) > 0 && batch[0]
	var dims []int
	for d, n := range in.GetShape() {
		if n == -1 && (withBatch || d > 0 || m.maxBatch() <= 0) {
			dims = append(dims, d)
		}
	}
	return dims
}

// elementsFor is what a request built by bytesThrough sends: elems, repeated or cut to fill an
// input without a variable dimension past the batch dimension.
func elementsFor(m *model, elems [][]byte) [][]byte {
	shape := bytesShape(m, len(elems))
	out := make([][]byte, elements(shape))
	for i := range out {
		out[i] = elems[i%len(elems)]
	}
	return out
}

// bytesShape is the shape bytesThrough sends to m's only input for n elements: its last variable
// dimension past the batch dimension set to n, other variable dimensions 1.
func bytesShape(m *model, n int) []int64 {
	in := m.meta.GetInputs()[0]
	shape := inputShape(m, in)
	if dims := zeroDims(m, in); len(dims) > 0 {
		shape[dims[len(dims)-1]] = int64(n)
	}
	return shape
}

// bytesThrough sends elems (see elementsFor) through m's only BYTES input and returns the
// elements of its only output.
func bytesThrough(t *T, m *model, elems [][]byte) ([][]byte, error) {
	in, out := m.meta.GetInputs()[0], m.meta.GetOutputs()[0]
	req := &inference.ModelInferRequest{ModelName: m.name,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: in.GetName(), Datatype: "BYTES", Shape: bytesShape(m, len(elems))}},
		RawInputContents: [][]byte{frame(elementsFor(m, elems)...)}}
	resp, err := t.infer(req)
	if err != nil {
		return nil, fmt.Errorf("%s", describeErr(err))
	}
	_, data, err := outputByName(resp, out.GetName())
	if err != nil {
		return nil, err
	}
	return unframe(data)
}
