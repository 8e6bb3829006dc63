package suite

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/status"
)

// restChecks cover the KServe v2 REST protocol (kserve.md §2) and Triton's binary tensor data and
// generate extensions. They run when a REST URL is given.
func restChecks() []Check {
	return []Check{
		{ID: "rest.health", Title: "GET /v2/health/live and /v2/health/ready answer 200, with no body or KServe's JSON", Class: Standard, Cite: citeHealth, Item: 58, Run: func(t *T) {
			for _, probe := range [...]struct{ path, member string }{{"/v2/health/live", "live"}, {"/v2/health/ready", "ready"}} {
				r := t.rest(http.MethodGet, probe.path, nil, nil)
				equal(t, "GET "+probe.path+" status", http.StatusOK, r.status)
				checkHealthBody(t, probe.path, probe.member, r.body)
			}
		}},
		{ID: "rest.model-ready", Title: "GET /v2/models/{m}/ready is 200 for a served model and 4xx for an unknown one", Class: Standard, Cite: citeHealth, Item: 58, Run: func(t *T) {
			m := t.generic()
			r := t.rest(http.MethodGet, "/v2/models/"+m.name+"/ready", nil, nil)
			equal(t, "GET /v2/models/"+m.name+"/ready status", http.StatusOK, r.status)
			r = t.rest(http.MethodGet, "/v2/models/"+unknownModel+"/ready", nil, nil)
			if r.status < 400 || r.status > 499 {
				t.Fail("GET /v2/models/"+unknownModel+"/ready: a 4xx status", r.String())
			}
		}},
		{ID: "rest.server-metadata", Title: "GET /v2 answers {name, version, extensions}", Class: Standard, Cite: v2("A successful server metadata request is indicated by a 200 HTTP status code."), Item: 58, Run: func(t *T) {
			var md struct {
				Name       string    `json:"name"`
				Version    string    `json:"version"`
				Extensions *[]string `json:"extensions"`
			}
			t.restJSON(http.MethodGet, "/v2", nil, http.StatusOK, &md)
			if md.Name == "" || md.Version == "" || md.Extensions == nil {
				t.Fail("non-empty name and version and an extensions list", fmt.Sprintf("name=%q version=%q extensions=%v", md.Name, md.Version, md.Extensions))
			}
		}},
		{ID: "rest.model-metadata", Title: "GET /v2/models/{m} answers the same metadata as gRPC ModelMetadata", Class: Standard, Cite: v2("The GRPC API closely follows the concepts defined in the [HTTP/REST](#httprest) API."), Item: 58, Run: func(t *T) {
			m := t.generic()
			var md restMetadata
			t.restJSON(http.MethodGet, "/v2/models/"+m.name, nil, http.StatusOK, &md)
			equal(t, "name", m.name, md.Name)
			compareTensors(t, "inputs", m.meta.GetInputs(), md.Inputs)
			compareTensors(t, "outputs", m.meta.GetOutputs(), md.Outputs)
		}},
		{ID: "rest.infer-json", Title: "POST /v2/models/{m}/infer with JSON data gives the same outputs as gRPC", Class: Standard, Cite: v2("Tensor data given explicitly is provided in a JSON array."), Item: 58, Run: func(t *T) {
			m := t.generic(noHalfFloats)
			req := validRequest(m)
			want := t.mustInfer(req)
			body := restRequestBody(t, req, false)
			var resp restInferResponse
			t.restJSON(http.MethodPost, "/v2/models/"+m.name+"/infer", body, http.StatusOK, &resp)
			equal(t, "model_name", m.name, resp.ModelName)
			compareRESTOutputs(t, want, &resp, nil)
			t.Note("model '%s'", m.name)
		}},
		{ID: "rest.infer-unknown-model", Title: "POST /v2/models/{unknown}/infer is an HTTP error (404 or 400) with an {\"error\"} body", Class: Standard, Cite: citeRESTErr, Item: 58, Run: func(t *T) {
			m := t.generic(noHalfFloats)
			body := restRequestBody(t, validRequest(m), false)
			r := t.rest(http.MethodPost, "/v2/models/"+unknownModel+"/infer", body, nil)
			t.restRefusal(r, "POST /v2/models/"+unknownModel+"/infer", http.StatusNotFound, http.StatusBadRequest)
		}},
		{ID: "rest.infer-invalid", Title: "POST infer with datatype \"FOO\" is an HTTP error (400) with an {\"error\"} body", Class: Standard, Cite: citeRESTErr, Item: 58, Run: func(t *T) {
			m := t.generic(noHalfFloats)
			req := validRequest(m)
			// A datatype outside the v2 list: unlike a wrong but valid datatype, which the REST
			// text lets a server coerce, it has no reading.
			body := restRequestBody(t, req, false)
			body = bytes.Replace(body, []byte(`"datatype":"`+req.Inputs[0].GetDatatype()+`"`), []byte(`"datatype":"FOO"`), 1)
			r := t.rest(http.MethodPost, "/v2/models/"+m.name+"/infer", body, nil)
			t.restRefusal(r, "POST /v2/models/"+m.name+"/infer with input '"+req.Inputs[0].GetName()+"' of datatype \"FOO\"", http.StatusBadRequest)
			t.Note("model '%s': %s", m.name, r)
		}},
		{ID: "rest.same-error-as-grpc", Title: "a bad request gets the same message over REST as over gRPC", Class: Infergate, Cite: own("REST and gRPC share one registry and one validation path: the same bad request gets the same Triton message on both"), Run: func(t *T) {
			m := t.generic(noHalfFloats)
			req := validRequest(m)
			req.Inputs[0].Name = "conformance_unknown_input"
			_, err := t.infer(req)
			s, _ := status.FromError(err)
			r := t.rest(http.MethodPost, "/v2/models/"+m.name+"/infer", restRequestBody(t, req, false), nil)
			equal(t, "REST error for an unknown input", s.Message(), t.restError(r))
		}},
		{ID: "rest.binary", Title: "binary tensor data: binary inputs and binary_data outputs round trip with Inference-Header-Content-Length", Class: TritonExtension, Cite: citeBinary, Item: 59, Run: func(t *T) {
			t.requireExtension("binary_tensor_data")
			m := t.generic()
			req := validRequest(m)
			want := t.mustInfer(req)
			header := restRequestBody(t, req, true)
			body := append(slices.Clone(header), bytes.Join(req.RawInputContents, nil)...)
			r := t.rest(http.MethodPost, "/v2/models/"+m.name+"/infer", body, map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(header))})
			equal(t, "status", http.StatusOK, r.status)
			n, err := strconv.Atoi(r.header.Get("Inference-Header-Content-Length"))
			if err != nil || n < 0 || n > len(r.body) {
				t.Fail("an Inference-Header-Content-Length response header within the body", fmt.Sprintf("%q for a %d-byte body", r.header.Get("Inference-Header-Content-Length"), len(r.body)))
			}
			var resp restInferResponse
			if err := json.Unmarshal(r.body[:n], &resp); err != nil {
				t.Fail("a JSON response header", err.Error())
			}
			compareRESTOutputs(t, want, &resp, r.body[n:])
			t.Note("model '%s'", m.name)
		}},
		{ID: "rest.binary-header-too-long", Title: "binary tensor data: an Inference-Header-Content-Length past the body is 400", Class: TritonExtension, Cite: citeBinary, Item: 59, Run: func(t *T) {
			t.requireExtension("binary_tensor_data")
			m := t.generic(noHalfFloats)
			body := restRequestBody(t, validRequest(m), false)
			r := t.rest(http.MethodPost, "/v2/models/"+m.name+"/infer", body, map[string]string{"Inference-Header-Content-Length": strconv.Itoa(len(body) + 100)})
			equal(t, "status", http.StatusBadRequest, r.status)
			t.restError(r)
		}},
		{ID: "rest.generate", Title: "POST /v2/models/{m}/generate answers text_output for text_input", Class: TritonExtension, Cite: triton("protocol/extension_generate.md", "`/generate` returns exactly 1 response JSON object with a `Content-Type` of `application/json`"), Run: func(t *T) {
			m := t.textModel()
			var out map[string]any
			t.restJSON(http.MethodPost, "/v2/models/"+m.name+"/generate", []byte(`{"text_input":"Say hello","parameters":{}}`), http.StatusOK, &out)
			if _, ok := out["text_output"]; !ok {
				t.Fail("a text_output field", fmt.Sprint(out))
			}
			equal(t, "model_name", any(m.name), out["model_name"])
		}},
		{ID: "rest.generate-stream", Title: "POST /v2/models/{m}/generate_stream answers server-sent events with text_output", Class: TritonExtension, Cite: triton("protocol/extension_generate.md", "`/generate_stream` may return multiple responses based on the inference results, with a `Content-Type` of `text/event-stream; charset=utf-8`."), Run: func(t *T) {
			m := t.textModel()
			r := t.rest(http.MethodPost, "/v2/models/"+m.name+"/generate_stream", []byte(`{"text_input":"Say hello","parameters":{}}`), nil)
			equal(t, "status", http.StatusOK, r.status)
			if !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
				t.Fail("Content-Type text/event-stream", r.header.Get("Content-Type"))
			}
			events := 0
			sc := bufio.NewScanner(bytes.NewReader(r.body))
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data:")
				if !ok {
					continue
				}
				var ev map[string]any
				if err := json.Unmarshal([]byte(strings.TrimSpace(data)), &ev); err != nil {
					t.Fail("JSON in every data: line", sc.Text())
				}
				if e, bad := ev["error"]; bad {
					t.Fail("no error event", fmt.Sprint(e))
				}
				events++
			}
			if events == 0 {
				t.Fail("at least one data: event", string(r.body))
			}
			t.Note("%d events", events)
		}},
	}
}

// noHalfFloats keeps models whose tensors JSON can carry (FP16 and BF16 have no JSON form).
func noHalfFloats(m *model) bool {
	for _, x := range append(slices.Clone(m.meta.GetInputs()), m.meta.GetOutputs()...) {
		if x.GetDatatype() == "FP16" || x.GetDatatype() == "BF16" {
			return false
		}
	}
	return true
}

// textModel returns a model with a BYTES text_input, or skips.
func (t *T) textModel() *model {
	for _, m := range t.env.models {
		if hasTensor(m.meta.GetInputs(), "text_input", "BYTES") && !m.sequence() {
			return m
		}
	}
	t.Skip("no model with a BYTES text_input is served")
	return nil
}

type restTensor struct {
	Name       string          `json:"name"`
	Datatype   string          `json:"datatype"`
	Shape      []int64         `json:"shape"`
	Parameters map[string]any  `json:"parameters,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

type restMetadata struct {
	Name    string       `json:"name"`
	Inputs  []restTensor `json:"inputs"`
	Outputs []restTensor `json:"outputs"`
}

type restInferResponse struct {
	ModelName    string       `json:"model_name"`
	ModelVersion string       `json:"model_version"`
	ID           string       `json:"id"`
	Outputs      []restTensor `json:"outputs"`
}

func compareTensors(t *T, what string, want []*inference.ModelMetadataResponse_TensorMetadata, got []restTensor) {
	if len(want) != len(got) {
		t.Fail(fmt.Sprintf("%d %s as over gRPC", len(want), what), fmt.Sprint(len(got)))
	}
	for i, w := range want {
		g := got[i]
		if w.GetName() != g.Name || w.GetDatatype() != g.Datatype || !slices.Equal(w.GetShape(), g.Shape) {
			t.Fail(fmt.Sprintf("%s[%d] = %s %s %v as over gRPC", what, i, w.GetName(), w.GetDatatype(), w.GetShape()), fmt.Sprintf("%s %s %v", g.Name, g.Datatype, g.Shape))
		}
	}
}

// restRequestBody renders a gRPC request as KServe REST JSON: data as JSON arrays, or with binary
// true as binary_data_size parameters (the data then follows the JSON) and binary outputs.
func restRequestBody(t *T, req *inference.ModelInferRequest, binary bool) []byte {
	type input struct {
		Name       string         `json:"name"`
		Shape      []int64        `json:"shape"`
		Datatype   string         `json:"datatype"`
		Parameters map[string]any `json:"parameters,omitempty"`
		Data       []any          `json:"data,omitempty"`
	}
	type output struct {
		Name       string         `json:"name"`
		Parameters map[string]any `json:"parameters,omitempty"`
	}
	body := struct {
		ID         string         `json:"id,omitempty"`
		Parameters map[string]any `json:"parameters,omitempty"`
		Inputs     []input        `json:"inputs"`
		Outputs    []output       `json:"outputs,omitempty"`
	}{ID: req.GetId()}
	for i, in := range req.GetInputs() {
		x := input{Name: in.GetName(), Shape: in.GetShape(), Datatype: in.GetDatatype()}
		if binary {
			x.Parameters = map[string]any{"binary_data_size": len(req.RawInputContents[i])}
		} else {
			data, err := rawToJSON(in.GetDatatype(), req.RawInputContents[i])
			if err != nil {
				t.Fail("JSON-encodable input data", err.Error())
			}
			x.Data = data
		}
		body.Inputs = append(body.Inputs, x)
	}
	if binary {
		body.Parameters = map[string]any{"binary_data_output": true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fail("a JSON request", err.Error())
	}
	return b
}

// rawToJSON converts raw tensor data to JSON values.
func rawToJSON(dt string, raw []byte) ([]any, error) {
	if dt == "BYTES" {
		elems, err := unframe(raw)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(elems))
		for i, e := range elems {
			out[i] = string(e)
		}
		return out, nil
	}
	size := datatypes[dt]
	if size == 0 || dt == "FP16" || dt == "BF16" {
		return nil, fmt.Errorf("datatype %s has no JSON form", dt)
	}
	out := make([]any, len(raw)/size)
	for i := range out {
		v := getUint(raw[i*size:], size)
		switch dt {
		case "BOOL":
			out[i] = v != 0
		case "INT8":
			out[i] = int8(v)
		case "INT16":
			out[i] = int16(v)
		case "INT32":
			out[i] = int32(v)
		case "INT64":
			out[i] = int64(v)
		case "FP32":
			out[i] = math.Float32frombits(uint32(v))
		case "FP64":
			out[i] = math.Float64frombits(v)
		default:
			out[i] = v
		}
	}
	return out, nil
}

// jsonToRaw converts a JSON data array (flat or nested) to raw tensor data.
func jsonToRaw(dt string, data json.RawMessage) ([]byte, error) {
	var vals []any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, err
	}
	var flatten func(any)
	flatten = func(v any) {
		if a, ok := v.([]any); ok {
			for _, x := range a {
				flatten(x)
			}
			return
		}
		vals = append(vals, v)
	}
	flatten(root)
	if dt == "BYTES" {
		elems := make([][]byte, len(vals))
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("BYTES element %d is %T, not a string", i, v)
			}
			elems[i] = []byte(s)
		}
		return frame(elems...), nil
	}
	size := datatypes[dt]
	out := make([]byte, len(vals)*size)
	for i, v := range vals {
		var bits uint64
		switch x := v.(type) {
		case bool:
			if x {
				bits = 1
			}
		case json.Number:
			switch dt {
			case "FP32":
				f, err := strconv.ParseFloat(string(x), 32)
				if err != nil {
					return nil, err
				}
				bits = uint64(math.Float32bits(float32(f)))
			case "FP64":
				f, err := strconv.ParseFloat(string(x), 64)
				if err != nil {
					return nil, err
				}
				bits = math.Float64bits(f)
			case "UINT8", "UINT16", "UINT32", "UINT64":
				u, err := strconv.ParseUint(string(x), 10, 64)
				if err != nil {
					return nil, err
				}
				bits = u
			default:
				n, err := strconv.ParseInt(string(x), 10, 64)
				if err != nil {
					return nil, err
				}
				bits = uint64(n)
			}
		default:
			return nil, fmt.Errorf("%s element %d is %T", dt, i, v)
		}
		putUint(out[i*size:], size, bits)
	}
	return out, nil
}

// compareRESTOutputs checks that a REST response carries the gRPC response's outputs; binary
// outputs are read from tail in order.
func compareRESTOutputs(t *T, want *inference.ModelInferResponse, got *restInferResponse, tail []byte) {
	for i, w := range want.GetOutputs() {
		wantData, err := outputData(want, i)
		if err != nil {
			t.Fail("gRPC output data", err.Error())
		}
		var g *restTensor
		for j := range got.Outputs {
			if got.Outputs[j].Name == w.GetName() {
				g = &got.Outputs[j]
			}
		}
		if g == nil {
			t.Fail("output '"+w.GetName()+"' in the REST response", fmt.Sprintf("outputs %v", got.Outputs))
		}
		equal(t, "output '"+w.GetName()+"' datatype", w.GetDatatype(), g.Datatype)
		equalSlices(t, "output '"+w.GetName()+"' shape", w.GetShape(), g.Shape)
		var data []byte
		if size, ok := g.Parameters["binary_data_size"].(float64); ok {
			if int(size) > len(tail) || size < 0 {
				t.Fail(fmt.Sprintf("binary_data_size %v within the %d binary bytes left", size, len(tail)), "past the end")
			}
			data, tail = tail[:int(size)], tail[int(size):]
		} else {
			if tail != nil {
				t.Fail("binary output '"+w.GetName()+"' (binary_data_output was requested)", "JSON data")
			}
			data, err = jsonToRaw(g.Datatype, g.Data)
			if err != nil {
				t.Fail("output '"+w.GetName()+"' data in JSON form", err.Error())
			}
		}
		if !bytes.Equal(wantData, data) {
			t.Fail(fmt.Sprintf("output '%s' data as over gRPC (%d bytes)", w.GetName(), len(wantData)), fmt.Sprintf("%d different bytes", len(data)))
		}
	}
}

// checkHealthBody judges a 200 health answer's body. v2 says it "should be empty", and Triton's
// is; KServe's own server answers {"live": true} / {"ready": true}, which KServe's Python
// InferenceRESTClient requires (is_server_live and is_server_ready parse the body as JSON and
// return its member). Both pass. A JSON body whose member is false contradicts the 200 and
// fails; any other body only warns, since v2 does not forbid one (but KServe's client breaks on
// it).
func checkHealthBody(t *T, path, member string, body []byte) {
	if len(bytes.TrimSpace(body)) == 0 {
		return
	}
	shown := oneLine(string(body[:min(len(body), 200)]))
	var j map[string]json.RawMessage
	if json.Unmarshal(body, &j) != nil {
		t.Warn("GET %s answered a body that is neither empty (v2, Triton) nor JSON (KServe's {%q: true}): %s", path, member, shown)
		return
	}
	switch strings.TrimSpace(string(j[member])) {
	case "true":
	case "false":
		t.Fail(fmt.Sprintf("GET %s: 200 with no body, or {%q: true}", path, member), shown)
	default:
		t.Warn("GET %s answered JSON without %q: true, which KServe's client reads as not %s: %s", path, member, member, shown)
	}
}

// restResponse is one REST answer, read whole.
type restResponse struct {
	status int
	header http.Header
	body   []byte
}

func (r restResponse) String() string {
	return fmt.Sprintf("HTTP %d %s", r.status, oneLine(string(r.body[:min(len(r.body), 200)])))
}

// rest makes one REST call, failing the check when the server cannot be reached.
func (t *T) rest(method, path string, body []byte, header map[string]string) restResponse {
	base := t.requireHTTP()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.ctx, method, base+path, rd)
	if err != nil {
		t.Failf("building %s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := t.env.cfg.HTTPClient.Do(req)
	if err != nil {
		t.Fail(method+" "+path+": an answer", err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fail(method+" "+path+": a complete body", err.Error())
	}
	return restResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

// restJSON makes a REST call expecting status and a JSON body decoded into v.
func (t *T) restJSON(method, path string, body []byte, status int, v any) {
	r := t.rest(method, path, body, nil)
	if r.status != status {
		t.Fail(fmt.Sprintf("%s %s: HTTP %d", method, path, status), r.String())
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fail(method+" "+path+": a JSON body", fmt.Sprintf("%v in %s", err, r))
	}
}

// restRefusal holds r, the answer to a request the server must refuse, to the v2 REST text: an
// HTTP error status (the first of want preferred, the others allowed; another 4xx or a 5xx, which
// blames the server for the client's mistake, warns, since the text allows any error status) and
// an {"error": "..."} body.
func (t *T) restRefusal(r restResponse, what string, want ...int) {
	switch {
	case r.status < 400:
		t.Fail(fmt.Sprintf("%s: an HTTP error status (%d)", what, want[0]), r.String())
	case slices.Contains(want, r.status):
	case r.status >= 500:
		t.Warn("%s: HTTP %d, a server error, for the client's mistake (%d expected)", what, r.status, want[0])
	default:
		t.Warn("%s: HTTP %d instead of %d", what, r.status, want[0])
	}
	t.restError(r)
}

// restError checks that r carries a KServe error body {"error": "..."} and returns the message.
func (t *T) restError(r restResponse) string {
	var e struct {
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil || e.Error == nil || *e.Error == "" {
		t.Fail(`an {"error": "..."} body`, r.String())
	}
	return *e.Error
}
