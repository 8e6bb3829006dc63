package suite

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
)

// validateChecks send requests that break one input rule each (checklist items 18-33 and 37). A
// refusal is required where the v2 text states the rule (standard) and preferred where it only
// follows from google.rpc.Code (recommended); INVALID_ARGUMENT is preferred, another client-error
// code warns, and a server-fault code such as INTERNAL fails (see expectRefusal). On Triton the
// message must carry the key phrase kserve.md documents. Each starts from validRequest, so only
// the broken rule can be the cause.
func validateChecks() []Check {
	return []Check{
		{ID: "validate.datatype-mismatch", Title: "an input declared with another datatype of the same size (FP32 for INT32) is refused (INVALID_ARGUMENT)", Class: Recommended, Cite: citeInvalid, Item: 18, Run: func(t *T) {
			m, i := t.pickInput("an input of a fixed-size datatype", nil,
				ofDatatype("INT32", "UINT32"), func(_ *model, in *tensorMeta) bool { return sameSizeDatatype[in.GetDatatype()] != "" })
			req := validRequest(m)
			in := req.Inputs[i]
			other := sameSizeDatatype[in.Datatype]
			what := inferWhat(m, "input '%s' declared %s (model expects %s, same element size)", in.Name, other, in.Datatype)
			in.Datatype = other
			t.noteRefusal(m, t.expectInvalid(req, what, "data-type is"))
		}},
		{ID: "validate.datatype-unknown", Title: "an input with datatype \"FOO\" is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeDtype, Item: 19, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.Inputs[0].Datatype = "FOO"
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "input '%s' declared \"FOO\"", req.Inputs[0].Name), "data-type is"))
		}},
		{ID: "validate.shape", Title: "an input of the wrong rank or size (e.g. [1,15] for [-1,16], [16] for a batching model) is refused (INVALID_ARGUMENT)", Class: Standard, Cite: v2("\"shape\" : The shape of the tensor. Variable-size dimensions are specified as -1."), Item: 20, Run: func(t *T) {
			m := t.generic()
			in := m.meta.GetInputs()[0]
			// One dimension more, data unchanged (the extra dimension is 1).
			req := validRequest(m)
			req.Inputs[0].Shape = append(req.Inputs[0].Shape, 1)
			t.expectInvalid(req, inferWhat(m, "input '%s' shape %v (metadata %v)", in.GetName(), req.Inputs[0].Shape, in.GetShape()), "unexpected shape")
			done := []string{fmt.Sprintf("'%s' %v", m.name, req.Inputs[0].Shape)}
			// A batching model's input without its batch dimension, data unchanged.
			if m.maxBatch() > 0 && len(in.GetShape()) > 0 {
				req := validRequest(m)
				req.Inputs[0].Shape = req.Inputs[0].Shape[1:]
				t.expectInvalid(req, inferWhat(m, "input '%s' shape %v without the batch dimension (max_batch_size %d)", in.GetName(), req.Inputs[0].Shape, m.maxBatch()), "")
				done = append(done, fmt.Sprintf("'%s' %v", m.name, req.Inputs[0].Shape))
			}
			// A fixed dimension off by one, with data for the wrong shape so that only the shape is wrong.
			if fm, i, ok := t.findInput(nil, func(m *model, in *tensorMeta) bool { return fixedDim(m, in) >= 0 }); ok {
				req := validRequest(fm)
				fin := fm.meta.GetInputs()[i]
				shape := req.Inputs[i].Shape
				d := fixedDim(fm, fin)
				if shape[d] > 1 {
					shape[d]--
				} else {
					shape[d]++
				}
				req.RawInputContents[i] = fill(fin.GetDatatype(), int(elements(shape)))
				t.expectInvalid(req, inferWhat(fm, "input '%s' shape %v (metadata %v)", fin.GetName(), shape, fin.GetShape()), "unexpected shape")
				done = append(done, fmt.Sprintf("'%s' %v", fm.name, shape))
			}
			t.Note("shapes refused: %v", done)
		}},
		{ID: "validate.shape-wildcard", Title: "a request shape containing -1 is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeUnsigned, Item: 21, Run: func(t *T) {
			// A dimension past the batch dimension where there is one: Triton takes the first
			// dimension of a batching model's input as the batch size before it looks for -1.
			nonBatch := func(m *model, in *tensorMeta) bool {
				return len(in.GetShape()) > 1 || (len(in.GetShape()) == 1 && m.maxBatch() <= 0)
			}
			m, i := t.pickInput("an input of rank >= 1", nil, nonBatch, func(_ *model, in *tensorMeta) bool { return len(in.GetShape()) > 0 })
			req := validRequest(m)
			shape := req.Inputs[i].Shape
			shape[len(shape)-1] = -1
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "input '%s' shape %v", req.Inputs[i].Name, req.Inputs[i].Shape), "All input dimensions should be specified"))
		}},
		{ID: "validate.missing-input", Title: "a request without one of the model's required inputs is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeInputs, Item: 22, Run: func(t *T) {
			m, i := t.pickInput("two or more inputs, one of them required", []func(*model) bool{func(m *model) bool { return len(m.meta.GetInputs()) >= 2 }}, requiredInput)
			req := validRequest(m)
			name := req.Inputs[i].Name
			req.Inputs = slices.Delete(req.Inputs, i, i+1)
			req.RawInputContents = slices.Delete(req.RawInputContents, i, i+1)
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "required input '%s' left out", name), "missing required input"))
		}},
		{ID: "validate.unknown-input", Title: "a request with an input the model does not have (in place of one, or extra) is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeInputs, Item: 23, Run: func(t *T) {
			m := t.generic()
			// One input renamed: the input count is right, only the name is unknown.
			req := validRequest(m)
			name := req.Inputs[0].Name
			req.Inputs[0].Name = "conformance_unknown_input"
			s := t.expectInvalid(req, inferWhat(m, "input 'conformance_unknown_input' in place of '%s'", name), "unexpected inference input")
			// One input more than the model has (Triton then reports the input count): v2 does not
			// forbid ignoring it, so OK is a warning.
			req = validRequest(m)
			first := req.Inputs[0]
			req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "conformance_unknown_input", Datatype: first.Datatype, Shape: first.Shape})
			req.RawInputContents = append(req.RawInputContents, req.RawInputContents[0])
			_, err := t.infer(req)
			t.preferRefusal(err, inferWhat(m, "an extra input 'conformance_unknown_input'"), codes.InvalidArgument, "", "the model has no such input")
			t.noteRefusal(m, s)
		}},
		{ID: "validate.duplicate-input", Title: "a request naming the same input twice is refused (INVALID_ARGUMENT)", Class: Recommended, Cite: citeInvalid, Item: 24, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			first := req.Inputs[0]
			req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: first.Name, Datatype: first.Datatype, Shape: first.Shape})
			req.RawInputContents = append(req.RawInputContents, req.RawInputContents[0])
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "input '%s' twice", first.Name), "already exists in request"))
		}},
		{ID: "validate.duplicate-output", Title: "a request naming the same output twice is refused (INVALID_ARGUMENT)", Class: Recommended, Cite: citeInvalid, Item: 25, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			name := m.meta.GetOutputs()[0].GetName()
			req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: name}, {Name: name}}
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "output '%s' requested twice", name), "already exists in request"))
		}},
		{ID: "validate.raw-size", Title: "raw input data 4 bytes shorter or longer than prod(shape) * size is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeSize, Item: 26, Run: func(t *T) {
			m, i := t.pickInput("a fixed-size input of 4 bytes or more", nil, func(m *model, in *tensorMeta) bool {
				size := datatypes[in.GetDatatype()]
				return size > 0 && elements(inputShape(m, in))*int64(size) >= 4
			})
			name := m.meta.GetInputs()[i].GetName()
			short := validRequest(m)
			n := len(short.RawInputContents[i])
			short.RawInputContents[i] = short.RawInputContents[i][:n-4]
			t.expectInvalid(short, inferWhat(m, "input '%s' raw data of %d bytes (shape needs %d)", name, n-4, n), "input byte size mismatch")
			long := validRequest(m)
			long.RawInputContents[i] = append(long.RawInputContents[i], 0, 0, 0, 0)
			t.noteRefusal(m, t.expectInvalid(long, inferWhat(m, "input '%s' raw data of %d bytes (shape needs %d)", name, n+4, n), "input byte size mismatch"))
		}},
		{ID: "validate.raw-too-few", Title: "fewer raw_input_contents entries than inputs is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeRawEach, Item: 27, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.RawInputContents = req.RawInputContents[:len(req.RawInputContents)-1]
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "%d inputs and %d raw_input_contents entries", len(req.Inputs), len(req.RawInputContents)), "unable to find data for input tensor"))
		}},
		{ID: "validate.raw-too-many", Title: "more raw_input_contents entries than inputs is refused (INVALID_ARGUMENT; Triton accepts them)", Class: Recommended, Cite: citeRawEach, Item: 28, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.RawInputContents = append(req.RawInputContents, req.RawInputContents[0])
			_, err := t.infer(req)
			what := inferWhat(m, "%d inputs and %d raw_input_contents entries", len(req.Inputs), len(req.RawInputContents))
			t.noteRefusal(m, t.preferRefusal(err, what, codes.InvalidArgument, "", "Triton accepts surplus raw entries; KServe python and Dynamo refuse them"))
		}},
		{ID: "validate.raw-and-typed", Title: "an input with typed contents while raw_input_contents is used is refused (INVALID_ARGUMENT)", Class: Standard, Cite: v2proto("If this field is specified then InferInputTensor::contents must not be specified for any input tensor."), Item: 29, Run: func(t *T) {
			m, i := t.pickInput("an input with a typed contents field", nil, func(_ *model, in *tensorMeta) bool { return hasTypedField(in.GetDatatype()) })
			req := validRequest(m)
			c, err := toTyped(req.Inputs[i].Datatype, req.RawInputContents[i])
			if err != nil {
				t.Failf("encoding typed contents: %v", err)
			}
			req.Inputs[i].Contents = c
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "input '%s' in both raw_input_contents and contents", req.Inputs[i].Name),
				"contents field must not be specified when using raw_input_contents"))
		}},
		{ID: "validate.typed-wrong-field", Title: "typed contents in the field of another datatype (fp32_contents for INT32) are refused (INVALID_ARGUMENT)", Class: Standard, Cite: v2proto("Representation for INT8, INT16, and INT32 data types. The size must match what is expected by the tensor's shape."), Item: 30, Run: func(t *T) {
			m, i := t.pickInput("only inputs with typed contents fields", []func(*model) bool{allInputsTyped},
				ofDatatype("INT32"), func(_ *model, in *tensorMeta) bool { return true })
			req := t.mustTyped(m)
			in := req.Inputs[i]
			n := int(elements(in.Shape))
			field := "fp32_contents"
			if in.Datatype == "FP32" {
				field = "int_contents"
				in.Contents = &inference.InferTensorContents{IntContents: make([]int32, n)}
			} else {
				in.Contents = &inference.InferTensorContents{Fp32Contents: make([]float32, n)}
			}
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "%s input '%s' in %s", in.Datatype, in.Name, field), "unexpected explicit tensor data"))
		}},
		{ID: "validate.typed-count", Title: "typed contents with one element too few or too many are refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeTypedSz, Item: 31, Run: func(t *T) {
			m, i := t.pickInput("only inputs with typed contents fields", []func(*model) bool{allInputsTyped},
				func(_ *model, in *tensorMeta) bool { return in.GetDatatype() != "BYTES" }, func(_ *model, in *tensorMeta) bool { return true })
			// Typed contents become bytes before the size check: Triton reports the byte size.
			phrase := "input byte size mismatch"
			if m.meta.GetInputs()[i].GetDatatype() == "BYTES" {
				phrase = ""
			}
			for _, delta := range []int{-1, 1} {
				req := t.mustTyped(m)
				in := req.Inputs[i]
				n := int(elements(in.Shape))
				if n+delta < 0 {
					continue
				}
				c, err := toTyped(in.Datatype, fill(in.Datatype, n+delta))
				if err != nil {
					t.Failf("encoding typed contents: %v", err)
				}
				in.Contents = c
				t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "input '%s' shape %v and %d typed elements", in.Name, in.Shape, n+delta), phrase))
			}
		}},
		{ID: "validate.bytes-framing", Title: "BYTES raw data with a truncated length prefix or a length past the end is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeSize, Item: 32, Run: func(t *T) {
			m, i := t.pickInput("a BYTES input", nil, ofDatatype("BYTES"))
			name := m.meta.GetInputs()[i].GetName()
			req := widenedRequest(m, i, 3)
			elems, err := unframe(req.RawInputContents[i])
			if err != nil || len(elems) == 0 {
				t.Skip("model '%s' input '%s' takes no BYTES element", m.name, name)
			}
			// n-1 whole elements, then 2 of the last element's 4 prefix bytes.
			req.RawInputContents[i] = append(frame(elems[:len(elems)-1]...), frame(elems[len(elems)-1])[:2]...)
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "BYTES input '%s' ending in a 2-byte length prefix", name), "incomplete string length indicator"))
			// The last element's length prefix claims 10 bytes more than there are.
			req = widenedRequest(m, i, 3)
			data, lastLen := req.RawInputContents[i], len(elems[len(elems)-1])
			binary.LittleEndian.PutUint32(data[len(data)-4-lastLen:], uint32(lastLen+10))
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "BYTES input '%s' whose last element length runs 10 bytes past the end", name), ""))
		}},
		{ID: "validate.bytes-count", Title: "BYTES raw data framing one element more or fewer than prod(shape) is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeSize, Item: 33, Run: func(t *T) {
			m, i := t.pickInput("a BYTES input", nil, ofDatatype("BYTES"))
			name := m.meta.GetInputs()[i].GetName()
			for _, delta := range []int{-1, 1} {
				req := widenedRequest(m, i, 3)
				n := int(elements(req.Inputs[i].Shape))
				if n+delta < 0 {
					continue
				}
				req.RawInputContents[i] = fill("BYTES", n+delta)
				t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "BYTES input '%s' shape %v and %d framed elements", name, req.Inputs[i].Shape, n+delta), "string elements"))
			}
		}},
		{ID: "validate.batch-size", Title: "a batch of ModelConfig's max_batch_size is OK, one more is refused (INVALID_ARGUMENT)", Class: TritonExtension, Cite: triton("user_guide/model_configuration.md", "The *max_batch_size* property indicates the maximum batch size that the model supports for the [types of batching](architecture.md#models-and-schedulers) that can be exploited by Triton."), Item: 37, Run: func(t *T) {
			t.requireConfig()
			m := t.generic(func(m *model) bool {
				if m.maxBatch() <= 0 {
					return false
				}
				for _, in := range m.meta.GetInputs() {
					if len(in.GetShape()) == 0 || in.GetShape()[0] != -1 {
						return false
					}
				}
				return true
			})
			mbs := m.maxBatch()
			if size := batchBytes(m, mbs+1); size > 16<<20 {
				t.Skip("model '%s': a batch of %d would take %d bytes", m.name, mbs+1, size)
			}
			t.mustInfer(batchRequest(m, mbs))
			_, err := t.infer(batchRequest(m, mbs+1))
			t.noteRefusal(m, t.expectRefusal(err, inferWhat(m, "batch %d (max_batch_size %d in ModelConfig)", mbs+1, mbs), codes.InvalidArgument, "batch-size must be <="))
			t.Note("model '%s', max_batch_size %d", m.name, mbs)
		}},
	}
}

// sameSizeDatatype maps each fixed-size datatype to another of the same element size.
var sameSizeDatatype = map[string]string{
	"INT32": "FP32", "UINT32": "INT32", "FP32": "INT32",
	"INT8": "UINT8", "UINT8": "INT8", "BOOL": "UINT8",
	"INT16": "UINT16", "UINT16": "INT16", "FP16": "INT16", "BF16": "FP16",
	"INT64": "FP64", "UINT64": "INT64", "FP64": "INT64",
}

// fixedDim is the index of in's first fixed (not -1) dimension past the batch dimension, or -1.
func fixedDim(m *model, in *tensorMeta) int {
	for d, n := range in.GetShape() {
		if d == 0 && m.maxBatch() > 0 {
			continue
		}
		if n >= 0 {
			return d
		}
	}
	return -1
}

// batchRequest is validRequest with batch size batch on every input.
func batchRequest(m *model, batch int) *inference.ModelInferRequest {
	req := validRequest(m)
	for i, in := range req.Inputs {
		in.Shape[0] = int64(batch)
		req.RawInputContents[i] = fill(in.Datatype, int(elements(in.Shape)))
	}
	return req
}

// batchBytes estimates the size of batchRequest(m, batch).
func batchBytes(m *model, batch int) int64 {
	var n int64
	for _, in := range m.meta.GetInputs() {
		size := int64(datatypes[in.GetDatatype()])
		if size == 0 {
			size = 5
		}
		n += int64(batch) * elements(inputShape(m, in)) * size
	}
	return n
}

// widenedRequest is validRequest where, on a model with this one input, input i's last variable
// dimension past the batch dimension holds n elements instead of 1, so that one element fewer
// still leaves some.
func widenedRequest(m *model, i, n int) *inference.ModelInferRequest {
	req := validRequest(m)
	if len(m.meta.GetInputs()) != 1 {
		return req
	}
	in := req.Inputs[i]
	for d := len(in.Shape) - 1; d >= 0; d-- {
		if m.meta.GetInputs()[i].GetShape()[d] == -1 && (d > 0 || m.maxBatch() <= 0) {
			in.Shape[d] = int64(n)
			req.RawInputContents[i] = fill(in.Datatype, int(elements(in.Shape)))
			break
		}
	}
	return req
}
