package suite

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
)

// inferChecks hold ModelInfer's basic contract (checklist items 10-17): every model the suite can
// drive answers a valid request with all its outputs, the request id, and sizes that agree with
// shapes; typed and raw inputs give the same results; unknown outputs, models and versions are
// refused with the right codes.
func inferChecks() []Check {
	return []Check{
		{ID: "infer.basic", Title: "ModelInfer with valid raw inputs and no outputs named returns every output once, the model name and a version", Class: Standard, Cite: v2proto("The requested output tensors for the inference. Optional, if not specified all outputs produced by the model will be returned."), Item: 10, Run: func(t *T) {
			models := t.requireDrivable("")
			for _, m := range models {
				resp := t.mustInfer(validRequest(m))
				equal(t, fmt.Sprintf("model '%s': response model_name", m.name), m.name, resp.GetModelName())
				// "Inference servers that do not implement versioning should not provide this
				// field": an empty version is right for a model without versions.
				if resp.GetModelVersion() == "" && len(m.meta.GetVersions()) > 0 {
					t.Warn("model '%s' lists versions %v but its response has an empty model_version", m.name, m.meta.GetVersions())
				}
				checkOutputSet(t, m, resp)
			}
			t.Note("%d models: %s", len(models), modelList(models))
		}},
		{ID: "infer.id", Title: "ModelInfer echoes the request id (and answers an empty id when none was sent: recommended)", Class: Standard, Cite: citeID, Item: 11, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.Id = "req-42"
			equal(t, fmt.Sprintf("model '%s': response id for request id \"req-42\"", m.name), "req-42", t.mustInfer(req).GetId())
			if id := t.mustInfer(validRequest(m)).GetId(); id != "" {
				// The spec returns the id "if one was specified"; it does not forbid one otherwise.
				t.Warn("model '%s': response id %q for a request without id (a generated id)", m.name, id)
			}
			t.Note("model '%s'", m.name)
		}},
		{ID: "infer.typed-contents", Title: "typed contents inputs give the same outputs as raw inputs, on every model without FP16/BF16 inputs", Class: Standard, Cite: v2proto("The data contained in an input tensor can be represented in \"raw\" bytes form or in the repeated type that matches the tensor's data type."), Item: 12, Run: func(t *T) {
			models := t.requireDrivable(", and no FP16/BF16 input", allInputsTyped)
			var dts []string
			var compared []string
			for _, m := range models {
				rawReq := validRequest(m)
				raw := t.mustInfer(rawReq)
				typed := t.mustInfer(t.mustTyped(m))
				if diff := responseDiff(raw, typed); diff != "" {
					// A model that answers the same raw request differently is not deterministic:
					// its typed answer cannot be compared.
					if again := t.mustInfer(rawReq); responseDiff(raw, again) != "" {
						t.Warn("model '%s' answers the same raw request differently; its typed answer was not compared", m.name)
						continue
					}
					t.Fail(fmt.Sprintf("model '%s': the outputs of the raw request for the typed one", m.name), diff)
				}
				compared = append(compared, m.name)
				for _, in := range m.meta.GetInputs() {
					if !slices.Contains(dts, in.GetDatatype()) {
						dts = append(dts, in.GetDatatype())
					}
				}
			}
			slices.Sort(dts)
			t.Note("%d models (%s); input datatypes covered: %s", len(compared), strings.Join(compared, ", "), strings.Join(dts, ", "))
		}},
		{ID: "infer.output-sizes", Title: "each output's data has prod(shape) elements of its datatype (BYTES: prod(shape) framed elements)", Class: Standard, Cite: citeSize, Item: 13, Run: func(t *T) {
			models := t.requireDrivable("")
			for _, m := range models {
				resp := t.mustInfer(validRequest(m))
				checkOutputSizes(t, m, resp)
				for _, o := range resp.GetOutputs() {
					for _, mo := range m.meta.GetOutputs() {
						if mo.GetName() == o.GetName() && !shapeFits(mo.GetShape(), o.GetShape()) {
							t.Warn("model '%s' output '%s' has shape %v, which does not fit its metadata shape %v", m.name, o.GetName(), o.GetShape(), mo.GetShape())
						}
					}
				}
			}
			t.Note("%d models: %s", len(models), modelList(models))
		}},
		{ID: "infer.raw-outputs", Title: "ModelInfer answers in raw_output_contents, one entry per output (what Triton's Go and Node clients read)", Class: Recommended, Cite: v2("Using a \"raw\" representation of tensors with ModelInferRequest::raw_input_contents and ModelInferResponse::raw_output_contents will typically allow higher performance due to the way protobuf allocation and reuse interacts with GRPC."), Run: func(t *T) {
			models := t.requireDrivable("")
			for _, m := range models {
				resp := t.mustInfer(validRequest(m))
				if len(resp.GetRawOutputContents()) != len(resp.GetOutputs()) {
					t.Fail(fmt.Sprintf("model '%s': one raw_output_contents entry per output (%d)", m.name, len(resp.GetOutputs())),
						fmt.Sprintf("%d raw_output_contents entries", len(resp.GetRawOutputContents())))
				}
				for _, o := range resp.GetOutputs() {
					if o.GetContents() != nil {
						t.Fail(fmt.Sprintf("model '%s' output '%s': data only in raw_output_contents (Triton's Go and Node example clients read nothing else)", m.name, o.GetName()), "typed contents set")
					}
				}
			}
			t.Note("%d models: %s", len(models), modelList(models))
		}},
		{ID: "infer.select-output", Title: "ModelInfer naming one output returns exactly that output", Class: Standard, Cite: citeOutputs, Item: 14, Run: func(t *T) {
			models := t.requireDrivable("")
			m := models[0]
			for _, c := range models {
				if len(c.meta.GetOutputs()) >= 2 {
					m = c
					break
				}
			}
			// The last output: on a model with several, not the one returned first by default.
			name := m.meta.GetOutputs()[len(m.meta.GetOutputs())-1].GetName()
			req := validRequest(m)
			req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: name}}
			resp := t.mustInfer(req)
			var got []string
			for _, o := range resp.GetOutputs() {
				got = append(got, o.GetName())
			}
			equalSlices(t, fmt.Sprintf("model '%s': outputs returned when only '%s' is requested", m.name, name), []string{name}, got)
			checkOutputSizes(t, m, resp)
			t.Note("model '%s', output '%s' of %d", m.name, name, len(m.meta.GetOutputs()))
		}},
		{ID: "infer.unknown-output", Title: "ModelInfer naming an output the model does not have is refused (INVALID_ARGUMENT)", Class: Standard, Cite: citeOutputs, Item: 15, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "conformance_no_such_output"}}
			t.noteRefusal(m, t.expectInvalid(req, inferWhat(m, "requested output 'conformance_no_such_output' (it cannot be returned)"), "unexpected inference output"))
		}},
		{ID: "infer.unknown-model", Title: "ModelInfer on an unknown model is refused (NOT_FOUND), never OK or a server fault", Class: Standard, Cite: v2("The ModelInfer API performs inference using the specified model."), Item: 16, Run: func(t *T) {
			req := &inference.ModelInferRequest{ModelName: unknownModel,
				Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1}}},
				RawInputContents: [][]byte{rawInt32s(1)}}
			_, err := t.infer(req)
			t.Note("%s", describeErr(t.expectRefusal(err, fmt.Sprintf("ModelInfer('%s')", unknownModel), codes.NotFound, "Request for unknown model").Err()))
		}},
		{ID: "infer.version-unknown", Title: "ModelInfer on an unknown model version (\"99999\") is NOT_FOUND", Class: Recommended, Cite: citeVersion, Item: 17, Run: func(t *T) {
			m := t.generic()
			if slices.Contains(m.meta.GetVersions(), "99999") {
				t.Skip("model '%s' has a version 99999", m.name)
			}
			req := validRequest(m)
			req.ModelVersion = "99999"
			_, err := t.infer(req)
			t.noteRefusal(m, t.versionRefusal(m, err, inferWhat(m, "model_version \"99999\"")))
		}},
		{ID: "infer.version-invalid", Title: "ModelInfer on a non-integer model version (\"abc\") is INVALID_ARGUMENT on Triton, whose versions are integers", Class: TritonExtension, Cite: citeNumeric, Item: 17, Run: func(t *T) {
			m := t.generic()
			req := validRequest(m)
			req.ModelVersion = "abc"
			_, err := t.infer(req)
			t.noteRefusal(m, t.integralVersion(m, err, inferWhat(m, "model_version \"abc\""), "failed to get model version"))
		}},
	}
}

// checkOutputSet fails the check unless resp holds every metadata output of m exactly once, with
// the metadata's datatype, and nothing else.
func checkOutputSet(t *T, m *model, resp *inference.ModelInferResponse) {
	count := map[string]int{}
	var got []string
	for _, o := range resp.GetOutputs() {
		count[o.GetName()]++
		got = append(got, o.GetName())
	}
	var want []string
	for _, mo := range m.meta.GetOutputs() {
		want = append(want, mo.GetName())
	}
	for _, mo := range m.meta.GetOutputs() {
		if count[mo.GetName()] != 1 {
			t.Fail(fmt.Sprintf("model '%s': every metadata output exactly once %v", m.name, want), fmt.Sprintf("outputs %v", got))
		}
	}
	for _, o := range resp.GetOutputs() {
		i := slices.IndexFunc(m.meta.GetOutputs(), func(mo *tensorMeta) bool { return mo.GetName() == o.GetName() })
		if i < 0 {
			t.Fail(fmt.Sprintf("model '%s': only metadata outputs %v", m.name, want), fmt.Sprintf("outputs %v", got))
		}
		equal(t, fmt.Sprintf("model '%s' output '%s' datatype", m.name, o.GetName()), m.meta.GetOutputs()[i].GetDatatype(), o.GetDatatype())
	}
}

// responseDiff describes how b's outputs differ from a's (by name: shape, datatype, data), or is
// empty when they are the same.
func responseDiff(a, b *inference.ModelInferResponse) string {
	if len(a.GetOutputs()) != len(b.GetOutputs()) {
		return fmt.Sprintf("%d outputs, not %d", len(b.GetOutputs()), len(a.GetOutputs()))
	}
	for i, oa := range a.GetOutputs() {
		da, errA := outputData(a, i)
		ob, db, errB := outputByName(b, oa.GetName())
		switch {
		case errB != nil:
			return errB.Error()
		case errA != nil:
			return fmt.Sprintf("output '%s' of the raw request: %v", oa.GetName(), errA)
		case ob.GetDatatype() != oa.GetDatatype() || !slices.Equal(ob.GetShape(), oa.GetShape()):
			return fmt.Sprintf("output '%s' is %s %v, not %s %v", oa.GetName(), ob.GetDatatype(), ob.GetShape(), oa.GetDatatype(), oa.GetShape())
		case !bytes.Equal(da, db):
			return fmt.Sprintf("output '%s' data %x, not %x", oa.GetName(), clip32(db), clip32(da))
		}
	}
	return ""
}

// clip32 shortens data for messages.
func clip32(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// modelList names models for notes.
func modelList(ms []*model) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.name
	}
	return strings.Join(names, ", ")
}
