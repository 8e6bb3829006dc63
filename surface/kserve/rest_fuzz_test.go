package kserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
)

// restFuzzSeeds are REST infer bodies (with their Inference-Header-Content-Length, "" for none)
// for the fuzz models: valid JSON, binary and raw requests, and ones broken around every check
// parseInferBody makes.
func restFuzzSeeds() []struct {
	body   []byte
	header string
	model  uint8
} {
	ints := func(n int) []byte { return tensor.Bytes(fuzzInt32s(n, func(i int) int32 { return int32(i) })) }
	simpleJSON := `{"id":"1","inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},` +
		`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]]}],"outputs":[{"name":"OUTPUT1","parameters":{"binary_data":true}}]}`
	binHeader := `{"parameters":{"binary_data_output":true,"x":1.5},"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}},` +
		`{"name":"INPUT1","shape":[1,16],"datatype":"INT32","parameters":{"binary_data_size":64}}]}`
	strJSON := `{"inputs":[{"name":"INPUT0","shape":[1,2],"datatype":"BYTES","data":["1","\u0032"]},{"name":"INPUT1","shape":[1,2],"datatype":"BYTES","data":["3","4"]}]}`
	bytesHeader := `{"inputs":[{"name":"INPUT0","shape":[1,2],"datatype":"BYTES","parameters":{"binary_data_size":9}}]}`
	fp32JSON := `{"inputs":[{"name":"INPUT0","shape":[3],"datatype":"FP32","data":[1.5,-2e3,0]}]}`
	l := strconv.Itoa
	return []struct {
		body   []byte
		header string
		model  uint8
	}{
		{[]byte(simpleJSON), "", 0},
		{append([]byte(binHeader), append(ints(16), ints(16)...)...), l(len(binHeader)), 0},
		{append([]byte(binHeader), ints(16)...), l(len(binHeader)), 0},
		{append([]byte(binHeader), ints(40)...), l(len(binHeader)), 0},
		{[]byte(binHeader), "", 0},
		{[]byte(simpleJSON), l(len(simpleJSON) + 1), 0},
		{[]byte(simpleJSON), "-1", 0},
		{[]byte(simpleJSON), "x", 0},
		{[]byte(strJSON), "", 1},
		{append([]byte(bytesHeader), tensor.JoinBytes([]string{"a", ""})...), l(len(bytesHeader)), 5},
		{[]byte(fp32JSON), "", 2},
		{tensor.Bytes([]float32{1, 2, 3}), "0", 2},
		{[]byte("xyz"), "0", 0},
		{[]byte("abc"), "0", 5},
		{[]byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP16","data":[1]}]}`), "", 2},
		{[]byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","data":[1],"parameters":{"binary_data_size":4}}]}`), "", 2},
		{[]byte(`{"inputs":[{"name":"INPUT0","shape":[-1],"datatype":"FP32","data":[]}]}`), "", 2},
		{[]byte(`{"inputs":[{"name":"INPUT","shape":[1,1],"datatype":"INT32","data":[1]}],"parameters":{"sequence_id":7,"sequence_start":true}}`), "", 3},
		{[]byte(`{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT8","data":[127,-128,0,0,0,0,0,0,0,0,0,0,0,0,0,0]},{"name":"INPUT1","shape":[1,16],"datatype":"INT8","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`), "", 4},
		{[]byte(`{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32","parameters":{"shared_memory_region":"r"}}]}`), "", 2},
		{[]byte(`[]`), "", 0},
		{[]byte{}, "", 0},
	}
}

// FuzzRESTInferBody feeds arbitrary bodies and Inference-Header-Content-Length values through
// parseInferBody for a built-in model. It must never panic or touch the body; a rejection is a 400
// (or 501 for shared memory); an accepted request's binary inputs are slices of the body, together
// exactly the binary part of it, and the request then behaves as over gRPC: prepare accepts it or
// says INVALID_ARGUMENT, and a response to it is well-formed REST.
func FuzzRESTInferBody(f *testing.F) {
	for _, s := range restFuzzSeeds() {
		f.Add(s.body, s.header, s.model)
	}
	reg := fuzzRegistry(f)
	f.Fuzz(func(t *testing.T, body []byte, header string, pick uint8) {
		e := reg.Lookup(fuzzModels[int(pick)%len(fuzzModels)])
		buf := make([]byte, rawHeadroom+len(body))
		copy(buf[rawHeadroom:], body)
		call, err := parseInferBody(e, buf, rawHeadroom, header)
		if !bytes.Equal(buf[rawHeadroom:], body) {
			t.Fatalf("the body was modified")
		}
		if err != nil {
			var ce *connect.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %q is not a *connect.Error", err, err)
			}
			if st := restStatus(err); st != http.StatusBadRequest && !(st == http.StatusNotImplemented && bytes.Contains(body, []byte(paramShmRegion))) {
				t.Fatalf("status %d for %v", st, err)
			}
			return
		}
		checkAliasing(t, buf, call, header)
		r, opts, err := prepare(e, call.req, shmScope{})
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		checkPrepared(t, e, r, opts)
		if e.Config().GetSequenceBatching() == nil {
			checkRESTResponse(t, e, call)
		}
	})
}

// checkAliasing checks that the bytes of the request that lie in buf are exactly its binary part:
// the whole body for a raw request (behind a length prefix in the headroom for BYTES), else all
// that follows the JSON, each input's share in order, none copied.
func checkAliasing(t *testing.T, buf []byte, call *restCall, header string) {
	t.Helper()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	inBuf := func(b []byte) (int, bool) {
		if cap(b) == 0 {
			return 0, false
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if p < base || p >= base+uintptr(len(buf)) {
			return 0, false
		}
		return int(p - base), true
	}
	n, _ := strconv.Atoi(strings.TrimSpace(header))
	next := rawHeadroom + n
	if header == "" {
		next = len(buf) // no binary part
	}
	if header != "" && n == 0 {
		raw := call.req.RawInputContents[0]
		if len(buf) == rawHeadroom && len(raw) == 0 {
			return // an empty body: nothing to alias
		}
		off, ok := inBuf(raw)
		if !ok || off+len(raw) != len(buf) || (off != rawHeadroom && off != rawHeadroom-4) {
			t.Fatalf("raw request data is not the body in place (offset %d, %d bytes of %d)", off, len(raw), len(buf))
		}
		return
	}
	for i, raw := range call.req.RawInputContents {
		off, ok := inBuf(raw)
		if !ok {
			continue // decoded from JSON
		}
		if off != next {
			t.Fatalf("input %d's binary data starts at %d, want %d", i, off, next)
		}
		if cap(raw) != len(raw) {
			t.Fatalf("input %d's binary data has spare capacity %d", i, cap(raw)-len(raw))
		}
		next += len(raw)
	}
	if next != len(buf) {
		t.Fatalf("binary inputs end at %d of %d bytes", next, len(buf))
	}
}

// checkRESTResponse runs an accepted request and writes its REST response, which must be
// well-formed: JSON, or a JSON part within the body whose binary_data_size values add up to the
// rest. Only JSON-incapable outputs (half floats, NaN) may fail, with a 400.
func checkRESTResponse(t *testing.T, e *engines.Entry, call *restCall) {
	t.Helper()
	resp, err := inferUnary(context.Background(), e, call.req, shmScope{}, time.Now())
	if err != nil {
		requireInvalidArgument(t, err) // model-level rejections, checked by checkPrepared too
		return
	}
	rec := httptest.NewRecorder()
	if err := writeInferResponse(rec, e, resp, &call.out); err != nil {
		if restStatus(err) != http.StatusBadRequest {
			t.Fatalf("response error %v", err)
		}
		return
	}
	body := rec.Body.Bytes()
	if cl, _ := strconv.Atoi(rec.Header().Get("Content-Length")); cl != len(body) {
		t.Fatalf("Content-Length %d for %d bytes", cl, len(body))
	}
	jsonPart := body
	if h := rec.Header().Get(InferenceHeaderContentLength); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n > len(body) {
			t.Fatalf("bad %s %q for %d bytes", InferenceHeaderContentLength, h, len(body))
		}
		jsonPart = body[:n]
	}
	var doc struct {
		Outputs []struct {
			Parameters map[string]any `json:"parameters"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(jsonPart, &doc); err != nil {
		t.Fatalf("response JSON %q: %v", jsonPart, err)
	}
	total := 0
	for _, o := range doc.Outputs {
		if s, ok := o.Parameters["binary_data_size"].(float64); ok {
			total += int(s)
		}
	}
	if total != len(body)-len(jsonPart) {
		t.Fatalf("binary_data_size adds up to %d, %d binary bytes sent", total, len(body)-len(jsonPart))
	}
}

// FuzzRESTGenerateBody feeds arbitrary generate bodies to parseGenerate: no panics, rejections
// are 400s, and accepted requests are for prepare to judge, as over gRPC.
func FuzzRESTGenerateBody(f *testing.F) {
	for _, s := range []string{
		`{"INPUT0":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15],"INPUT1":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}`,
		`{"id":"x","INPUT0":"7","parameters":{"INPUT1":[1.5,2],"temperature":0.2,"stream":true}}`,
		`{"INPUT0":[[1,2],[3,4]],"extra":"p"}`,
		`{"INPUT0":[]}`,
		`{"INPUT":5,"parameters":null}`,
		`{"a":{}}`, `{"a":[1]}`, `{`, `[]`, `{}`, `{"x":1}x`, ``,
	} {
		for pick := range uint8(len(fuzzModels)) {
			f.Add([]byte(s), pick)
		}
	}
	reg := fuzzRegistry(f)
	f.Fuzz(func(t *testing.T, body []byte, pick uint8) {
		e := reg.Lookup(fuzzModels[int(pick)%len(fuzzModels)])
		req, err := parseGenerate(e, body)
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		if len(req.Inputs) != len(req.RawInputContents) {
			t.Fatalf("%d inputs, %d raw entries", len(req.Inputs), len(req.RawInputContents))
		}
		r, opts, err := prepare(e, req, shmScope{})
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		checkPrepared(t, e, r, opts)
	})
}

// TestRESTFuzzSeedsExpectations pins which seeds are valid requests, so the corpus keeps covering
// both the accepting and the rejecting paths of the parser.
func TestRESTFuzzSeedsExpectations(t *testing.T) {
	reg := fuzzRegistry(t)
	valid := map[int]bool{0: true, 1: true, 9: true, 10: true, 11: true, 17: true, 18: true}
	for i, s := range restFuzzSeeds() {
		e := reg.Lookup(fuzzModels[int(s.model)%len(fuzzModels)])
		buf := make([]byte, rawHeadroom+len(s.body))
		copy(buf[rawHeadroom:], s.body)
		call, err := parseInferBody(e, buf, rawHeadroom, s.header)
		if err == nil {
			_, _, err = prepare(e, call.req, shmScope{})
		}
		if valid[i] {
			assert.NoError(t, err, "seed %d", i)
		} else {
			assert.Error(t, err, "seed %d", i)
		}
	}
}
