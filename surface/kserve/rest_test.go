package kserve_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// restPeer is one real HTTP client of the REST protocol: net/http over HTTP/1.1, or over
// cleartext HTTP/2 with prior knowledge, the two ways the gateway's one port serves it.
type restPeer struct {
	name string
	url  string
	c    *http.Client
}

func restPeers(srv *gatewaytest.Server) []restPeer {
	return []restPeer{
		{"http1", srv.URL, &http.Client{Transport: &http.Transport{}}},
		{"h2c", srv.URL, gatewaytest.H2CClient()},
	}
}

// restReply is one REST answer, read whole.
type restReply struct {
	status int
	header http.Header
	body   []byte
	proto  string
}

func (r restReply) String() string {
	return fmt.Sprintf("HTTP %d %s", r.status, r.body[:min(len(r.body), 300)])
}

// errorMessage returns the message of a KServe error body, failing unless the reply is one.
func (r restReply) errorMessage(t *testing.T) string {
	t.Helper()
	assert.Equal(t, "application/json", r.header.Get("Content-Type"), "error content type")
	var e map[string]any
	require.NoError(t, json.Unmarshal(r.body, &e), "error body %s", r.body)
	require.Len(t, e, 1, "error body has only 'error': %s", r.body)
	msg, ok := e["error"].(string)
	require.True(t, ok, "error body %s", r.body)
	return msg
}

func (p restPeer) do(t *testing.T, method, path string, body []byte, header ...string) restReply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, p.url+path, rd)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := p.c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return restReply{status: res.StatusCode, header: res.Header, body: b, proto: res.Proto}
}

func (p restPeer) get(t *testing.T, path string) restReply { return p.do(t, http.MethodGet, path, nil) }

func (p restPeer) post(t *testing.T, path, body string, header ...string) restReply {
	return p.do(t, http.MethodPost, path, []byte(body), header...)
}

// requireStatusError asserts an error reply's status and exact message.
func requireRESTError(t *testing.T, r restReply, status int, msg string) {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r)
	require.Equal(t, msg, r.errorMessage(t))
}

// jsonArray renders numbers or strings as a JSON array, independently of the code under test.
func jsonArray[T any](vs []T) string {
	b, err := json.Marshal(vs)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func seqInts(n int, f func(int) int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

const simpleJSON = `{"id":"req-1","inputs":[` +
	`{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
	`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`

func simpleOutputsJSON() string {
	return `{"name":"OUTPUT0","datatype":"INT32","shape":[1,16],"data":` + jsonArray(seqInts(16, func(i int) int { return i + 1 })) + `},` +
		`{"name":"OUTPUT1","datatype":"INT32","shape":[1,16],"data":` + jsonArray(seqInts(16, func(i int) int { return i - 1 })) + `}`
}

func TestRESTHealthAndMetadata(t *testing.T) {
	srv := start(t)
	for _, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			for _, path := range []string{"/v2/models/simple/ready", "/v2/models/simple/versions/1/ready"} {
				r := p.get(t, path)
				assert.Equal(t, http.StatusOK, r.status, path)
				assert.Empty(t, r.body, path)
			}
			if p.name == "h2c" {
				assert.Equal(t, "HTTP/2.0", p.get(t, "/v2/health/live").proto)
			}
			r := p.get(t, "/v2/models/nope/ready")
			assert.Equal(t, http.StatusBadRequest, r.status, "an unknown model is not ready")
			assert.Empty(t, r.body)
			requireRESTError(t, p.get(t, "/v2/models/simple/versions/abc/ready"), 400,
				"failed to get model version from specified version string 'abc' (details: stoll), version should be an integral value > 0")

			r = p.get(t, "/v2")
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
			assert.Equal(t, `{"name":"triton","version":"dev","extensions":`+mustJSON(extensionsWithShm())+`}`, string(r.body))
			assert.Contains(t, kserve.Extensions, "binary_tensor_data")

			wantMeta := `{"name":"simple","versions":["1"],"platform":"infergate_cpu",` +
				`"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[-1,16]},{"name":"INPUT1","datatype":"INT32","shape":[-1,16]}],` +
				`"outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[-1,16]},{"name":"OUTPUT1","datatype":"INT32","shape":[-1,16]}]}`
			for _, path := range []string{"/v2/models/simple", "/v2/models/simple/versions/1"} {
				r = p.get(t, path)
				require.Equal(t, http.StatusOK, r.status, "%s", r)
				assert.Equal(t, wantMeta, string(r.body), "exact bytes: shapes are JSON numbers")
			}
			requireRESTError(t, p.get(t, "/v2/models/nope"), 404, "Request for unknown model: 'nope' is not found")
			requireRESTError(t, p.get(t, "/v2/models/simple/versions/2"), 404, "Request for unknown model: 'simple' version 2 is not found")
		})
	}
}

// The server health routes answer as KServe's own server does, {"live": true} and {"ready": true},
// which KServe's InferenceRESTClient parses (is_server_live and is_server_ready call .json() on
// the answer and fail on an empty one); Triton's clients read only the status. Not ready stays
// Triton's 400 with no body.
func TestRESTHealthJSONBodies(t *testing.T) {
	srv := start(t)
	for _, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			for path, want := range map[string]string{"/v2/health/live": `{"live":true}`, "/v2/health/ready": `{"ready":true}`} {
				r := p.get(t, path)
				require.Equal(t, http.StatusOK, r.status, path)
				assert.Equal(t, "application/json", r.header.Get("Content-Type"), path)
				assert.Equal(t, want, string(r.body), path)
			}
		})
	}

	s := kserve.NewService(engines.NewRegistry())
	s.Drain()
	h := s.RESTHandler()
	for path, want := range map[string]struct {
		status int
		body   string
	}{"/v2/health/live": {http.StatusOK, `{"live":true}`}, "/v2/health/ready": {http.StatusBadRequest, ""}} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		assert.Equal(t, want.status, w.Code, path)
		assert.Equal(t, want.body, w.Body.String(), "%s while draining", path)
	}
}

func TestRESTRoutingErrors(t *testing.T) {
	srv := start(t)
	p := restPeers(srv)[0]
	r := p.get(t, "/v2/models/simple/infer")
	requireRESTError(t, r, http.StatusMethodNotAllowed, "Method Not Allowed")
	assert.Equal(t, "POST", r.header.Get("Allow"))
	requireRESTError(t, p.post(t, "/v2/health/live", ""), http.StatusMethodNotAllowed, "Method Not Allowed")
	requireRESTError(t, p.post(t, "/v2/models/simple/config", "{}"), http.StatusMethodNotAllowed, "Method Not Allowed")
	requireRESTError(t, p.get(t, "/v2/repository/index"), http.StatusMethodNotAllowed, "Method Not Allowed")
	requireRESTError(t, p.get(t, "/v2/nothing/here"), http.StatusNotFound, "Not Found")
	requireRESTError(t, p.get(t, "/v2/models/simple/bogus"), http.StatusNotFound, "Not Found")
	// HEAD works wherever GET does.
	head := p.do(t, http.MethodHead, "/v2/health/ready", nil)
	assert.Equal(t, http.StatusOK, head.status)
}

func TestRESTModelConfigMatchesGRPC(t *testing.T) {
	srv := start(t, newIdentityAll())
	ctx := context.Background()
	c := clients(t, srv)[0]
	p := restPeers(srv)[0]
	for _, model := range []string{"simple", "simple_string", "simple_dyna_sequence", "repeat_int32", "identity_fp32", "identity_all"} {
		r := p.get(t, "/v2/models/"+model+"/config")
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		want, err := call[inference.ModelConfigRequest, inference.ModelConfigResponse](ctx, c, "ModelConfig", &inference.ModelConfigRequest{Name: model})
		require.NoError(t, err)
		// protojson reads numbers for 64-bit fields and enum names, so it parses Triton's form.
		got := &inference.ModelConfig{}
		require.NoError(t, protojson.Unmarshal(r.body, got), "%s", r.body)
		assert.True(t, proto.Equal(want.Config, got), "REST config of %s differs from gRPC:\n%s\nvs\n%v", model, r.body, want.Config)
	}
	r := p.get(t, "/v2/models/simple_dyna_sequence/config")
	body := string(r.body)
	for _, want := range []string{
		`"name":"simple_dyna_sequence"`, `"max_batch_size":8`, `"data_type":"TYPE_INT32"`, `"dims":[1]`,
		`"max_sequence_idle_microseconds":10000000`, `"max_queue_delay_microseconds":10000`, `"kind":"KIND_CPU"`,
		`"kind":"CONTROL_SEQUENCE_CORRID"`, `"int32_false_true":[0,1]`, `"optional":false`, `"execute_delay_ms":{"string_value":"3"}`,
	} {
		assert.Contains(t, body, want)
	}
	r = p.get(t, "/v2/models/identity_all/config")
	assert.Contains(t, string(r.body), `"inputs":{"IN_FP32":{"data_type":"TYPE_FP32","dims":[4],"zero_data":true}}`, "only the set member of a oneof")
	requireRESTError(t, p.get(t, "/v2/models/nope/config"), 404, "Request for unknown model: 'nope' is not found")
}

func TestRESTInferSimpleJSON(t *testing.T) {
	srv := start(t)
	for _, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			r := p.post(t, "/v2/models/simple/infer", simpleJSON, "Content-Type", "application/json")
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
			assert.Empty(t, r.header.Get(kserveHeader))
			assert.Equal(t, `{"id":"req-1","model_name":"simple","model_version":"1","outputs":[`+simpleOutputsJSON()+`]}`, string(r.body))

			// Nested data, a version in the path, no id, outputs picked and reordered.
			nested := `{"inputs":[` +
				`{"name":"INPUT0","shape":[2,16],"datatype":"INT32","data":[` + jsonArray(seqInts(16, func(i int) int { return i })) + `,` + jsonArray(seqInts(16, func(i int) int { return 100 + i })) + `]},` +
				`{"name":"INPUT1","shape":[2,16],"datatype":"INT32","data":[[` + strings.Repeat("2,", 15) + `2],[` + strings.Repeat("2,", 15) + `2]]}],` +
				`"outputs":[{"name":"OUTPUT1"},{"name":"OUTPUT0","parameters":{"binary_data":false}}]}`
			r = p.post(t, "/v2/models/simple/versions/1/infer", nested)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			var res struct {
				ID      *string `json:"id"`
				Outputs []struct {
					Name  string  `json:"name"`
					Shape []int64 `json:"shape"`
					Data  []int32 `json:"data"`
				} `json:"outputs"`
			}
			require.NoError(t, json.Unmarshal(r.body, &res))
			assert.Nil(t, res.ID, "no id key when the request had none")
			require.Len(t, res.Outputs, 2)
			assert.Equal(t, "OUTPUT1", res.Outputs[0].Name)
			assert.Equal(t, []int64{2, 16}, res.Outputs[0].Shape)
			assert.Equal(t, int32(-2), res.Outputs[0].Data[0])
			assert.Equal(t, int32(113), res.Outputs[0].Data[31])
			assert.Equal(t, int32(117), res.Outputs[1].Data[31])

			r = p.post(t, "/v2/models/simple_string/infer", `{"inputs":[`+
				`{"name":"INPUT0","shape":[1,16],"datatype":"BYTES","data":`+jsonArray(seqStrings(16, func(i int) string { return strconv.Itoa(i) }))+`},`+
				`{"name":"INPUT1","shape":[1,16],"datatype":"BYTES","data":`+jsonArray(seqStrings(16, func(int) string { return "1" }))+`}]}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, `{"model_name":"simple_string","model_version":"1","outputs":[`+
				`{"name":"OUTPUT0","datatype":"BYTES","shape":[1,16],"data":`+jsonArray(seqStrings(16, func(i int) string { return strconv.Itoa(i + 1) }))+`},`+
				`{"name":"OUTPUT1","datatype":"BYTES","shape":[1,16],"data":`+jsonArray(seqStrings(16, func(i int) string { return strconv.Itoa(i - 1) }))+`}]}`, string(r.body))

			r = p.post(t, "/v2/models/identity_fp32/infer", `{"inputs":[{"name":"INPUT0","shape":[4],"datatype":"FP32","data":[0.1,-2.5,3e10,1e-7]}]}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, `{"model_name":"identity_fp32","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"FP32","shape":[4],"data":[0.1,-2.5,30000000000,1e-7]}]}`, string(r.body))
		})
	}
}

func seqStrings(n int, f func(int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

const kserveHeader = "Inference-Header-Content-Length"

// binaryBody builds a binary tensor data request: the JSON, then each blob in order.
func binaryBody(header string, blobs ...[]byte) ([]byte, string) {
	return append([]byte(header), bytes.Join(blobs, nil)...), strconv.Itoa(len(header))
}

// binaryReply splits a binary response into its JSON and, for each output in order, its bytes
// (nil for a JSON output), checking binary_data_size against what is present.
func binaryReply(t *testing.T, r restReply) (map[string]any, map[string][]byte) {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	require.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
	n, err := strconv.Atoi(r.header.Get(kserveHeader))
	require.NoError(t, err)
	require.LessOrEqual(t, n, len(r.body))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(r.body[:n], &doc), "%s", r.body[:n])
	rest := r.body[n:]
	out := map[string][]byte{}
	for _, o := range doc["outputs"].([]any) {
		o := o.(map[string]any)
		params, _ := o["parameters"].(map[string]any)
		size, ok := params["binary_data_size"].(float64)
		if !ok {
			continue
		}
		require.NotContains(t, o, "data", "a binary output has no JSON data")
		require.LessOrEqual(t, int(size), len(rest))
		out[o["name"].(string)] = rest[:int(size)]
		rest = rest[int(size):]
	}
	require.Empty(t, rest, "no bytes beyond the binary outputs")
	return doc, out
}

func TestRESTInferBinary(t *testing.T) {
	srv := start(t)
	in0 := tensor.Bytes(seq(16, func(i int) int32 { return int32(i) }))
	in1 := tensor.Bytes(seq(16, func(int) int32 { return 1 }))
	for _, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			// Binary inputs and, by binary_data_output, binary outputs.
			body, hl := binaryBody(`{"id":"b","parameters":{"binary_data_output":true},"inputs":[`+
				`{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}},`+
				`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}]}`, in0, in1)
			r := p.do(t, http.MethodPost, "/v2/models/simple/infer", body, kserveHeader, hl)
			doc, out := binaryReply(t, r)
			assert.Equal(t, "b", doc["id"])
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i) + 1 }), int32s(out["OUTPUT0"]))
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i) - 1 }), int32s(out["OUTPUT1"]))
			n, _ := strconv.Atoi(r.header.Get(kserveHeader))
			assert.Equal(t, `{"id":"b","model_name":"simple","model_version":"1","outputs":[`+
				`{"name":"OUTPUT0","datatype":"INT32","shape":[1,16],"parameters":{"binary_data_size":64}},`+
				`{"name":"OUTPUT1","datatype":"INT32","shape":[1,16],"parameters":{"binary_data_size":64}}]}`, string(r.body[:n]), "exact JSON part")

			// Mixed: JSON input + binary input; one output binary, the other JSON.
			body, hl = binaryBody(`{"inputs":[`+
				`{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":`+jsonArray(seqInts(16, func(i int) int { return i }))+`},`+
				`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}],`+
				`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1"}]}`, in1)
			r = p.do(t, http.MethodPost, "/v2/models/simple/infer", body, kserveHeader, hl)
			doc, out = binaryReply(t, r)
			assert.Equal(t, seq(16, func(i int) int32 { return int32(i) + 1 }), int32s(out["OUTPUT0"]))
			assert.NotContains(t, out, "OUTPUT1")
			assert.Equal(t, mustJSON(seqInts(16, func(i int) int { return i - 1 })), mustJSON(doc["outputs"].([]any)[1].(map[string]any)["data"]))

			// Binary BYTES with empty elements, NUL and bytes that are not UTF-8 come back exact.
			elems := frame("", "a\x00b", "\xff\xfe\x00", "", "é")
			body, hl = binaryBody(`{"inputs":[{"name":"INPUT0","shape":[1,5],"datatype":"BYTES","parameters":{"binary_data_size":`+strconv.Itoa(len(elems))+`}}],`+
				`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`, elems)
			_, out = binaryReply(t, p.do(t, http.MethodPost, "/v2/models/simple_identity/infer", body, kserveHeader, hl))
			assert.Equal(t, elems, out["OUTPUT0"])

			// The same tensor as JSON: valid UTF-8 survives, the rest is replaced, not corrupted.
			body, hl = binaryBody(`{"inputs":[{"name":"INPUT0","shape":[1,5],"datatype":"BYTES","parameters":{"binary_data_size":`+strconv.Itoa(len(elems))+`}}]}`, elems)
			r = p.do(t, http.MethodPost, "/v2/models/simple_identity/infer", body, kserveHeader, hl)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"), "no binary output, no binary response")
			assert.Contains(t, string(r.body), `"data":["","a\u0000b","\ufffd\ufffd\u0000","","é"]`)

			// A zero-byte binary input (shape [0]) and its zero-byte output.
			body, hl = binaryBody(`{"inputs":[{"name":"INPUT0","shape":[0],"datatype":"FP32","parameters":{"binary_data_size":0}}],"parameters":{"binary_data_output":true}}`)
			doc, out = binaryReply(t, p.do(t, http.MethodPost, "/v2/models/identity_fp32/infer", body, kserveHeader, hl))
			assert.Equal(t, []byte{}, out["OUTPUT0"])
			assert.Equal(t, []any{0.0}, doc["outputs"].([]any)[0].(map[string]any)["shape"])
		})
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestRESTInferRawBinary(t *testing.T) {
	srv := start(t, newTextModel("text_echo", false, 8))
	p := restPeers(srv)[0]
	data := tensor.Bytes([]float32{1.5, -2, 3, 4, 5})
	r := p.do(t, http.MethodPost, "/v2/models/identity_fp32/infer", data, kserveHeader, "0")
	doc, out := binaryReply(t, r)
	assert.Equal(t, data, out["OUTPUT0"])
	assert.Equal(t, []any{5.0}, doc["outputs"].([]any)[0].(map[string]any)["shape"], "shape deduced from the body")

	// A BYTES [1] input takes the whole body as its one element (on a batching model: [1,1]).
	text := []byte("hello raw \x00\xff world")
	doc, out = binaryReply(t, p.do(t, http.MethodPost, "/v2/models/text_echo/infer", text, kserveHeader, "0"))
	assert.Equal(t, frame(strings.ToUpper(string(text))), out["text_output"])
	assert.Equal(t, []any{1.0, 1.0}, doc["outputs"].([]any)[0].(map[string]any)["shape"])

	requireRESTError(t, p.do(t, http.MethodPost, "/v2/models/simple/infer", make([]byte, 128), kserveHeader, "0"), 400,
		"Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'simple' model configuration")
	requireRESTError(t, p.do(t, http.MethodPost, "/v2/models/simple_identity/infer", []byte("x"), kserveHeader, "0"), 400,
		"For BYTE datatype raw input 'INPUT0', the model must have input shape [1]")
	requireRESTError(t, p.do(t, http.MethodPost, "/v2/models/identity_fp32/infer", []byte{1, 2, 3, 4, 5, 6}, kserveHeader, "0"), 400,
		"input byte size mismatch for input 'INPUT0' for model 'identity_fp32'. Expected 4, got 6")
}

// TestRESTInferErrorsMatchGRPC sends each bad request over gRPC (grpc-go) and as its REST JSON
// equivalent: the message must be identical, and the REST status the one Triton maps its code to.
func TestRESTInferErrorsMatchGRPC(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	grpcClient := clients(t, srv)[0]
	p := restPeers(srv)[0]
	ints := func(n int) []int32 { return seq(n, func(i int) int32 { return int32(i) }) }
	type tensorSpec struct {
		name, datatype string
		shape          []int64
		values         any // []int32, []float32 or []string
	}
	build := func(model string, ts []tensorSpec, outputs []string, params map[string]any) (*inference.ModelInferRequest, string) {
		req := &inference.ModelInferRequest{ModelName: model}
		var js []map[string]any
		for _, x := range ts {
			req.Inputs = append(req.Inputs, rawInput(x.name, x.datatype, x.shape))
			var raw []byte
			switch v := x.values.(type) {
			case []int32:
				raw = tensor.Bytes(v)
			case []float32:
				raw = tensor.Bytes(v)
			case []string:
				raw = tensor.JoinBytes(v)
			}
			req.RawInputContents = append(req.RawInputContents, raw)
			js = append(js, map[string]any{"name": x.name, "datatype": x.datatype, "shape": x.shape, "data": x.values})
		}
		body := map[string]any{"inputs": js}
		if js == nil {
			body["inputs"] = []any{}
		}
		var outs []map[string]any
		for _, o := range outputs {
			req.Outputs = append(req.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: o})
			outs = append(outs, map[string]any{"name": o})
		}
		if outs != nil {
			body["outputs"] = outs
		}
		if params != nil {
			body["parameters"] = params
			req.Parameters = map[string]*inference.InferParameter{}
			for k, v := range params {
				switch v := v.(type) {
				case bool:
					req.Parameters[k] = boolParam(v)
				case int:
					req.Parameters[k] = int64Param(int64(v))
				case string:
					req.Parameters[k] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: v}}
				}
			}
		}
		return req, mustJSON(body)
	}
	in0 := tensorSpec{"INPUT0", "INT32", []int64{1, 16}, ints(16)}
	in1 := tensorSpec{"INPUT1", "INT32", []int64{1, 16}, ints(16)}
	for _, c := range []struct {
		name    string
		model   string
		inputs  []tensorSpec
		outputs []string
		params  map[string]any
		status  int
		code    connect.Code
	}{
		{"wrong datatype", "simple", []tensorSpec{{"INPUT0", "FP32", []int64{1, 16}, make([]float32, 16)}, in1}, nil, nil, 400, connect.CodeInvalidArgument},
		{"unknown datatype", "simple", []tensorSpec{{"INPUT0", "FOO", []int64{1, 16}, []int32{}}, in1}, nil, nil, 400, connect.CodeInvalidArgument},
		{"wrong shape", "simple", []tensorSpec{{"INPUT0", "INT32", []int64{1, 15}, ints(15)}, {"INPUT1", "INT32", []int64{1, 15}, ints(15)}}, nil, nil, 400, connect.CodeInvalidArgument},
		{"no batch dim", "simple", []tensorSpec{{"INPUT0", "INT32", []int64{16}, ints(16)}, {"INPUT1", "INT32", []int64{16}, ints(16)}}, nil, nil, 400, connect.CodeInvalidArgument},
		{"batch too large", "simple", []tensorSpec{{"INPUT0", "INT32", []int64{9, 16}, ints(144)}, {"INPUT1", "INT32", []int64{9, 16}, ints(144)}}, nil, nil, 400, connect.CodeInvalidArgument},
		{"missing input", "simple", []tensorSpec{in0}, nil, nil, 400, connect.CodeInvalidArgument},
		{"no inputs", "simple", nil, nil, nil, 400, connect.CodeInvalidArgument},
		{"unknown input", "simple", []tensorSpec{in0, in1, {"INPUT9", "INT32", []int64{1, 16}, ints(16)}}, nil, nil, 400, connect.CodeInvalidArgument},
		{"duplicate input", "simple", []tensorSpec{in0, in0}, nil, nil, 400, connect.CodeInvalidArgument},
		{"unknown output", "simple", []tensorSpec{in0, in1}, []string{"OUTPUT9"}, nil, 400, connect.CodeInvalidArgument},
		{"duplicate output", "simple", []tensorSpec{in0, in1}, []string{"OUTPUT0", "OUTPUT0"}, nil, 400, connect.CodeInvalidArgument},
		{"dimension -1", "simple", []tensorSpec{{"INPUT0", "INT32", []int64{-1, 16}, ints(16)}, in1}, nil, nil, 400, connect.CodeInvalidArgument},
		{"too few elements", "simple", []tensorSpec{{"INPUT0", "INT32", []int64{1, 16}, ints(15)}, in1}, nil, nil, 400, connect.CodeInvalidArgument},
		{"too many strings", "simple_string", []tensorSpec{{"INPUT0", "BYTES", []int64{1, 16}, seqStrings(17, strconv.Itoa)}, {"INPUT1", "BYTES", []int64{1, 16}, seqStrings(16, strconv.Itoa)}}, nil, nil, 400, connect.CodeInvalidArgument},
		{"reserved parameter", "simple", []tensorSpec{in0, in1}, nil, map[string]any{"triton_foo": true}, 400, connect.CodeInvalidArgument},
		{"parameter of wrong type", "simple", []tensorSpec{in0, in1}, nil, map[string]any{"sequence_start": 1}, 400, connect.CodeInvalidArgument},
		{"sequence without id", "simple_sequence", []tensorSpec{{"INPUT", "INT32", []int64{1, 1}, ints(1)}}, nil, nil, 400, connect.CodeInvalidArgument},
		{"unknown model", "nope", []tensorSpec{in0, in1}, nil, nil, 404, connect.CodeNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, body := build(c.model, c.inputs, c.outputs, c.params)
			_, err := infer(ctx, grpcClient, req)
			require.Error(t, err)
			require.Equal(t, c.code, codeOf(err), "gRPC code")
			r := p.post(t, "/v2/models/"+c.model+"/infer", body)
			requireRESTError(t, r, c.status, messageOf(err))
		})
	}

	// Decoupled models: UNIMPLEMENTED on both, with each protocol's own Triton wording.
	_, err := infer(ctx, grpcClient, repeatRequest("", []int32{1}, 0))
	requireStatus(t, err, connect.CodeUnimplemented, "ModelInfer RPC doesn't support models with decoupled transaction policy")
	requireRESTError(t, p.post(t, "/v2/models/repeat_int32/infer", `{"inputs":[]}`), 501,
		"HTTP end point doesn't support models with decoupled transaction policy")
	requireRESTError(t, p.post(t, "/v2/models/simple/versions/abc/infer", simpleJSON), 400,
		"failed to get model version from specified version string 'abc' (details: stoll), version should be an integral value > 0")
}

func TestRESTInferMalformed(t *testing.T) {
	srv := start(t)
	p := restPeers(srv)[0]
	simpleInput := func(name, extra string) string {
		return `{"name":"` + name + `","shape":[1,16],"datatype":"INT32"` + extra + `}`
	}
	data := `,"data":` + jsonArray(seqInts(16, func(i int) int { return i }))
	for _, c := range []struct{ name, body, want string }{
		{"not JSON", `{"inputs":[`, "failed to parse the inference request JSON: unexpected end of JSON input (at offset 11)"},
		{"garbage", `hello`, "failed to parse the inference request JSON: invalid character 'h' looking for beginning of value (at offset 1)"},
		{"not an object", `[1,2]`, "failed to parse the inference request JSON: it must be a JSON object, not a JSON array"},
		{"shape of strings", `{"inputs":[{"name":"INPUT0","shape":["1"],"datatype":"INT32","data":[1]}]}`,
			"failed to parse the inference request JSON: 'inputs.shape' must be a JSON integer, not a JSON string (at offset 40)"},
		{"id not a string", `{"id":5,"inputs":[]}`, "failed to parse the inference request JSON: 'id' must be a JSON string, not a JSON number (at offset 7)"},
		{"data out of range", `{"inputs":[` + simpleInput("INPUT0", `,"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,2147483648]`) + `,` + simpleInput("INPUT1", data) + `]}`,
			"Unable to parse 'data' of input 'INPUT0': element 15 (2147483648) is out of range for INT32 [-2147483648, 2147483647] (at byte 36 of the data)"},
		{"data of strings", `{"inputs":[` + simpleInput("INPUT0", `,"data":["0"]`) + `]}`,
			"Unable to parse 'data' of input 'INPUT0': element 0 is a string, but INT32 data must be numbers (at byte 1 of the data)"},
		{"data not an array", `{"inputs":[` + simpleInput("INPUT0", `,"data":5`) + `]}`,
			"Unable to parse 'data' of input 'INPUT0': expected a JSON array, got 5"},
		{"no data", `{"inputs":[` + simpleInput("INPUT0", "") + `]}`,
			"Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But no field is set (input 'INPUT0' of model 'simple')"},
		{"data and binary", `{"inputs":[` + simpleInput("INPUT0", `,"parameters":{"binary_data_size":64}`+data) + `]}`,
			"Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size' (input 'INPUT0' of model 'simple')"},
		{"binary without header", `{"inputs":[` + simpleInput("INPUT0", `,"parameters":{"binary_data_size":64}`) + `]}`,
			"must specify valid 'Inference-Header-Content-Length' in request header and 'binary_data_size' when passing inputs in binary data format (input 'INPUT0' of model 'simple')"},
		{"bad binary size", `{"inputs":[` + simpleInput("INPUT0", `,"parameters":{"binary_data_size":-4}`) + `]}`,
			"Unable to parse 'binary_data_size' of input 'INPUT0': expected a non-negative integer, got -4"},
		{"bad binary_data_output", `{"parameters":{"binary_data_output":1},"inputs":[]}`, "Unable to parse 'binary_data_output': expected a boolean, got 1"},
		{"bad binary_data", `{"inputs":[],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":"yes"}}]}`, `Unable to parse 'binary_data': expected a boolean, got "yes"`},
		{"object parameter", `{"parameters":{"x":{}},"inputs":[]}`, "parameter 'x' has invalid type. It should be either 'int', 'bool', 'double', or 'string'."},
		{"FP16 as JSON", `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP16","data":[1]}]}`,
			"receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			requireRESTError(t, p.post(t, "/v2/models/simple/infer", c.body), 400, c.want)
		})
	}
	requireRESTError(t, p.post(t, "/v2/models/simple/infer", `{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"INT32","parameters":{"shared_memory_region":"r"}}]}`), 400,
		"'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT0'")
}

func TestRESTInferBinaryErrors(t *testing.T) {
	srv := start(t)
	p := restPeers(srv)[0]
	header := `{"inputs":[` +
		`{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}},` +
		`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}]}`
	post := func(body []byte, hl string) restReply {
		return p.do(t, http.MethodPost, "/v2/models/simple/infer", body, kserveHeader, hl)
	}
	full, hl := binaryBody(header, make([]byte, 64), make([]byte, 64))
	require.Equal(t, http.StatusOK, post(full, hl).status)

	requireRESTError(t, post(full, strconv.Itoa(len(full)+1)), 400,
		fmt.Sprintf("inference header size should be in range (0, %d), got: %d", len(full), len(full)+1))
	requireRESTError(t, post(full, "-5"), 400, fmt.Sprintf("inference header size should be in range (0, %d), got: -5", len(full)))
	requireRESTError(t, post(full, "ten"), 400, "Unable to parse Inference-Header-Content-Length, got: ten")
	requireRESTError(t, post(full[:len(full)-4], hl), 400, "unexpected size for input 'INPUT1', expecting 4 additional bytes for model 'simple'")
	requireRESTError(t, post(append(bytes.Clone(full), 1, 2, 3), hl), 400, "unexpected additional input data for model 'simple': 3 bytes after the last binary input")
	requireRESTError(t, post(full, strconv.Itoa(len(header)-1)), 400,
		fmt.Sprintf("failed to parse the inference request JSON: unexpected end of JSON input (at offset %d)", len(header)-1))
	// A size field larger than anything present is checked, never allocated.
	huge, hl := binaryBody(`{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":18446744073709551615}}]}`, make([]byte, 8))
	requireRESTError(t, post(huge, hl), 400, "unexpected size for input 'INPUT0', expecting 18446744073709551607 additional bytes for model 'simple'")
	// Sizes that sum right but split wrong are caught by the byte-size check of each input.
	split, hl := binaryBody(strings.Replace(strings.Replace(header, "64", "60", 1), "64", "68", 1), make([]byte, 128))
	requireRESTError(t, post(split, hl), 400, "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60")
}

// TestRESTFP16NeedsBinary follows Triton: half floats travel only as binary data.
func TestRESTFP16NeedsBinary(t *testing.T) {
	srv := start(t, newIdentityAll())
	p := restPeers(srv)[0]
	half := []byte{0x00, 0x3c, 0x00, 0xc0} // 1.0, -2.0
	body, hl := binaryBody(`{"inputs":[{"name":"IN_FP16","shape":[2],"datatype":"FP16","parameters":{"binary_data_size":4}}],"outputs":[{"name":"OUT_FP16","parameters":{"binary_data":true}}]}`, half)
	_, out := binaryReply(t, p.do(t, http.MethodPost, "/v2/models/identity_all/infer", body, kserveHeader, hl))
	assert.Equal(t, half, out["OUT_FP16"])

	body, hl = binaryBody(`{"inputs":[{"name":"IN_BF16","shape":[2],"datatype":"BF16","parameters":{"binary_data_size":4}}]}`, half)
	requireRESTError(t, p.do(t, http.MethodPost, "/v2/models/identity_all/infer", body, kserveHeader, hl), 400,
		"sending BF16 data via JSON is not supported. Please use the binary data format for output")
	requireRESTError(t, p.post(t, "/v2/models/identity_all/infer", `{"inputs":[{"name":"IN_BF16","shape":[1],"datatype":"BF16","data":[1.5]}]}`), 400,
		"receiving BF16 data via JSON is not supported. Please use the binary data format for input IN_BF16")

	// NaN has no JSON form either; binary it is.
	nan := tensor.Bytes([]float32{1, float32(math.NaN())})
	body, hl = binaryBody(`{"inputs":[{"name":"IN_FP32","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}}]}`, nan)
	requireRESTError(t, p.do(t, http.MethodPost, "/v2/models/identity_all/infer", body, kserveHeader, hl), 400,
		"output 'OUT_FP32' of model 'identity_all' cannot be sent as JSON: element 1 is NaN, which JSON cannot represent; request it with the binary_data parameter")
}

// TestRESTEveryDatatypeRoundTrips sends every JSON-capable datatype through an identity model as
// JSON and checks the JSON that comes back, then sends the same values as binary and checks that
// JSON and binary requests agree with each other and with gRPC.
func TestRESTEveryDatatypeRoundTrips(t *testing.T) {
	srv := start(t, newIdentityAll())
	p := restPeers(srv)[0]
	grpcClient := clients(t, srv)[0]
	cases := []struct {
		dt   string
		data string
		raw  []byte
	}{
		{"BOOL", `[true,false,true]`, []byte{1, 0, 1}},
		{"UINT8", `[0,7,255]`, []byte{0, 7, 255}},
		{"UINT16", `[0,65535]`, tensor.Bytes([]uint16{0, 65535})},
		{"UINT32", `[0,4294967295]`, tensor.Bytes([]uint32{0, math.MaxUint32})},
		{"UINT64", `[0,18446744073709551615]`, tensor.Bytes([]uint64{0, math.MaxUint64})},
		{"INT8", `[-128,127]`, tensor.Bytes([]int8{-128, 127})},
		{"INT16", `[-32768,32767]`, tensor.Bytes([]int16{-32768, 32767})},
		{"INT32", `[-2147483648,2147483647]`, tensor.Bytes([]int32{math.MinInt32, math.MaxInt32})},
		{"INT64", `[-9223372036854775808,9223372036854775807]`, tensor.Bytes([]int64{math.MinInt64, math.MaxInt64})},
		{"FP32", `[0.1,-3.5,3.4028235e+38]`, tensor.Bytes([]float32{0.1, -3.5, math.MaxFloat32})},
		{"FP64", `[0.1,-3.5,1.7976931348623157e+308]`, tensor.Bytes([]float64{0.1, -3.5, math.MaxFloat64})},
		{"BYTES", `["","nul\u0000","ü€"]`, frame("", "nul\x00", "ü€")},
	}
	var inputs []string
	var blobs [][]byte
	var binInputs []string
	for _, c := range cases {
		n := strings.Count(c.data, ",") + 1
		inputs = append(inputs, fmt.Sprintf(`{"name":"IN_%s","shape":[%d],"datatype":"%s","data":%s}`, c.dt, n, c.dt, c.data))
		binInputs = append(binInputs, fmt.Sprintf(`{"name":"IN_%s","shape":[%d],"datatype":"%s","parameters":{"binary_data_size":%d}}`, c.dt, n, c.dt, len(c.raw)))
		blobs = append(blobs, c.raw)
	}
	r := p.post(t, "/v2/models/identity_all/infer", `{"inputs":[`+strings.Join(inputs, ",")+`]}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var res struct {
		Outputs []struct {
			Name     string          `json:"name"`
			Datatype string          `json:"datatype"`
			Data     json.RawMessage `json:"data"`
		} `json:"outputs"`
	}
	require.NoError(t, json.Unmarshal(r.body, &res))
	require.Len(t, res.Outputs, len(cases))
	for i, c := range cases {
		assert.Equal(t, "OUT_"+c.dt, res.Outputs[i].Name)
		assert.Equal(t, c.dt, res.Outputs[i].Datatype)
		assert.Equal(t, c.data, string(res.Outputs[i].Data), c.dt)
	}

	body, hl := binaryBody(`{"parameters":{"binary_data_output":true},"inputs":[`+strings.Join(binInputs, ",")+`]}`, blobs...)
	_, out := binaryReply(t, p.do(t, http.MethodPost, "/v2/models/identity_all/infer", body, kserveHeader, hl))
	req := &inference.ModelInferRequest{ModelName: "identity_all"}
	for i, c := range cases {
		assert.Equal(t, c.raw, out["OUT_"+c.dt], "binary round trip of %s", c.dt)
		n := int64(strings.Count(c.data, ",") + 1)
		req.Inputs = append(req.Inputs, rawInput("IN_"+c.dt, c.dt, []int64{n}))
		req.RawInputContents = append(req.RawInputContents, blobs[i])
	}
	grpcRes, err := infer(context.Background(), grpcClient, req)
	require.NoError(t, err)
	for i, c := range cases {
		assert.Equal(t, c.raw, grpcRes.RawOutputContents[i], "gRPC agrees on %s", c.dt)
	}
}

func TestRESTGzipAndDeflateRequests(t *testing.T) {
	srv := start(t)
	for _, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			_, _ = zw.Write([]byte(simpleJSON))
			require.NoError(t, zw.Close())
			r := p.do(t, http.MethodPost, "/v2/models/simple/infer", gz.Bytes(), "Content-Encoding", "gzip")
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Contains(t, string(r.body), `"id":"req-1"`)

			var df bytes.Buffer
			dw := zlib.NewWriter(&df)
			_, _ = dw.Write([]byte(simpleJSON))
			require.NoError(t, dw.Close())
			r = p.do(t, http.MethodPost, "/v2/models/simple/infer", df.Bytes(), "Content-Encoding", "deflate")
			require.Equal(t, http.StatusOK, r.status, "%s", r)

			// Binary data inside a compressed body: the header length counts decompressed bytes.
			in := tensor.Bytes([]float32{1, 2, 3})
			body, hl := binaryBody(`{"inputs":[{"name":"INPUT0","shape":[3],"datatype":"FP32","parameters":{"binary_data_size":12}}],"parameters":{"binary_data_output":true}}`, in)
			gz.Reset()
			zw = gzip.NewWriter(&gz)
			_, _ = zw.Write(body)
			require.NoError(t, zw.Close())
			_, out := binaryReply(t, p.do(t, http.MethodPost, "/v2/models/identity_fp32/infer", gz.Bytes(), "Content-Encoding", "gzip", kserveHeader, hl))
			assert.Equal(t, in, out["OUTPUT0"])

			requireRESTError(t, p.do(t, http.MethodPost, "/v2/models/simple/infer", []byte("not gzip at all"), "Content-Encoding", "gzip"), 400,
				"failed to decompress the gzip request body: gzip: invalid header")
			r = p.do(t, http.MethodPost, "/v2/models/simple/infer", []byte(simpleJSON), "Content-Encoding", "br")
			requireRESTError(t, r, http.StatusUnsupportedMediaType, "Unsupported compression type 'br'; infergate accepts gzip and deflate request bodies")
			assert.Equal(t, "gzip, deflate", r.header.Get("Accept-Encoding"))
		})
	}
}

func TestRESTBodyLimit(t *testing.T) {
	srv := gatewaytest.Start(t, gateway.Config{MaxMessageBytes: 1024})
	p := restPeers(srv)[0]
	big := `{"inputs":[{"name":"INPUT0","shape":[600],"datatype":"FP32","data":[` + strings.Repeat("1,", 599) + `1]}]}`
	require.Greater(t, len(big), 1024)
	requireRESTError(t, p.post(t, "/v2/models/identity_fp32/infer", big), http.StatusRequestEntityTooLarge,
		fmt.Sprintf("request body of %d bytes exceeds the server's limit of 1024 bytes", len(big)))

	// Without a Content-Length (chunked) and when decompressing, the limit holds as bytes arrive.
	req, err := http.NewRequest(http.MethodPost, p.url+"/v2/models/identity_fp32/infer", io.MultiReader(strings.NewReader(big)))
	require.NoError(t, err)
	req.ContentLength = -1
	res, err := p.c.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode)
	assert.Equal(t, `{"error":"request body of more than 1024 bytes exceeds the server's limit of 1024 bytes"}`, string(b))

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(big))
	require.NoError(t, zw.Close())
	require.Less(t, gz.Len(), 1024, "small on the wire, large once decompressed")
	requireRESTError(t, p.do(t, http.MethodPost, "/v2/models/identity_fp32/infer", gz.Bytes(), "Content-Encoding", "gzip"), http.StatusRequestEntityTooLarge,
		"request body of more than 1024 bytes exceeds the server's limit of 1024 bytes")

	// A chunked body at the limit still works.
	small := `{"inputs":[{"name":"INPUT0","shape":[2],"datatype":"FP32","data":[1,2]}]}`
	req, err = http.NewRequest(http.MethodPost, p.url+"/v2/models/identity_fp32/infer", io.MultiReader(strings.NewReader(small)))
	require.NoError(t, err)
	req.ContentLength = -1
	res, err = p.c.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
}

// TestRESTStatisticsCountRESTInfers checks Triton's statistics JSON and that REST infers count in
// the same per-model statistics as gRPC ones.
func TestRESTStatisticsCountRESTInfers(t *testing.T) {
	srv := start(t)
	ctx := context.Background()
	c := clients(t, srv)[0]
	p := restPeers(srv)[0]
	grpcStats := func() *inference.ModelStatistics {
		s, err := call[inference.ModelStatisticsRequest, inference.ModelStatisticsResponse](ctx, c, "ModelStatistics", &inference.ModelStatisticsRequest{Name: "simple"})
		require.NoError(t, err)
		return s.ModelStats[0]
	}
	before := grpcStats()
	for range 3 {
		require.Equal(t, http.StatusOK, p.post(t, "/v2/models/simple/infer", simpleJSON).status)
	}
	require.Equal(t, http.StatusBadRequest, p.post(t, "/v2/models/simple/infer", `{"inputs":[]}`).status)
	_, err := infer(ctx, c, simpleRequest(""))
	require.NoError(t, err)

	r := p.get(t, "/v2/models/simple/stats")
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	var doc struct {
		ModelStats []struct {
			Name           string `json:"name"`
			Version        string `json:"version"`
			LastInference  uint64 `json:"last_inference"`
			InferenceCount uint64 `json:"inference_count"`
			ExecutionCount uint64 `json:"execution_count"`
			InferenceStats map[string]struct {
				Count uint64 `json:"count"`
				Ns    uint64 `json:"ns"`
			} `json:"inference_stats"`
			BatchStats []any `json:"batch_stats"`
		} `json:"model_stats"`
	}
	require.NoError(t, json.Unmarshal(r.body, &doc), "numbers, not strings: %s", r.body)
	require.Len(t, doc.ModelStats, 1)
	s := doc.ModelStats[0]
	assert.Equal(t, "simple", s.Name)
	assert.Equal(t, "1", s.Version)
	assert.Equal(t, before.InferenceCount+4, s.InferenceCount)
	assert.Equal(t, before.ExecutionCount+4, s.ExecutionCount)
	assert.Equal(t, before.InferenceStats.Success.Count+4, s.InferenceStats["success"].Count)
	assert.Equal(t, before.InferenceStats.Fail.Count+1, s.InferenceStats["fail"].Count)
	assert.Positive(t, s.InferenceStats["success"].Ns)
	for _, k := range []string{"success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss"} {
		assert.Contains(t, s.InferenceStats, k)
	}
	assert.NotNil(t, s.BatchStats, "batch_stats is an array")
	assert.Regexp(t, regexp.MustCompile(`"inference_count":\d+,"execution_count":\d+`), string(r.body))
	assert.Equal(t, grpcStats().InferenceCount, s.InferenceCount, "the same numbers as gRPC")

	r = p.get(t, "/v2/models/simple/versions/1/stats")
	require.Equal(t, http.StatusOK, r.status)
	r = p.get(t, "/v2/models/stats")
	require.Equal(t, http.StatusOK, r.status)
	require.NoError(t, json.Unmarshal(r.body, &doc))
	assert.Len(t, doc.ModelStats, 9)
	requireRESTError(t, p.get(t, "/v2/models/nope/stats"), 404, "Request for unknown model: 'nope' is not found")
}

func TestRESTRepository(t *testing.T) {
	srv := start(t)
	p := restPeers(srv)[1]
	type entry struct {
		Name, Version, State, Reason string
	}
	index := func(body string) []entry {
		r := p.post(t, "/v2/repository/index", body)
		require.Equal(t, http.StatusOK, r.status, "%s", r)
		var raw []map[string]string
		require.NoError(t, json.Unmarshal(r.body, &raw), "%s", r.body)
		var out []entry
		for _, m := range raw {
			assert.Len(t, m, 4, "name, version, state, reason")
			out = append(out, entry{m["name"], m["version"], m["state"], m["reason"]})
		}
		return out
	}
	all := index("")
	require.Len(t, all, 9)
	assert.Equal(t, entry{"simple", "1", "READY", ""}, all[0])

	r := p.post(t, "/v2/repository/models/simple/unload", "")
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	assert.Empty(t, r.body)
	assert.Equal(t, http.StatusBadRequest, p.get(t, "/v2/models/simple/ready").status)
	requireRESTError(t, p.post(t, "/v2/models/simple/infer", simpleJSON), 404, "Request for unknown model: 'simple' has no available versions")
	requireRESTError(t, p.post(t, "/v2/models/simple/versions/1/infer", simpleJSON), 503, "Request for unknown model: 'simple' version 1 is not at ready state")
	assert.Equal(t, entry{"simple", "1", "UNAVAILABLE", "unloaded"}, index(`{"ready":false}`)[0])
	assert.Len(t, index(`{"ready":true}`), 8)
	requireRESTError(t, p.post(t, "/v2/repository/index", `{"ready":"yes"}`), 400, `Unable to parse 'ready': expected a boolean, got "yes"`)
	requireRESTError(t, p.post(t, "/v2/repository/index", `{"ready":`), 400, "failed to parse the repository index request: unexpected end of JSON input (at offset 9)")

	require.Equal(t, http.StatusOK, p.post(t, "/v2/repository/models/simple/load", `{}`).status)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/models/simple/infer", simpleJSON).status)
	assert.Equal(t, http.StatusOK, p.get(t, "/v2/models/simple/ready").status)
	requireRESTError(t, p.post(t, "/v2/repository/models/nope/load", ""), 400, "failed to load 'nope', failed to poll from model repository")
	requireRESTError(t, p.post(t, "/v2/repository/models/nope/unload", ""), 400, "failed to unload 'nope', no version is available")
	requireRESTError(t, p.post(t, "/v2/repository/models/simple/load", `{"parameters":{"config":"{}","file:1/model.onnx":"AAAA"}}`), 501,
		"failed to load 'simple': model file overrides ('file:1/model.onnx') are not supported: infergate's models have no model files to replace")
	require.Equal(t, http.StatusOK, p.post(t, "/v2/repository/models/simple/load", `{"parameters":{"config":"{\"max_batch_size\":4}"}}`).status)
	five := jsonArray(seqInts(80, func(i int) int { return i }))
	simpleJSON5 := `{"inputs":[{"name":"INPUT0","shape":[5,16],"datatype":"INT32","data":` + five + `},` +
		`{"name":"INPUT1","shape":[5,16],"datatype":"INT32","data":` + five + `}]}`
	requireRESTError(t, p.post(t, "/v2/models/simple/infer", simpleJSON5), 400, "inference request batch-size must be <= 4 for 'simple'")
	require.Equal(t, http.StatusOK, p.post(t, "/v2/repository/models/simple/unload", `{"parameters":{"unload_dependents":true}}`).status)
	require.Equal(t, http.StatusOK, p.post(t, "/v2/repository/models/simple/load", "").status)
}

// Test models for the REST surface.

// identityAll echoes every input IN_<DT> present (one optional input per datatype, any length) as
// OUT_<DT>, so each datatype can travel through a real model.
type identityAll struct{ cfg *inference.ModelConfig }

func newIdentityAll() *identityAll {
	cfg := &inference.ModelConfig{Name: "identity_all", Platform: "test"}
	for dt := inference.DataType_TYPE_BOOL; dt <= inference.DataType_TYPE_BF16; dt++ {
		name := tensor.Name(dt)
		cfg.Input = append(cfg.Input, &inference.ModelInput{Name: "IN_" + name, DataType: dt, Dims: []int64{-1}, Optional: true})
		cfg.Output = append(cfg.Output, &inference.ModelOutput{Name: "OUT_" + name, DataType: dt, Dims: []int64{-1}})
	}
	// A warmup setting gives the config a scalar oneof member (zero_data) for the JSON rendering.
	cfg.ModelWarmup = []*inference.ModelWarmup{{Name: "zeros", BatchSize: 1, Inputs: map[string]*inference.ModelWarmup_Input{
		"IN_FP32": {DataType: inference.DataType_TYPE_FP32, Dims: []int64{4}, InputDataType: &inference.ModelWarmup_Input_ZeroData{ZeroData: true}},
	}}}
	return &identityAll{cfg}
}

func (m *identityAll) Config() *inference.ModelConfig { return m.cfg }

func (m *identityAll) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	res := &engines.Response{}
	for _, out := range m.cfg.Output {
		if in := req.Input("IN_" + strings.TrimPrefix(out.Name, "OUT_")); in != nil {
			t := *in
			t.Name = out.Name
			res.Outputs = append(res.Outputs, t)
		}
	}
	return send(res)
}

// textModel is an LLM-shaped model: text_input BYTES [1] -> text_output BYTES [1]. The plain kind
// answers the upper-cased text at once, with a response parameter "words". The decoupled kind
// streams one response per word; request parameters "delay_ms" pause before each word,
// "fail_after" fails after that many words and "empty_final" ends with a response that has no
// outputs. It records cancellations.
type textModel struct {
	cfg       *inference.ModelConfig
	cancelled chan struct{}
	once      sync.Once
	// held, for a request with parameter "hold", is closed to let it go on past its first word.
	held atomic.Pointer[chan struct{}]
}

func newTextModel(name string, decoupled bool, maxBatch int32) *textModel {
	cfg := &inference.ModelConfig{Name: name, Platform: "test", MaxBatchSize: maxBatch,
		Input:  []*inference.ModelInput{{Name: "text_input", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}}},
		Output: []*inference.ModelOutput{{Name: "text_output", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}}},
	}
	if decoupled {
		cfg.ModelTransactionPolicy = &inference.ModelTransactionPolicy{Decoupled: true}
	}
	return &textModel{cfg: cfg, cancelled: make(chan struct{})}
}

func (m *textModel) Config() *inference.ModelConfig { return m.cfg }

func (m *textModel) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("text_input")
	elems, err := tensor.SplitBytes(in.Data)
	if err != nil || len(elems) != 1 {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("text_input must be one element"))
	}
	text := string(elems[0])
	words := strings.Fields(text)
	if !m.cfg.GetModelTransactionPolicy().GetDecoupled() {
		return send(&engines.Response{
			Outputs:    []engines.Tensor{{Name: "text_output", Datatype: inference.DataType_TYPE_STRING, Shape: in.Shape, Data: tensor.JoinBytes([]string{strings.ToUpper(text)})}},
			Parameters: map[string]*inference.InferParameter{"words": int64Param(int64(len(words)))},
		})
	}
	delay := time.Duration(req.Parameters["delay_ms"].GetInt64Param()) * time.Millisecond
	failAfter, fail := req.Parameters["fail_after"], req.Parameters["fail_after"] != nil
	for i, w := range words {
		if fail && int64(i) == failAfter.GetInt64Param() {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("model '%s' failed after %d words", m.cfg.Name, i))
		}
		if delay > 0 {
			select {
			case <-ctx.Done():
				m.once.Do(func() { close(m.cancelled) })
				return ctx.Err()
			case <-time.After(delay):
			}
		}
		err := send(&engines.Response{Outputs: []engines.Tensor{{Name: "text_output", Datatype: inference.DataType_TYPE_STRING, Shape: []int64{1}, Data: tensor.JoinBytes([]string{w})}}})
		if err != nil {
			return err
		}
		if i == 0 && req.Parameters["hold"].GetBoolParam() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-*m.held.Load():
			}
		}
	}
	if req.Parameters["empty_final"].GetBoolParam() {
		return send(&engines.Response{Final: true}) // flags only, as some backends end
	}
	return nil
}

// sseEvents reads server-sent events, returning each data payload.
func sseEvents(t *testing.T, body io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		require.True(t, ok, "every line is a data: line, got %q", line)
		out = append(out, data)
	}
	require.NoError(t, sc.Err())
	return out
}

func TestRESTGenerate(t *testing.T) {
	echo, words := newTextModel("text_echo", false, 8), newTextModel("text_words", true, 0)
	srv := start(t, echo, words)
	for _, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			r := p.post(t, "/v2/models/text_echo/generate", `{"text_input":"hello world","parameters":{"temperature":0.5}}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, "application/json", r.header.Get("Content-Type"))
			assert.Equal(t, `{"model_name":"text_echo","model_version":"1","words":2,"text_output":"HELLO WORLD"}`, string(r.body))

			r = p.post(t, "/v2/models/text_echo/versions/1/generate", `{"id":"g1","text_input":["x"],"max_tokens":5}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, `{"id":"g1","model_name":"text_echo","model_version":"1","words":1,"text_output":"X"}`, string(r.body))

			// A decoupled model that answers once is fine on /generate; one that answers more
			// often (or never) is refused with Triton's message.
			r = p.post(t, "/v2/models/text_words/generate", `{"text_input":"single"}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, `{"model_name":"text_words","model_version":"1","text_output":"single"}`, string(r.body))
			requireRESTError(t, p.post(t, "/v2/models/text_words/generate", `{"text_input":"one two three"}`), 400,
				"generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses")
			requireRESTError(t, p.post(t, "/v2/models/text_words/generate", `{"text_input":""}`), 400,
				"generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses")
			// A flags-only final is not a response.
			r = p.post(t, "/v2/models/text_words/generate", `{"text_input":"single","empty_final":true}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, `{"model_name":"text_words","model_version":"1","text_output":"single"}`, string(r.body))
			// On a second response the model is stopped, and the request counts as failed.
			fails := srv.Registry.Lookup("text_words").Stats.Fail.Count()
			requireRESTError(t, p.post(t, "/v2/models/text_words/generate", `{"text_input":"a b c d e f g h","delay_ms":1}`), 400,
				"generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses")
			assert.Equal(t, fails+1, srv.Registry.Lookup("text_words").Stats.Fail.Count())

			// Any model can be used with generate: simple's [16] inputs take 16 (or 32, batch 2)
			// elements and fill [1,16]; other counts cannot be shaped.
			r = p.post(t, "/v2/models/simple/generate", `{"INPUT0":`+jsonArray(seqInts(16, func(i int) int { return i }))+`,"INPUT1":`+jsonArray(seqInts(16, func(int) int { return 1 }))+`}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			assert.Equal(t, `{"model_name":"simple","model_version":"1","OUTPUT0":`+jsonArray(seqInts(16, func(i int) int { return i + 1 }))+`,"OUTPUT1":`+jsonArray(seqInts(16, func(i int) int { return i - 1 }))+`}`, string(r.body))
			r = p.post(t, "/v2/models/simple/generate", `{"INPUT0":`+jsonArray(seqInts(32, func(i int) int { return i }))+`,"INPUT1":`+jsonArray(seqInts(32, func(int) int { return 1 }))+`}`)
			require.Equal(t, http.StatusOK, r.status, "%s", r)
			requireRESTError(t, p.post(t, "/v2/models/simple/generate", `{"INPUT0":[1,2,3],"INPUT1":[1,2,3]}`), 400,
				"The schema can not convert input 'INPUT0' to tensor with proper shape")

			// Errors before inference: plain JSON errors with their status.
			requireRESTError(t, p.post(t, "/v2/models/text_echo/generate", `{"prompt":"x"}`), 400,
				"expected 1 inputs but got 0 inputs for model 'text_echo'. Got input(s) [], but missing required input(s) ['text_input']. Please provide all required input(s).")
			requireRESTError(t, p.post(t, "/v2/models/text_echo/generate", `{"text_input":"a","text_input":"b"}`), 400, "input 'text_input' already exists in request")
			requireRESTError(t, p.post(t, "/v2/models/text_echo/generate", `{"text_input":5}`), 400,
				"Unable to parse input 'text_input' of the generate request: element 0 is the number 5, but BYTES data must be strings (at byte 0 of the data)")
			requireRESTError(t, p.post(t, "/v2/models/text_words/generate", `{"text_input":["a","b"]}`), 400,
				"The schema can not convert input 'text_input' to tensor with proper shape")
			requireRESTError(t, p.post(t, "/v2/models/text_echo/generate", `{"text_input":"a","PARAMS":{"x":1}}`), 400,
				"parameter 'PARAMS' has invalid type. It should be either 'int', 'bool', 'double', or 'string'.")
			requireRESTError(t, p.post(t, "/v2/models/text_echo/generate", `{"text_input":"a","parameters":1}`), 400, "Expected JSON object for keyword: 'parameters'")
			requireRESTError(t, p.post(t, "/v2/models/text_echo/generate", `{"text_input":"a"`), 400,
				"failed to parse the generate request JSON: unexpected end of JSON input")
			requireRESTError(t, p.post(t, "/v2/models/text_echo/generate", `["text_input"]`), 400,
				"failed to parse the generate request JSON: it must be a JSON object")
			requireRESTError(t, p.post(t, "/v2/models/nope/generate", `{}`), 404, "Request for unknown model: 'nope' is not found")
			requireRESTError(t, p.get(t, "/v2/models/text_echo/generate"), 405, "Method Not Allowed")
		})
	}
}

func TestRESTGenerateStream(t *testing.T) {
	words := newTextModel("text_words", true, 0)
	srv := start(t, words, newTextModel("text_echo", false, 8))
	for _, p := range restPeers(srv) {
		t.Run(p.name, func(t *testing.T) {
			// The model holds after its first word until the test has read it: it arrives only if
			// each event is flushed as the model produces it, not at the end.
			release := make(chan struct{})
			words.held.Store(&release)
			req, err := http.NewRequest(http.MethodPost, p.url+"/v2/models/text_words/generate_stream",
				strings.NewReader(`{"id":"s1","text_input":"the quick brown fox","parameters":{"hold":true}}`))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang fails, not a slow run
			defer cancel()
			res, err := p.c.Do(req.WithContext(ctx))
			require.NoError(t, err)
			defer res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode)
			assert.Equal(t, "text/event-stream; charset=utf-8", res.Header.Get("Content-Type"))
			rd := bufio.NewReader(res.Body)
			first, err := rd.ReadString('\n')
			require.NoError(t, err, "the first word is flushed before the rest are generated")
			close(release)
			assert.Equal(t, `data: {"id":"s1","model_name":"text_words","model_version":"1","text_output":"the"}`+"\n", first)
			rest := sseEvents(t, rd)
			assert.Equal(t, []string{
				`{"id":"s1","model_name":"text_words","model_version":"1","text_output":"quick"}`,
				`{"id":"s1","model_name":"text_words","model_version":"1","text_output":"brown"}`,
				`{"id":"s1","model_name":"text_words","model_version":"1","text_output":"fox"}`,
			}, rest)

			// A non-decoupled model streams its one response.
			r := p.post(t, "/v2/models/text_echo/generate_stream", `{"text_input":"hi"}`)
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, []string{`{"model_name":"text_echo","model_version":"1","words":1,"text_output":"HI"}`}, sseEvents(t, bytes.NewReader(r.body)))

			// A flags-only final sends no event.
			r = p.post(t, "/v2/models/text_words/generate_stream", `{"text_input":"x y","empty_final":true}`)
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, []string{
				`{"model_name":"text_words","model_version":"1","text_output":"x"}`,
				`{"model_name":"text_words","model_version":"1","text_output":"y"}`,
			}, sseEvents(t, bytes.NewReader(r.body)))

			// An error after the first event is an error event on the 200 stream.
			r = p.post(t, "/v2/models/text_words/generate_stream", `{"text_input":"a b c","fail_after":2}`)
			require.Equal(t, http.StatusOK, r.status)
			assert.Equal(t, []string{
				`{"model_name":"text_words","model_version":"1","text_output":"a"}`,
				`{"model_name":"text_words","model_version":"1","text_output":"b"}`,
				`{"error":"model 'text_words' failed after 2 words"}`,
			}, sseEvents(t, bytes.NewReader(r.body)))
			// Before it, a plain JSON error with its status.
			requireRESTError(t, p.post(t, "/v2/models/text_words/generate_stream", `{"text_input":"a b c","fail_after":0}`), 500,
				"model 'text_words' failed after 0 words")
			requireRESTError(t, p.post(t, "/v2/models/text_words/generate_stream", `{}`), 400,
				"expected 1 inputs but got 0 inputs for model 'text_words'. Got input(s) [], but missing required input(s) ['text_input']. Please provide all required input(s).")
		})
	}
}

// TestRESTGenerateStreamClientDisconnectCancelsModel closes the connection after the first event:
// the model must see its context cancelled, and the failure is counted.
func TestRESTGenerateStreamClientDisconnectCancelsModel(t *testing.T) {
	for _, peer := range []string{"http1", "h2c"} {
		t.Run(peer, func(t *testing.T) {
			words := newTextModel("text_words", true, 0)
			srv := start(t, words)
			p := restPeers(srv)[0]
			if peer == "h2c" {
				p = restPeers(srv)[1]
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/v2/models/text_words/generate_stream",
				strings.NewReader(`{"text_input":"`+strings.Repeat("word ", 1000)+`","parameters":{"delay_ms":10}}`))
			require.NoError(t, err)
			res, err := p.c.Do(req)
			require.NoError(t, err)
			first, err := bufio.NewReader(res.Body).ReadString('\n')
			require.NoError(t, err)
			require.Contains(t, first, `"text_output":"word"`)
			cancel()
			res.Body.Close()
			select {
			case <-words.cancelled:
			case <-time.After(2 * time.Second):
				t.Fatal("the model was not cancelled within 2s of the client going away")
			}
			e := srv.Registry.Lookup("text_words")
			require.Eventually(t, func() bool { return e.Stats.Fail.Count() == 1 }, 2*time.Second, 10*time.Millisecond)
			assert.Equal(t, http.StatusOK, p.get(t, "/v2/health/live").status, "the server carries on")
		})
	}
}

// TestRESTJSONAndBinaryInputsAgree sends simple's inputs as JSON and as binary data: with JSON
// outputs both, the answers must be the same bytes.
func TestRESTJSONAndBinaryInputsAgree(t *testing.T) {
	srv := start(t)
	p := restPeers(srv)[0]
	jsonRes := p.post(t, "/v2/models/simple/infer", simpleJSON)
	require.Equal(t, http.StatusOK, jsonRes.status)
	body, hl := binaryBody(`{"id":"req-1","inputs":[`+
		`{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}},`+
		`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}]}`,
		tensor.Bytes(seq(16, func(i int) int32 { return int32(i) })), tensor.Bytes(seq(16, func(int) int32 { return 1 })))
	binRes := p.do(t, http.MethodPost, "/v2/models/simple/infer", body, kserveHeader, hl)
	require.Equal(t, http.StatusOK, binRes.status)
	assert.Equal(t, string(jsonRes.body), string(binRes.body))
}

// TestRESTLargeAndChunkedBodies sends binary bodies around the sizes where the body buffer grows
// (1 MiB, then fourfold or straight to the declared length), with and without a Content-Length.
func TestRESTLargeAndChunkedBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("tens of MiB of round trips")
	}
	srv := start(t)
	p := restPeers(srv)[0]
	for _, size := range []int{1<<20 - 200, 1 << 20, 1<<20 + 4, 5 << 20, 5<<20 + 4000, 21 << 20} {
		for _, chunked := range []bool{false, true} {
			n := (size - 180) / 4 // elements, leaving room for the JSON header
			header := fmt.Sprintf(`{"inputs":[{"name":"INPUT0","shape":[%d],"datatype":"FP32","parameters":{"binary_data_size":%d}}],"parameters":{"binary_data_output":true}}`, n, 4*n)
			data := make([]byte, 4*n)
			for i := range data {
				data[i] = byte(i * 7)
			}
			body := append([]byte(header), data...)
			var rd io.Reader = bytes.NewReader(body)
			if chunked {
				rd = io.MultiReader(rd) // hides the length: sent chunked
			}
			req, err := http.NewRequest(http.MethodPost, p.url+"/v2/models/identity_fp32/infer", rd)
			require.NoError(t, err)
			req.Header.Set(kserveHeader, strconv.Itoa(len(header)))
			res, err := p.c.Do(req)
			require.NoError(t, err)
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			require.NoError(t, err)
			_, out := binaryReply(t, restReply{status: res.StatusCode, header: res.Header, body: got})
			require.True(t, bytes.Equal(data, out["OUTPUT0"]), "%d-byte body (chunked %v) echoed exactly", len(body), chunked)
		}
	}
}

// TestRESTBodyShorterThanDeclared claims a huge Content-Length and sends a few bytes: the server
// answers 400 when the body ends, without having sized anything by the claim.
func TestRESTBodyShorterThanDeclared(t *testing.T) {
	srv := start(t)
	conn, err := net.Dial("tcp", srv.Addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000000\r\nConnection: close\r\n\r\n{\"inputs\":")
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite())
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	assert.Equal(t, http.StatusBadRequest, res.StatusCode)
	assert.Equal(t, `{"error":"the request body ended early, after 10 of 2000000000 bytes"}`, string(b))
}
