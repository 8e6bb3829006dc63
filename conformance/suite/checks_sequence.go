package suite

import (
	"fmt"
	"math/rand/v2"

	"google.golang.org/grpc/codes"
)

// sequenceChecks hold a sequence-batching model (ModelConfig sequence_batching) to Triton's
// sequence parameters (kserve.md §1.5, §3, §5): sequence_id with sequence_start/sequence_end, the
// START flag required on a sequence's first request, and the parameters' types. The server
// supplies the control inputs, so requests carry only the model's other inputs.
func sequenceChecks() []Check {
	return []Check{
		{ID: "sequence.lifecycle", Title: "a sequence (start, middle, end) with sequence_id 1000 is served request by request", Class: TritonExtension, Cite: citeSeqExt, Item: 55, Run: func(t *T) {
			m := t.sequenceModel()
			t.warnSequenceExtension()
			const id = 1000
			inputs := []int32{10, 20, 30}
			// Known results of Triton's examples (kserve.md §5): OUTPUT = (INPUT + START) * READY,
			// and simple_dyna_sequence adds END * CORRID.
			want := map[string][]int32{
				"simple_sequence":      {11, 20, 30},
				"simple_dyna_sequence": {11, 20, 30 + id},
			}[m.name]
			for i, v := range inputs {
				start, end := i == 0, i == len(inputs)-1
				resp, err := t.infer(sequenceRequest(m, id, start, end, v))
				what := fmt.Sprintf("ModelInfer on '%s', sequence %d request %d (start=%v, end=%v)", m.name, id, i+1, start, end)
				t.expectOK(err, what)
				if len(resp.GetOutputs()) == 0 {
					t.Fail(what+": outputs", "none")
				}
				if want != nil {
					equalSlices(t, fmt.Sprintf("%s OUTPUT (INPUT %d)", what, v), []int32{want[i]}, int32s(outputBytes(t, resp, "OUTPUT")))
				}
			}
			if want != nil {
				t.Note("model '%s': OUTPUT %v for INPUT %v", m.name, want, inputs)
			} else {
				t.Note("model '%s'", m.name)
			}
		}},
		{ID: "sequence.unknown-id", Title: "a non-start request for a sequence id never started is INVALID_ARGUMENT", Class: TritonExtension, Cite: citeSeqStart, Item: 55, Run: func(t *T) {
			m := t.sequenceModel()
			id := 1<<40 + rand.Int64N(1<<40)
			_, err := t.infer(sequenceRequest(m, id, false, false, 1))
			if err == nil {
				// Leave no sequence behind on a server that accepted it.
				_, _ = t.infer(sequenceRequest(m, id, false, true, 1))
			}
			s := t.expectCode(err, fmt.Sprintf("ModelInfer on '%s' for unseen sequence %d without sequence_start", m.name, id), codes.InvalidArgument)
			if t.isTriton() {
				t.expectContains(s, "ModelInfer for an unseen sequence", "must specify the START flag")
			}
			t.Note("model '%s': %s", m.name, s.Message())
		}},
		{ID: "sequence.id-type", Title: "sequence_id given as a bool_param is INVALID_ARGUMENT", Class: TritonExtension, Cite: triton("protocol/extension_sequence.md", "\"sequence_id\" : a string or uint64 value that identifies the sequence to which a request belongs."), Item: 55, Run: func(t *T) {
			m := t.sequenceModel()
			req := sequenceRequest(m, 1, true, true, 1)
			req.Parameters["sequence_id"] = boolParameter(true)
			_, err := t.infer(req)
			s := t.expectCode(err, fmt.Sprintf("ModelInfer on '%s' with sequence_id as a bool_param", m.name), codes.InvalidArgument)
			t.Note("model '%s': %s", m.name, s.Message())
		}},
	}
}

// warnSequenceExtension warns when the server serves a sequence model without advertising Triton's
// "sequence" extension.
func (t *T) warnSequenceExtension() {
	if t.env.server != nil && !t.env.ext["sequence"] {
		t.Warn("the server serves sequence models but does not advertise the 'sequence' extension")
	}
}
