package suite

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/codes"
)

// configChecks hold Triton's model_configuration, statistics and model_repository extensions to
// what Triton's clients expect of them, and classificationChecks its classification extension.
func configChecks() []Check {
	return append([]Check{
		{ID: "config.model", Title: "ModelConfig names the model and agrees with its metadata (names, TYPE_* types, dims)", Class: TritonExtension, Cite: triton("protocol/extension_model_configuration.md", "The contents of the response will be the JSON representation of the model's configuration"), Item: 44, Run: func(t *T) {
			t.requireExtension("model_configuration")
			if len(t.env.models) == 0 {
				t.Skip("no models discovered")
			}
			for _, m := range t.env.models {
				r, err := t.client().ModelConfig(t.ctx, &inference.ModelConfigRequest{Name: m.name})
				t.expectOK(err, fmt.Sprintf("ModelConfig(%q)", m.name))
				checkConfig(t, m, r.GetConfig())
			}
			t.Note("%d models", len(t.env.models))
		}},
		{ID: "config.unknown", Title: "ModelConfig on an unknown model is refused (NOT_FOUND)", Class: TritonExtension, Cite: triton("protocol/extension_model_configuration.md", "The OK code indicates success and other codes indicate failure."), Item: 45, Run: func(t *T) {
			t.requireExtension("model_configuration")
			_, err := t.client().ModelConfig(t.ctx, &inference.ModelConfigRequest{Name: unknownModel})
			t.expectRefusal(err, "ModelConfig(unknown)", codes.NotFound, "")
		}},
		{ID: "config.statistics", Title: "ModelStatistics has one entry per model, counts successful inferences and lists every model for \"\"", Class: TritonExtension, Cite: triton("protocol/extension_statistics.md", "\"inference_count\" : The cumulative count of successful inference requests made for this model."), Item: 46, Run: func(t *T) {
			t.requireExtension("statistics")
			m := t.generic()
			before := modelStats(t, m.name)
			const n = 3
			for range n {
				t.mustInfer(validRequest(m))
			}
			// A server may account a request just after answering it: allow it a moment.
			var after *inference.ModelStatistics
			for deadline := time.Now().Add(2 * time.Second); ; {
				after = modelStats(t, m.name)
				if grew(before, after) >= n || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if d := after.GetInferenceCount() - before.GetInferenceCount(); after.GetInferenceCount() < before.GetInferenceCount()+n {
				t.Fail(fmt.Sprintf("inference_count of '%s' grown by >= %d after %d successful ModelInfer calls", m.name, n, n),
					fmt.Sprintf("%d -> %d (%+d)", before.GetInferenceCount(), after.GetInferenceCount(), int64(d)))
			}
			bs, as := before.GetInferenceStats().GetSuccess().GetCount(), after.GetInferenceStats().GetSuccess().GetCount()
			if as < bs+n {
				t.Fail(fmt.Sprintf("inference_stats.success.count of '%s' grown by >= %d after %d successful ModelInfer calls", m.name, n, n),
					fmt.Sprintf("%d -> %d", bs, as))
			}
			all, err := t.client().ModelStatistics(t.ctx, &inference.ModelStatisticsRequest{})
			t.expectOK(err, "ModelStatistics(\"\")")
			var names []string
			for _, s := range all.GetModelStats() {
				names = append(names, s.GetName())
			}
			for _, name := range t.env.modelNames() {
				if !slices.Contains(names, name) {
					t.Fail(fmt.Sprintf("ModelStatistics(\"\") lists every model, '%s' included", name), strings.Join(names, ", "))
				}
			}
			t.Note("model '%s': inference_count %d -> %d; ModelStatistics(\"\") has %d entries", m.name, before.GetInferenceCount(), after.GetInferenceCount(), len(names))
		}},
		{ID: "config.stats-unknown", Title: "ModelStatistics on an unknown model is refused (NOT_FOUND)", Class: TritonExtension, Cite: triton("protocol/extension_statistics.md", "The OK code indicates success and other codes indicate failure."), Item: 47, Run: func(t *T) {
			t.requireExtension("statistics")
			_, err := t.client().ModelStatistics(t.ctx, &inference.ModelStatisticsRequest{Name: unknownModel})
			t.expectRefusal(err, "ModelStatistics(unknown)", codes.NotFound, "")
		}},
		{ID: "config.load-bad-override", Title: "RepositoryModelLoad with a config override that is not a ModelConfig's JSON is refused (\"failed to load\"), and the model stays ready", Class: TritonExtension, Cite: triton("protocol/extension_model_repository.md", "\"config\" : string parameter that contains a JSON representation of the model configuration"), Run: func(t *T) {
			t.requireExtension("model_repository")
			m := t.generic()
			_, err := t.client().RepositoryModelLoad(t.ctx, &inference.RepositoryModelLoadRequest{ModelName: m.name,
				Parameters: map[string]*inference.ModelRepositoryParameter{"config": {ParameterChoice: &inference.ModelRepositoryParameter_StringParam{StringParam: `"parameters": {"config": {{"max_batch_size": "16"}}}`}}}})
			t.expectRefusal(err, fmt.Sprintf("RepositoryModelLoad of '%s' with a config override that is not JSON", m.name), codes.InvalidArgument, "failed to load")
			r, err := t.client().ModelReady(t.ctx, &inference.ModelReadyRequest{Name: m.name})
			t.expectOK(err, fmt.Sprintf("ModelReady('%s') after the refused load", m.name))
			equal(t, fmt.Sprintf("ModelReady('%s').ready after the refused load", m.name), true, r.GetReady())
			t.Note("model '%s'", m.name)
		}},
		{ID: "config.repository-index", Title: "RepositoryIndex(ready=false) lists every model as READY, with states from Triton's set", Class: TritonExtension, Cite: triton("protocol/extension_model_repository.md", "The index API returns information about every model available in a model repository, even if it is not currently loaded into Triton."), Item: 48, Run: func(t *T) {
			t.requireExtension("model_repository")
			r, err := t.client().RepositoryIndex(t.ctx, &inference.RepositoryIndexRequest{Ready: false})
			t.expectOK(err, "RepositoryIndex(ready=false)")
			states := []string{"READY", "UNAVAILABLE", "LOADING", "UNLOADING", "UNKNOWN"}
			ready := map[string]bool{}
			for _, x := range r.GetModels() {
				if !slices.Contains(states, x.GetState()) {
					t.Fail(fmt.Sprintf("RepositoryIndex entry '%s' version %q: a state in {%s}", x.GetName(), x.GetVersion(), strings.Join(states, ", ")), fmt.Sprintf("%q", x.GetState()))
				}
				if x.GetState() == "READY" {
					ready[x.GetName()] = true
				}
			}
			for _, name := range t.env.modelNames() {
				if !ready[name] {
					t.Fail(fmt.Sprintf("RepositoryIndex(ready=false) lists '%s' as READY", name), indexEntries(r.GetModels(), name))
				}
			}
			t.Note("%d entries", len(r.GetModels()))
		}},
	}, classificationChecks()...)
}

// checkConfig compares a model's config with its metadata.
func checkConfig(t *T, m *model, cfg *inference.ModelConfig) {
	what := fmt.Sprintf("ModelConfig(%q)", m.name)
	equal(t, what+".name", m.name, cfg.GetName())
	batch := cfg.GetMaxBatchSize() > 0
	type tensor struct {
		name     string
		datatype inference.DataType
		dims     []int64
	}
	var ins, outs []tensor
	for _, x := range cfg.GetInput() {
		ins = append(ins, tensor{x.GetName(), x.GetDataType(), x.GetDims()})
	}
	for _, x := range cfg.GetOutput() {
		outs = append(outs, tensor{x.GetName(), x.GetDataType(), x.GetDims()})
	}
	for _, side := range []struct {
		kind string
		cfg  []tensor
		meta []*inference.ModelMetadataResponse_TensorMetadata
	}{{"input", ins, m.meta.GetInputs()}, {"output", outs, m.meta.GetOutputs()}} {
		var cfgNames, metaNames []string
		for _, x := range side.cfg {
			cfgNames = append(cfgNames, x.name)
		}
		for _, x := range side.meta {
			metaNames = append(metaNames, x.GetName())
		}
		if !sameSet(cfgNames, metaNames) {
			t.Fail(fmt.Sprintf("%s %s names = the metadata's [%s]", what, side.kind, strings.Join(metaNames, ", ")), "["+strings.Join(cfgNames, ", ")+"]")
		}
		for _, mt := range side.meta {
			i := slices.IndexFunc(side.cfg, func(x tensor) bool { return x.name == mt.GetName() })
			c := side.cfg[i]
			tw := fmt.Sprintf("%s %s '%s'", what, side.kind, c.name)
			equal(t, tw+" data_type (metadata "+mt.GetDatatype()+")", configTypeName(mt.GetDatatype()), c.datatype.String())
			want := mt.GetShape()
			if batch {
				if len(want) == 0 || want[0] != -1 {
					t.Fail(fmt.Sprintf("metadata shape of %s '%s' with a leading -1 (max_batch_size %d)", side.kind, c.name, cfg.GetMaxBatchSize()), fmt.Sprint(want))
				}
				want = want[1:]
			}
			if !slices.Equal(want, c.dims) {
				t.Fail(fmt.Sprintf("%s dims = %v (metadata shape %v, max_batch_size %d)", tw, want, mt.GetShape(), cfg.GetMaxBatchSize()), fmt.Sprint(c.dims))
			}
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// modelStats calls ModelStatistics for one model and checks it answers exactly one entry for it.
func modelStats(t *T, name string) *inference.ModelStatistics {
	r, err := t.client().ModelStatistics(t.ctx, &inference.ModelStatisticsRequest{Name: name})
	what := fmt.Sprintf("ModelStatistics(%q)", name)
	t.expectOK(err, what)
	if len(r.GetModelStats()) != 1 {
		t.Fail(what+": exactly 1 model_stats entry", fmt.Sprintf("%d", len(r.GetModelStats())))
	}
	s := r.GetModelStats()[0]
	equal(t, what+".model_stats[0].name", name, s.GetName())
	return s
}

// grew is the smaller of the two counters' growth.
func grew(before, after *inference.ModelStatistics) uint64 {
	d1 := after.GetInferenceCount() - min(after.GetInferenceCount(), before.GetInferenceCount())
	as, bs := after.GetInferenceStats().GetSuccess().GetCount(), before.GetInferenceStats().GetSuccess().GetCount()
	return min(d1, as-min(as, bs))
}

func indexEntries(idx []*inference.RepositoryIndexResponse_ModelIndex, name string) string {
	var got []string
	for _, x := range idx {
		if x.GetName() == name {
			got = append(got, fmt.Sprintf("version %q state %q reason %q", x.GetVersion(), x.GetState(), x.GetReason()))
		}
	}
	if len(got) == 0 {
		return "no entry for it"
	}
	return strings.Join(got, "; ")
}

// classificationChecks hold Triton's classification extension: an output requested with parameter
// classification=k comes back as BYTES "value:index[:label]" strings of its top k elements.
func classificationChecks() []Check {
	return []Check{
		{ID: "classification.top-k", Title: "classification=2 on an output gives its top 2 as \"value:index[:label]\"; classification=0 is INVALID_ARGUMENT", Class: TritonExtension, Cite: triton("protocol/extension_classification.md", "When the classification parameter is used, Triton will determine the top-n classifications as the n highest-valued elements in the output tensor compared using the output tensor’s data type."), Item: 56, Run: func(t *T) {
			t.requireExtension("classification")
			m := t.generic(func(m *model) bool { return classifiable(m) != nil })
			out := classifiable(m)
			ref := t.mustInfer(validRequest(m))
			_, refData, err := outputByName(ref, out.GetName())
			if err != nil {
				t.Fail(fmt.Sprintf("output '%s' in the unclassified response", out.GetName()), err.Error())
			}
			values := numericValues(out.GetDatatype(), refData)

			req := validRequest(m)
			req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: out.GetName(),
				Parameters: map[string]*inference.InferParameter{"classification": int64Parameter(2)}}}
			resp := t.mustInfer(req)
			if len(resp.GetOutputs()) != 1 {
				t.Fail("exactly the requested output", fmt.Sprintf("%d outputs", len(resp.GetOutputs())))
			}
			o := resp.GetOutputs()[0]
			equal(t, "classified output name", out.GetName(), o.GetName())
			equal(t, "classified output datatype", "BYTES", o.GetDatatype())
			k := int64(min(2, len(values)))
			want := []int64{k}
			if m.maxBatch() > 0 {
				want = []int64{1, k}
			}
			equalSlices(t, "classified output shape", want, o.GetShape())
			labels := outputStrings(t, resp, out.GetName())
			prev, seen := math.Inf(1), map[int]bool{}
			for i, l := range labels {
				parts := strings.SplitN(l, ":", 3)
				var v float64
				var idx int
				var err1, err2 error
				if len(parts) >= 2 {
					v, err1 = strconv.ParseFloat(parts[0], 64)
					idx, err2 = strconv.Atoi(parts[1])
				}
				if len(parts) < 2 || err1 != nil || err2 != nil || idx < 0 || idx >= len(values) || seen[idx] {
					t.Fail(fmt.Sprintf("classification %d as \"value:index[:label]\" with a distinct index < %d", i, len(values)), fmt.Sprintf("%q", l))
				}
				seen[idx] = true
				if math.Abs(v-values[idx]) > 1e-4*math.Max(1, math.Abs(values[idx])) {
					t.Fail(fmt.Sprintf("classification %d: the value of element %d, %g", i, idx, values[idx]), fmt.Sprintf("%q", l))
				}
				if v > prev {
					t.Fail("classifications in descending value order", strings.Join(labels, ", "))
				}
				prev = v
			}
			top := slices.Clone(values)
			slices.Sort(top)
			slices.Reverse(top)
			for i, v := range labelValues(labels) {
				if i < len(top) && math.Abs(v-top[i]) > 1e-4*math.Max(1, math.Abs(top[i])) {
					t.Fail(fmt.Sprintf("the top %d of %v", k, values), strings.Join(labels, ", "))
				}
			}

			req.Outputs[0].Parameters["classification"] = int64Parameter(0)
			_, err = t.infer(req)
			t.expectCode(err, "ModelInfer with classification=0", codes.InvalidArgument)
			t.Note("model '%s' output '%s': %s", m.name, out.GetName(), strings.Join(labels, ", "))
		}},
	}
}

// classifiable is the first output of m with a numeric datatype and at least two elements per
// batch item, or nil.
func classifiable(m *model) *inference.ModelMetadataResponse_TensorMetadata {
	for _, o := range m.meta.GetOutputs() {
		switch o.GetDatatype() {
		case "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP32", "FP64":
		default:
			continue
		}
		shape := o.GetShape()
		if m.maxBatch() > 0 && len(shape) > 0 {
			shape = shape[1:]
		}
		if n := elements(shape); n >= 2 {
			return o
		}
	}
	return nil
}

// numericValues decodes raw data of a numeric datatype to float64s.
func numericValues(dt string, raw []byte) []float64 {
	size := datatypes[dt]
	out := make([]float64, 0, len(raw)/max(size, 1))
	for i := 0; i+size <= len(raw) && size > 0; i += size {
		v := getUint(raw[i:], size)
		var f float64
		switch dt {
		case "INT8":
			f = float64(int8(v))
		case "INT16":
			f = float64(int16(v))
		case "INT32":
			f = float64(int32(v))
		case "INT64":
			f = float64(int64(v))
		case "FP32":
			f = float64(math.Float32frombits(uint32(v)))
		case "FP64":
			f = math.Float64frombits(v)
		default:
			f = float64(v)
		}
		out = append(out, f)
	}
	return out
}

func labelValues(labels []string) []float64 {
	var out []float64
	for _, l := range labels {
		v, _ := strconv.ParseFloat(strings.SplitN(l, ":", 2)[0], 64)
		out = append(out, v)
	}
	return out
}
