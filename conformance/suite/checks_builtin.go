package suite

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
)

// builtinChecks hold Triton's example models (infergate's built-ins) to their documented results
// (kserve.md §5). They run wherever a model of that name is served with the example's tensors
// (Triton included), and skip where the name belongs to another model or the example's config
// (max_batch_size, sequence batching) is not served.
func builtinChecks() []Check {
	return []Check{
		{ID: "builtin.simple", Title: "simple: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1; metadata [-1,16], versions [\"1\"]", Class: TritonExtension, Cite: example("simple/config.pbtxt", "name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 16 ]"), Item: 60, Run: func(t *T) {
			m := t.example("simple", simpleTensors...)
			// Versions are optional in v2 metadata; Triton's repository holds version 1.
			if v := m.meta.GetVersions(); len(v) > 0 && !slices.Equal(v, []string{"1"}) {
				t.Warn("simple lists versions %v; Triton's example repository holds only version 1", v)
			}
			resp := t.mustInfer(simpleRequest(1))
			checkSimple(t, resp, 1)
			if v := resp.GetModelVersion(); v != "" && v != "1" {
				t.Warn("model_version %q; Triton's example repository holds only version 1", v)
			}
		}},
		{ID: "builtin.simple-batch", Title: "simple: batch 8 is computed row by row, batch 9 is INVALID_ARGUMENT", Class: TritonExtension, Cite: example("simple/config.pbtxt", "max_batch_size: 8"), Item: 60, Run: func(t *T) {
			m := t.example("simple", simpleTensors...)
			checkSimple(t, t.mustInfer(simpleRequest(8)), 8)
			// The limit of 8 is the example's ModelConfig: a server without one states no limit.
			if m.maxBatch() != 8 {
				t.Note("batch 8 computed row by row; batch 9 not sent: the server's ModelConfig for simple states no max_batch_size 8")
				return
			}
			_, err := t.infer(simpleRequest(9))
			t.expectRefusal(err, "ModelInfer(simple, batch 9) with max_batch_size 8", codes.InvalidArgument, "batch-size must be <= 8")
		}},
		{ID: "builtin.simple-int8", Title: "simple_int8: sum and difference in INT8", Class: TritonExtension, Cite: example("simple_int8/config.pbtxt", "data_type: TYPE_INT8"), Run: func(t *T) {
			t.example("simple_int8", "INPUT0 INT8 [-1 16]", "INPUT1 INT8 [-1 16]", "OUTPUT0 INT8 [-1 16]", "OUTPUT1 INT8 [-1 16]")
			in0, in1 := make([]byte, 16), make([]byte, 16)
			for i := range 16 {
				in0[i], in1[i] = byte(int8(i*9)), byte(int8(-i*8))
			}
			req := &inference.ModelInferRequest{ModelName: "simple_int8", RawInputContents: [][]byte{in0, in1}, Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT8", Shape: []int64{1, 16}}, {Name: "INPUT1", Datatype: "INT8", Shape: []int64{1, 16}}}}
			resp := t.mustInfer(req)
			sum, diff := outputBytes(t, resp, "OUTPUT0"), outputBytes(t, resp, "OUTPUT1")
			for i := range 16 {
				a, b := int8(in0[i]), int8(in1[i])
				equal(t, fmt.Sprintf("OUTPUT0[%d]", i), a+b, int8(sum[i]))
				equal(t, fmt.Sprintf("OUTPUT1[%d]", i), a-b, int8(diff[i]))
			}
		}},
		{ID: "builtin.simple-string", Title: "simple_string: \"0\"..\"15\" and \"1\"s give \"1\"..\"16\" and \"-1\"..\"14\"", Class: TritonExtension, Cite: example("simple_string/config.pbtxt", "data_type: TYPE_STRING"), Item: 61, Run: func(t *T) {
			t.example("simple_string", "INPUT0 BYTES [-1 16]", "INPUT1 BYTES [-1 16]", "OUTPUT0 BYTES [-1 16]", "OUTPUT1 BYTES [-1 16]")
			in0, in1 := make([][]byte, 16), make([][]byte, 16)
			for i := range 16 {
				in0[i], in1[i] = []byte(strconv.Itoa(i)), []byte("1")
			}
			req := &inference.ModelInferRequest{ModelName: "simple_string", RawInputContents: [][]byte{frame(in0...), frame(in1...)}, Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{1, 16}}, {Name: "INPUT1", Datatype: "BYTES", Shape: []int64{1, 16}}}}
			resp := t.mustInfer(req)
			sum, diff := outputStrings(t, resp, "OUTPUT0"), outputStrings(t, resp, "OUTPUT1")
			for i := range 16 {
				equal(t, fmt.Sprintf("OUTPUT0[%d]", i), strconv.Itoa(i+1), sum[i])
				equal(t, fmt.Sprintf("OUTPUT1[%d]", i), strconv.Itoa(i-1), diff[i])
			}
		}},
		{ID: "builtin.simple-identity", Title: "simple_identity: BYTES come back byte for byte, NUL and non-UTF-8 included", Class: TritonExtension, Cite: example("simple_identity/1/model.py", "This model always returns the input that it has received."), Run: func(t *T) {
			t.example("simple_identity", "INPUT0 BYTES [-1 -1]", "OUTPUT0 BYTES [-1 -1]")
			elems := [][]byte{{}, []byte("a\x00b"), {0xff, 0xfe, 0x00, 0x01}, []byte("hello")}
			req := &inference.ModelInferRequest{ModelName: "simple_identity", RawInputContents: [][]byte{frame(elems...)}, Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "BYTES", Shape: []int64{1, int64(len(elems))}}}}
			got := outputStrings(t, t.mustInfer(req), "OUTPUT0")
			want := make([]string, len(elems))
			for i, e := range elems {
				want[i] = string(e)
			}
			equalSlices(t, "OUTPUT0", want, got)
		}},
		{ID: "builtin.simple-sequence", Title: "simple_sequence: OUTPUT = (INPUT + START) * READY over a three-request sequence", Class: TritonExtension, Cite: example("simple_sequence/config.pbtxt", "kind: CONTROL_SEQUENCE_START"), Item: 62, Run: func(t *T) {
			t.sequenceExample("simple_sequence")
			runSequence(t, "simple_sequence", 424242, []int32{10, 20, 30}, []int32{11, 20, 30})
		}},
		{ID: "builtin.simple-dyna-sequence", Title: "simple_dyna_sequence: OUTPUT = ((INPUT + START) + END * CORRID) * READY", Class: TritonExtension, Cite: example("simple_dyna_sequence/config.pbtxt", "kind: CONTROL_SEQUENCE_CORRID"), Item: 62, Run: func(t *T) {
			t.sequenceExample("simple_dyna_sequence")
			runSequence(t, "simple_dyna_sequence", 424243, []int32{10, 20, 30}, []int32{11, 20, 30 + 424243})
		}},
	}
}

// simpleTensors are the tensors of Triton's simple example, as "NAME DATATYPE SHAPE".
var simpleTensors = []string{"INPUT0 INT32 [-1 16]", "INPUT1 INT32 [-1 16]", "OUTPUT0 INT32 [-1 16]", "OUTPUT1 INT32 [-1 16]"}

// example returns the model named name when its metadata lists exactly tensors ("NAME DATATYPE
// SHAPE", inputs and outputs), the tensors of Triton's example; else it skips the check: the
// server serves another model under that name.
func (t *T) example(name string, tensors ...string) *model {
	m := t.model(name)
	var got []string
	for _, x := range append(slices.Clone(m.meta.GetInputs()), m.meta.GetOutputs()...) {
		got = append(got, fmt.Sprintf("%s %s %v", x.GetName(), x.GetDatatype(), x.GetShape()))
	}
	if !sameSet(got, tensors) {
		t.Skip("model '%s' is not Triton's example: its tensors are %v, the example's %v", name, got, tensors)
	}
	return m
}

// sequenceExample skips the check unless name is served as a sequence model (ModelConfig
// sequence_batching) with the INT32 INPUT and OUTPUT of Triton's sequence examples.
func (t *T) sequenceExample(name string) {
	m := t.model(name)
	if !m.sequence() {
		t.Skip("model '%s' is not a sequence model according to a ModelConfig (Triton's model_configuration extension)", name)
	}
	if !hasTensor(m.meta.GetInputs(), "INPUT", "INT32") || !hasTensor(m.meta.GetOutputs(), "OUTPUT", "INT32") {
		t.Skip("model '%s' does not have the INT32 INPUT and OUTPUT of Triton's example", name)
	}
}

// simpleRequest is the request Triton's simple example client sends, batch times: INPUT0 = 0..15,
// INPUT1 = ones, raw INT32.
func simpleRequest(batch int) *inference.ModelInferRequest {
	var in0, in1 []int32
	for range batch {
		for i := range 16 {
			in0, in1 = append(in0, int32(i)), append(in1, 1)
		}
	}
	shape := []int64{int64(batch), 16}
	return &inference.ModelInferRequest{ModelName: "simple", Inputs: []*inference.ModelInferRequest_InferInputTensor{
		{Name: "INPUT0", Datatype: "INT32", Shape: shape}, {Name: "INPUT1", Datatype: "INT32", Shape: shape}},
		RawInputContents: [][]byte{rawInt32s(in0...), rawInt32s(in1...)}}
}

// checkSimple checks simple's outputs for simpleRequest(batch).
func checkSimple(t *T, resp *inference.ModelInferResponse, batch int) {
	var sum, diff []int32
	for range batch {
		for i := range 16 {
			sum, diff = append(sum, int32(i+1)), append(diff, int32(i-1))
		}
	}
	equalSlices(t, "OUTPUT0", sum, int32s(outputBytes(t, resp, "OUTPUT0")))
	equalSlices(t, "OUTPUT1", diff, int32s(outputBytes(t, resp, "OUTPUT1")))
}

// outputBytes returns the named output's raw data or fails the check.
func outputBytes(t *T, resp *inference.ModelInferResponse, name string) []byte {
	_, data, err := outputByName(resp, name)
	if err != nil {
		t.Fail("output '"+name+"'", err.Error())
	}
	return data
}

// outputStrings returns the named BYTES output's elements or fails the check.
func outputStrings(t *T, resp *inference.ModelInferResponse, name string) []string {
	elems, err := unframe(outputBytes(t, resp, name))
	if err != nil {
		t.Fail("output '"+name+"' framed as BYTES", err.Error())
	}
	out := make([]string, len(elems))
	for i, e := range elems {
		out[i] = string(e)
	}
	return out
}

// runSequence sends inputs as one sequence (START on the first, END on the last) to a model with a
// single INT32 input INPUT [1] and output OUTPUT, and compares each OUTPUT with want.
func runSequence(t *T, model string, id int64, inputs, want []int32) {
	for i, v := range inputs {
		req := &inference.ModelInferRequest{ModelName: model,
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT", Datatype: "INT32", Shape: []int64{1, 1}}},
			RawInputContents: [][]byte{rawInt32s(v)},
			Parameters: map[string]*inference.InferParameter{
				"sequence_id":    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: id}},
				"sequence_start": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: i == 0}},
				"sequence_end":   {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: i == len(inputs)-1}},
			}}
		resp, err := t.infer(req)
		t.expectOK(err, fmt.Sprintf("%s request %d of sequence %d", model, i+1, id))
		equalSlices(t, fmt.Sprintf("%s OUTPUT of request %d", model, i+1), []int32{want[i]}, int32s(outputBytes(t, resp, "OUTPUT")))
	}
}
