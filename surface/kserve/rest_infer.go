package kserve

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// HTTP-only parameters of Triton's binary tensor data extension. They steer how tensors travel
// and are removed before a request reaches the shared inference path.
const (
	paramBinaryDataSize = "binary_data_size" // input: its bytes follow the JSON
	paramBinaryData     = "binary_data"      // output: return it binary
)

// rawHeadroom is the spare space before a request body: a raw binary request for a BYTES input
// needs a 4-byte length prefix, written there instead of copying the body behind one.
const rawHeadroom = 4

// restCall is a parsed REST infer request: the wire request for the shared path and how each
// output goes back.
type restCall struct {
	req *inference.ModelInferRequest
	out restOutputs
}

// restOutputs says which outputs are returned as binary data: those whose request set
// binary_data, else the request's binary_data_output (always, for a raw binary request).
type restOutputs struct {
	binaryDefault bool
	explicit      []restOutputChoice
	shm           []string // outputs written to shared memory: no data in the response
}

func (o *restOutputs) inShm(name string) bool { return slices.Contains(o.shm, name) }

type restOutputChoice struct {
	name   string
	binary bool
}

func (o *restOutputs) binary(name string) bool {
	for _, c := range o.explicit {
		if c.name == name {
			return c.binary
		}
	}
	return o.binaryDefault
}

// restInfer is POST /v2/models/{m}[/versions/{v}]/infer. Like Triton it resolves the model (and
// refuses a decoupled one) before reading the body, so an unknown model is a 404 whatever the
// body holds.
func (s *Service) restInfer(w http.ResponseWriter, r *http.Request) error {
	e, err := s.resolveUnary(r.Context(), r.PathValue("model"), r.PathValue("version"), errDecoupledHTTP)
	if err != nil {
		return err
	}
	buf, err := s.readBody(w, r, rawHeadroom)
	if err != nil {
		return err
	}
	start := time.Now()
	call, err := parseInferBody(e, buf, rawHeadroom, r.Header.Get(InferenceHeaderContentLength))
	if err != nil {
		return err
	}
	resp, err := inferUnary(r.Context(), e, call.req, s.shmScope(r.Context()), start)
	if err != nil {
		return err
	}
	return writeInferResponse(w, e, resp, &call.out)
}

// parseInferBody turns a REST infer body into the wire request. buf holds headroom spare bytes
// and then the body; header is the Inference-Header-Content-Length header ("" when absent): the
// first that many bytes of the body are JSON and the rest binary tensor data, and 0 means the
// whole body is the raw data of the model's only input. Binary input data aliases buf.
func parseInferBody(e *engines.Entry, buf []byte, headroom int, header string) (*restCall, error) {
	body := buf[headroom:]
	hasHeader := header != ""
	headerLen := len(body)
	if hasHeader {
		n, err := strconv.Atoi(strings.TrimSpace(header))
		switch {
		case err != nil:
			return nil, invalid("Unable to parse %s, got: %s", InferenceHeaderContentLength, header)
		case n < 0 || n > len(body):
			return nil, invalid("inference header size should be in range (0, %d), got: %s", len(body), header)
		case n == 0:
			return rawInferRequest(e, buf, headroom)
		}
		headerLen = n
	}
	var j restInferJSON
	if err := json.Unmarshal(body[:headerLen], &j); err != nil {
		return nil, jsonSyntaxError("the inference request JSON", err)
	}
	call := &restCall{req: &inference.ModelInferRequest{ModelName: e.Name(), ModelVersion: e.Version(), Id: j.ID}}
	req := call.req
	model := e.Name()
	var err error
	if req.Parameters, err = requestParameters(j.Parameters, &call.out); err != nil {
		return nil, err
	}

	binaryData := body[headerLen:]
	req.Inputs = make([]*inference.ModelInferRequest_InferInputTensor, len(j.Inputs))
	req.RawInputContents = make([][]byte, 0, len(j.Inputs)) // one per input not in shared memory, as decode reads them
	tensors := make([]inference.ModelInferRequest_InferInputTensor, len(j.Inputs))
	for i := range j.Inputs {
		in := &j.Inputs[i]
		t := &tensors[i]
		req.Inputs[i] = t
		t.Name, t.Datatype, t.Shape = in.Name, in.Datatype, in.Shape
		size, isBinary, isShm, err := inputParameters(in, t)
		if err != nil {
			return nil, err
		}
		if n := btoi(in.Data != nil) + btoi(isBinary) + btoi(isShm); n != 1 {
			msg := "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But"
			if n == 0 {
				msg += " no field is set"
			} else {
				msg += " set"
				for _, f := range [...]struct {
					set  bool
					name string
				}{{in.Data != nil, " 'data'"}, {isBinary, " 'binary_data_size'"}, {isShm, " 'shared_memory_region'"}} {
					if f.set {
						msg += f.name
					}
				}
			}
			return nil, invalid("%s (input '%s' of model '%s')", msg, in.Name, model)
		}
		if isShm {
			continue // decode reads it from the region
		}
		if isBinary {
			if !hasHeader && size > 0 {
				return nil, invalid("must specify valid '%s' in request header and 'binary_data_size' when passing inputs in binary data format (input '%s' of model '%s')",
					InferenceHeaderContentLength, in.Name, model)
			}
			if size > uint64(len(binaryData)) {
				return nil, invalid("unexpected size for input '%s', expecting %d additional bytes for model '%s'", in.Name, size-uint64(len(binaryData)), model)
			}
			// Three-index slice: a model appending to its input cannot run into the next one.
			req.RawInputContents = append(req.RawInputContents, binaryData[:size:size])
			binaryData = binaryData[size:]
			continue
		}
		raw, err := jsonTensorData(in)
		if err != nil {
			return nil, err
		}
		req.RawInputContents = append(req.RawInputContents, raw)
	}
	if len(binaryData) > 0 {
		return nil, invalid("unexpected additional input data for model '%s': %d bytes after the last binary input", model, len(binaryData))
	}

	if len(j.Outputs) > 0 {
		req.Outputs = make([]*inference.ModelInferRequest_InferRequestedOutputTensor, len(j.Outputs))
		outs := make([]inference.ModelInferRequest_InferRequestedOutputTensor, len(j.Outputs))
		for i := range j.Outputs {
			o := &j.Outputs[i]
			t := &outs[i]
			req.Outputs[i] = t
			t.Name = o.Name
			if _, ok := o.Parameters[paramShmRegion]; ok {
				if _, cls := o.Parameters[paramClassification]; cls {
					return nil, invalid("Output can't set both 'shared_memory_region' and 'classification'")
				}
				if v, ok := o.Parameters[paramBinaryData]; ok {
					if b, err := boolParameter(paramBinaryData, v); err != nil || b {
						return nil, invalid("Output can't set both 'shared_memory_region' and 'binary_data'")
					}
				}
				call.out.shm = append(call.out.shm, o.Name)
			}
			for k, v := range o.Parameters {
				switch k {
				case paramBinaryData:
					b, err := boolParameter(k, v)
					if err != nil {
						return nil, err
					}
					call.out.explicit = append(call.out.explicit, restOutputChoice{o.Name, b})
				case paramShmRegion, paramShmOffset, paramShmByteSize:
					p, err := shmParameter(k, v)
					if err != nil {
						return nil, err
					}
					if t.Parameters == nil {
						t.Parameters = make(map[string]*inference.InferParameter, len(o.Parameters))
					}
					t.Parameters[k] = p
				default:
					p, err := inferParameter(k, v)
					if err != nil {
						return nil, err
					}
					if t.Parameters == nil {
						t.Parameters = make(map[string]*inference.InferParameter, len(o.Parameters))
					}
					t.Parameters[k] = p
				}
			}
		}
	}
	return call, nil
}

// requestParameters converts the request's JSON parameters, taking out binary_data_output.
func requestParameters(params map[string]jsonValue, out *restOutputs) (map[string]*inference.InferParameter, error) {
	var res map[string]*inference.InferParameter
	for k, v := range params {
		if k == paramBinaryDataOut {
			b, err := boolParameter(k, v)
			if err != nil {
				return nil, err
			}
			out.binaryDefault = b
			continue
		}
		p, err := inferParameter(k, v)
		if err != nil {
			return nil, err
		}
		if res == nil {
			res = make(map[string]*inference.InferParameter, len(params))
		}
		res[k] = p
	}
	return res, nil
}

// inputParameters converts an input's JSON parameters onto t, taking out binary_data_size, which
// it returns.
func inputParameters(in *restInputJSON, t *inference.ModelInferRequest_InferInputTensor) (size uint64, isBinary, isShm bool, err error) {
	for k, v := range in.Parameters {
		switch k {
		case paramBinaryDataSize:
			size, err = strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return 0, false, false, invalid("Unable to parse 'binary_data_size' of input '%s': expected a non-negative integer, got %s", in.Name, clip(v))
			}
			isBinary = true
		case paramShmRegion, paramShmOffset, paramShmByteSize:
			p, err := shmParameter(k, v)
			if err != nil {
				return 0, false, false, err
			}
			if t.Parameters == nil {
				t.Parameters = make(map[string]*inference.InferParameter, len(in.Parameters))
			}
			t.Parameters[k] = p
			isShm = isShm || k == paramShmRegion
		default:
			p, err := inferParameter(k, v)
			if err != nil {
				return 0, false, false, err
			}
			if t.Parameters == nil {
				t.Parameters = make(map[string]*inference.InferParameter, len(in.Parameters))
			}
			t.Parameters[k] = p
		}
	}
	return size, isBinary, isShm, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// shmParameter converts a shared memory parameter of REST JSON to its gRPC form, so the shared
// path reads both alike: the region a string, offset and byte size non-negative integers.
func shmParameter(key string, v jsonValue) (*inference.InferParameter, error) {
	if key == paramShmRegion {
		var s string
		if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, invalid("Unable to parse 'shared_memory_region': expected a string, got %s", clip(v))
		}
		return &inference.InferParameter{ParameterChoice: &inference.InferParameter_StringParam{StringParam: s}}, nil
	}
	n, err := strconv.ParseUint(string(v), 10, 63)
	if err != nil {
		return nil, invalid("Unable to parse '%s': expected a non-negative integer, got %s", key, clip(v))
	}
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(n)}}, nil
}

// jsonTensorData converts an input's JSON data to raw bytes. Only the JSON itself is checked
// here; whether the element count fits the shape, and the datatype the model, is left to the
// shared validation, so those errors read as they do over gRPC. An unknown datatype yields no
// data, for the same reason: validation names the datatype first.
func jsonTensorData(in *restInputJSON) ([]byte, error) {
	dt := tensor.ParseDatatype(in.Datatype)
	switch dt {
	case inference.DataType_TYPE_FP16, inference.DataType_TYPE_BF16:
		return nil, invalid("receiving %s data via JSON is not supported. Please use the binary data format for input %s", in.Datatype, in.Name)
	case inference.DataType_TYPE_INVALID:
		return []byte{}, nil
	}
	if len(in.Data) == 0 || in.Data[0] != '[' {
		return nil, invalid("Unable to parse 'data' of input '%s': expected a JSON array, got %s", in.Name, clip(in.Data))
	}
	raw, _, err := tensor.AppendFromJSON(make([]byte, 0, jsonCapacity(dt, in.Shape, len(in.Data))), dt, in.Data)
	if err != nil {
		return nil, dataError(fmt.Sprintf("Unable to parse 'data' of input '%s'", in.Name), err)
	}
	return raw, nil
}

// dataError reports tensor data the JSON codec rejected, pointing into the data array.
func dataError(what string, err error) error {
	var je *tensor.JSONError
	if errors.As(err, &je) && je.Offset >= 0 {
		return invalid("%s: %s (at byte %d of the data)", what, je.Msg, je.Offset)
	}
	return invalid("%s: %v", what, err)
}

// jsonCapacity guesses the raw size of JSON data: the size the shape implies, but never more
// than the JSON can hold (each element takes at least two bytes of it, a digit and a separator),
// so a hostile shape cannot make it allocate.
func jsonCapacity(dt inference.DataType, shape []int64, jsonLen int) int {
	size := tensor.ElementSize(dt)
	if size == 0 {
		return jsonLen // BYTES: about the text, plus prefixes as it grows
	}
	bound := (jsonLen/2 + 1) * size
	if n, ok := tensor.ElementCount(shape); ok && n <= int64(bound/size) {
		return int(n) * size
	}
	return bound
}

// rawInferRequest builds the request for a raw binary body (Inference-Header-Content-Length: 0):
// the body is the data of the model's only input, whose shape is deduced from the config as
// Triton does. All outputs come back binary.
func rawInferRequest(e *engines.Entry, buf []byte, headroom int) (*restCall, error) {
	cfg := e.Config()
	if n := len(cfg.GetInput()); n != 1 {
		return nil, invalid("Raw request must only have 1 input (found 1) to be deduced but got %d inputs in '%s' model configuration", n, e.Name())
	}
	in := cfg.GetInput()[0]
	data := buf[headroom:]
	var shape []int64
	if cfg.GetMaxBatchSize() > 0 {
		shape = append(shape, 1)
	}
	variable := -1
	fixed := int64(1)
	for _, d := range in.GetDims() {
		if d == -1 {
			if variable != -1 {
				return nil, invalid("The shape of the raw input '%s' can not be deduced because there are more than one variable-sized dimension", in.GetName())
			}
			variable = len(shape)
		} else if d >= 0 && fixed <= math.MaxInt64/max(d, 1) {
			fixed *= d
		}
		shape = append(shape, d)
	}
	if in.GetDataType() == inference.DataType_TYPE_STRING {
		if variable != -1 || fixed != 1 {
			return nil, invalid("For BYTE datatype raw input '%s', the model must have input shape [1]", in.GetName())
		}
		if uint64(len(data)) > math.MaxUint32 || headroom < 4 {
			return nil, invalid("raw BYTES input '%s' of %d bytes is longer than one element can be", in.GetName(), len(data))
		}
		// The whole body is one element: put its length prefix in the headroom before it.
		binary.LittleEndian.PutUint32(buf[headroom-4:], uint32(len(data)))
		data = buf[headroom-4:]
	} else if variable != -1 {
		// As in Triton, an inexact division leaves a size that validation then rejects.
		if per := fixed * int64(tensor.ElementSize(in.GetDataType())); per > 0 {
			shape[variable] = int64(len(data)) / per
		} else {
			shape[variable] = 0
		}
	}
	return &restCall{
		req: &inference.ModelInferRequest{
			ModelName: e.Name(), ModelVersion: e.Version(),
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: in.GetName(), Datatype: tensor.Name(in.GetDataType()), Shape: shape}},
			RawInputContents: [][]byte{data},
		},
		out: restOutputs{binaryDefault: true},
	}, nil
}

// writeInferResponse writes the response JSON and, for binary outputs, their bytes after it. The
// JSON is built in a pooled buffer; binary outputs are written straight from the model's buffers,
// never joined into one.
func writeInferResponse(w http.ResponseWriter, e *engines.Entry, resp *inference.ModelInferResponse, plan *restOutputs) error {
	bp := getRESTBuffer()
	defer putRESTBuffer(bp)
	b := append((*bp)[:0], '{')
	if resp.GetId() != "" {
		b = append(b, `"id":`...)
		b = tensor.AppendJSONString(b, resp.GetId())
		b = append(b, ',')
	}
	b = append(b, `"model_name":`...)
	b = tensor.AppendJSONString(b, resp.GetModelName())
	b = append(b, `,"model_version":`...)
	b = tensor.AppendJSONString(b, resp.GetModelVersion())
	if len(resp.GetParameters()) > 0 {
		b = append(b, `,"parameters":`...)
		b = appendParameters(b, resp.GetParameters())
	}
	b = append(b, `,"outputs":[`...)
	var binaries [][]byte
	binarySize := 0
	raw := resp.GetRawOutputContents()
	for i, o := range resp.GetOutputs() {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = tensor.AppendJSONString(b, o.GetName())
		b = append(b, `,"datatype":`...)
		b = tensor.AppendJSONString(b, o.GetDatatype())
		b = append(b, `,"shape":[`...)
		for j, d := range o.GetShape() {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, ']')
		var data []byte
		if i < len(raw) {
			data = raw[i]
		}
		if plan.inShm(o.GetName()) {
			// In the client's region already: the output is described, not sent.
			if len(o.GetParameters()) > 0 {
				b = append(b, `,"parameters":`...)
				b = appendParameters(b, o.GetParameters())
			}
			b = append(b, '}')
			continue
		}
		if plan.binary(o.GetName()) {
			b = append(b, `,"parameters":`...)
			b = appendParameters(b, o.GetParameters(), func(b []byte) []byte {
				b = append(b, `"binary_data_size":`...)
				return strconv.AppendInt(b, int64(len(data)), 10)
			})
			b = append(b, '}')
			binaries = append(binaries, data)
			binarySize += len(data)
			continue
		}
		if len(o.GetParameters()) > 0 {
			b = append(b, `,"parameters":`...)
			b = appendParameters(b, o.GetParameters())
		}
		b = append(b, `,"data":`...)
		var err error
		b, err = appendOutputJSON(b, e, o, data)
		if err != nil {
			*bp = b
			return err
		}
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	*bp = b

	h := w.Header()
	if binaries == nil {
		writeJSON(w, http.StatusOK, b)
		return nil
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set(InferenceHeaderContentLength, strconv.Itoa(len(b)))
	h.Set("Content-Length", strconv.Itoa(len(b)+binarySize))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(b); err != nil {
		return nil // the client is gone; nothing more can be said to it
	}
	for _, d := range binaries {
		if _, err := w.Write(d); err != nil {
			return nil
		}
	}
	return nil
}

// appendOutputJSON writes an output's data as a JSON array. FP16 and BF16 fail with Triton's
// message, and so do values JSON cannot hold (NaN, infinities): such outputs must be requested
// as binary data.
func appendOutputJSON(b []byte, e *engines.Entry, o *inference.ModelInferResponse_InferOutputTensor, data []byte) ([]byte, error) {
	dt := tensor.ParseDatatype(o.GetDatatype())
	if dt == inference.DataType_TYPE_FP16 || dt == inference.DataType_TYPE_BF16 {
		return b, invalid("sending %s data via JSON is not supported. Please use the binary data format for output", o.GetDatatype())
	}
	b, err := tensor.AppendJSON(b, dt, data)
	if err != nil {
		return b, invalid("output '%s' of model '%s' cannot be sent as JSON: %v; request it with the binary_data parameter", o.GetName(), e.Name(), err)
	}
	return b, nil
}
