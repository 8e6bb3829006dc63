package kserve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// Triton's generate extension (docs/protocol/extension_generate.md, server src/http_server.cc):
// a flat JSON object in, a flat JSON object out, for LLM-style models with a text_input.
//
// Request: each top-level key that names a model input becomes that tensor, its datatype the
// input's and its shape deduced from the input's metadata shape (a scalar is one element, an
// array its elements); "parameters" is an object whose members are treated the same way; every
// other key becomes a request parameter, as in Triton, whose vLLM clients send sampling settings
// that way. "id" is the request id. Response: model_name, model_version, id when set, response
// parameters, and each output by name: a scalar when it has one element, else an array.
//
// /generate answers exactly one response. As in Triton, a decoupled model (or a request that an
// engines.RequestDecoupler answers as decoupled, such as an LLM asked to stream) must produce
// exactly one (a flags-only final does not count): for any other number the request fails with
// Triton's message, rather than returning the first or last of them. /generate_stream sends each
// response as a server-sent event as the model produces it.

// errGenerateOne is Triton's message for /generate on a model that did not answer exactly once.
const errGenerateOne = "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses"

func (s *Service) restGenerate(stream bool) restFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		e, err := s.reg.ResolveFor(r.Context(), r.PathValue("model"), r.PathValue("version"))
		if err != nil {
			return err
		}
		body, err := s.readBody(w, r, 0)
		if err != nil {
			return err
		}
		start := time.Now()
		req, err := parseGenerate(e, body)
		if err != nil {
			return err
		}
		pr, opts, err := prepare(e, req, shmScope{}) // generate has no shared memory tensors
		if err != nil {
			e.Stats.RecordFailure(start, time.Now())
			return err
		}
		if stream {
			return generateStream(r.Context(), w, e, pr, opts, start)
		}
		return generateOnce(r.Context(), w, e, pr, opts, start)
	}
}

// parseGenerate converts a generate request body to the wire request. Keys are read in document
// order, so a repeated input is reported as Triton reports it ("input 'x' already exists").
func parseGenerate(e *engines.Entry, body []byte) (*inference.ModelInferRequest, error) {
	req := &inference.ModelInferRequest{ModelName: e.Name(), ModelVersion: e.Version()}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	fail := func(err error) error {
		if errors.Is(err, io.EOF) {
			return invalid("failed to parse the generate request JSON: unexpected end of JSON input")
		}
		return jsonSyntaxError("the generate request JSON", err)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fail(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, invalid("failed to parse the generate request JSON: it must be a JSON object")
	}
	var member func(key string, v json.RawMessage) error
	member = func(key string, v json.RawMessage) error {
		if in := generateInput(e, key); in != nil {
			return appendGenerateInput(req, in, v)
		}
		p, err := inferParameter(key, v)
		if err != nil {
			return err
		}
		if req.Parameters == nil {
			req.Parameters = make(map[string]*inference.InferParameter)
		}
		req.Parameters[key] = p
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fail(err)
		}
		key := tok.(string) // object keys are always strings
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fail(err)
		}
		switch {
		case key == "id" && generateInput(e, key) == nil:
			if err := json.Unmarshal(v, &req.Id); err != nil {
				return nil, invalid("Unable to parse 'id': expected a string, got %s", clip(v))
			}
		case key == "parameters" && generateInput(e, key) == nil:
			if string(v) == "null" {
				continue
			}
			inner := json.NewDecoder(bytes.NewReader(v))
			inner.UseNumber()
			if tok, err := inner.Token(); err != nil || tok != json.Delim('{') {
				return nil, invalid("Expected JSON object for keyword: 'parameters'")
			}
			for inner.More() {
				tok, err := inner.Token()
				if err != nil {
					return nil, fail(err)
				}
				var pv json.RawMessage
				if err := inner.Decode(&pv); err != nil {
					return nil, fail(err)
				}
				if err := member(tok.(string), pv); err != nil {
					return nil, err
				}
			}
		default:
			if err := member(key, v); err != nil {
				return nil, err
			}
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fail(err)
	}
	if dec.InputOffset() < int64(len(bytes.TrimRight(body, " \t\r\n"))) {
		return nil, invalid("failed to parse the generate request JSON: unexpected data after the object (at offset %d)", dec.InputOffset())
	}
	return req, nil
}

func generateInput(e *engines.Entry, name string) *inference.ModelMetadataResponse_TensorMetadata {
	for _, in := range e.Metadata().GetInputs() {
		if in.GetName() == name {
			return in
		}
	}
	return nil
}

// appendGenerateInput adds the tensor for value v of input in. Its shape is Triton's deduction
// from the metadata shape: fixed dimensions take their share of the element count, the innermost
// variable one takes the rest and any other variable one is 1.
func appendGenerateInput(req *inference.ModelInferRequest, in *inference.ModelMetadataResponse_TensorMetadata, v json.RawMessage) error {
	dt := tensor.ParseDatatype(in.GetDatatype())
	if dt == inference.DataType_TYPE_FP16 || dt == inference.DataType_TYPE_BF16 {
		return invalid("receiving %s data via JSON is not supported. Please use the binary data format for input %s", in.GetDatatype(), in.GetName())
	}
	raw, n, err := tensor.AppendFromJSON(nil, dt, v)
	if err != nil {
		return dataError(fmt.Sprintf("Unable to parse input '%s' of the generate request", in.GetName()), err)
	}
	shape := slices.Clone(in.GetShape())
	left := int64(n)
	for i := len(shape) - 1; i >= 0; i-- {
		switch d := shape[i]; {
		case d == 0:
			if left != 0 {
				return badGenerateShape(in.GetName())
			}
		case d > 0:
			if left%d != 0 {
				return badGenerateShape(in.GetName())
			}
			left /= d
		}
	}
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] == -1 {
			shape[i], left = left, 1
		}
	}
	if left != 1 && !(n == 0 && slices.Contains(shape, 0)) {
		return badGenerateShape(in.GetName())
	}
	req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: in.GetName(), Datatype: in.GetDatatype(), Shape: shape})
	req.RawInputContents = append(req.RawInputContents, raw)
	return nil
}

func badGenerateShape(name string) error {
	return invalid("The schema can not convert input '%s' to tensor with proper shape", name)
}

// runResponses runs a prepared request and hands each response to send, accounting the request
// in the model's statistics as the gRPC paths do: a non-decoupled request through inferOnce, a
// decoupled one (engines.Entry.RequestDecoupled) response by response, skipping empty (flags-only) finals as Triton's HTTP
// frontend does.
func runResponses(ctx context.Context, e *engines.Entry, r *engines.Request, opts callOptions, start time.Time, send func(*inference.ModelInferResponse) error) error {
	if !e.RequestDecoupled(r) {
		out, err := inferOnce(ctx, e, r, opts, start)
		if err != nil {
			return err
		}
		return send(out)
	}
	timing := engines.Timing{Start: start}
	inferStart := time.Now()
	timing.Input = inferStart.Sub(start)
	var mu sync.Mutex // a model may send from goroutines of its own
	err := execute(ctx, e, r, opts, func(res *engines.Response) error {
		if len(res.Outputs) == 0 && len(res.Parameters) == 0 {
			return nil
		}
		out, err := encode(e, r, res, opts)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		return send(out)
	})
	timing.Infer = time.Since(inferStart) - r.Queued
	timing.Queued, timing.Batched = r.Queued, r.Batched
	if err != nil {
		e.Stats.RecordFailure(start, time.Now())
		return err
	}
	e.Stats.RecordSuccess(1, timing, time.Now())
	return nil
}

var errSecondResponse = errors.New("second response")

func generateOnce(ctx context.Context, w http.ResponseWriter, e *engines.Entry, r *engines.Request, opts callOptions, start time.Time) error {
	var got []byte
	count := 0
	err := runResponses(ctx, e, r, opts, start, func(out *inference.ModelInferResponse) error {
		count++
		if count > 1 {
			return errSecondResponse // no need to let the model go on
		}
		var err error
		got, err = appendGenerateJSON(nil, e, out)
		return err
	})
	if errors.Is(err, errSecondResponse) || err == nil && count != 1 {
		return invalid(errGenerateOne)
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, got)
	return nil
}

// generateStream sends each response as an SSE event, flushed at once. Until the first event the
// answer can still be a plain JSON error with its status; after it, an error becomes an event
// {"error": "..."} on the 200 stream. A client that goes away cancels the request's context, which
// the model sees, and any further send fails.
func generateStream(ctx context.Context, w http.ResponseWriter, e *engines.Entry, r *engines.Request, opts callOptions, start time.Time) error {
	rc := http.NewResponseController(w)
	started := false
	event := func(data []byte) error {
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", "text/event-stream; charset=utf-8")
			h.Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
		}
		buf := make([]byte, 0, len(data)+8)
		buf = append(buf, "data: "...)
		buf = append(buf, data...)
		buf = append(buf, "\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return connect.NewError(connect.CodeCanceled, err)
		}
		if err := rc.Flush(); err != nil {
			return connect.NewError(connect.CodeCanceled, err)
		}
		return nil
	}
	err := runResponses(ctx, e, r, opts, start, func(out *inference.ModelInferResponse) error {
		data, err := appendGenerateJSON(nil, e, out)
		if err != nil {
			return err
		}
		return event(data)
	})
	if err == nil {
		return nil
	}
	if !started {
		return err
	}
	if ctx.Err() == nil {
		msg := tensor.AppendJSONString([]byte(`{"error":`), restMessage(err))
		_ = event(append(msg, '}'))
	}
	return nil
}

// appendGenerateJSON writes one generate response object.
func appendGenerateJSON(b []byte, e *engines.Entry, out *inference.ModelInferResponse) ([]byte, error) {
	b = append(b, '{')
	if out.GetId() != "" {
		b = append(b, `"id":`...)
		b = tensor.AppendJSONString(b, out.GetId())
		b = append(b, ',')
	}
	b = append(b, `"model_name":`...)
	b = tensor.AppendJSONString(b, out.GetModelName())
	b = append(b, `,"model_version":`...)
	b = tensor.AppendJSONString(b, out.GetModelVersion())
	keys := make([]string, 0, len(out.GetParameters()))
	for k := range out.GetParameters() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v, ok := parameterValue(out.GetParameters()[k]); ok {
			b = append(b, ',')
			b = tensor.AppendJSONString(b, k)
			b = append(b, ':')
			b = append(b, v...)
		}
	}
	raw := out.GetRawOutputContents()
	for i, o := range out.GetOutputs() {
		var data []byte
		if i < len(raw) {
			data = raw[i]
		}
		b = append(b, ',')
		b = tensor.AppendJSONString(b, o.GetName())
		b = append(b, ':')
		at := len(b)
		var err error
		if b, err = appendOutputJSON(b, e, o, data); err != nil {
			return nil, err
		}
		if n, ok := tensor.ElementCount(o.GetShape()); ok && n == 1 {
			// One element: the scalar itself, without the array's brackets.
			b = append(b[:at], b[at+1:len(b)-1]...)
		}
	}
	return append(b, '}'), nil
}
