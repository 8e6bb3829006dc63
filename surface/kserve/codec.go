package kserve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/kserve/shm"
)

// Request parameter keys Triton interprets itself.
const (
	paramSequenceID     = "sequence_id"
	paramSequenceStart  = "sequence_start"
	paramSequenceEnd    = "sequence_end"
	paramPriority       = "priority"
	paramTimeout        = "timeout"
	paramEmptyFinal     = "triton_enable_empty_final_response"
	paramFinalResponse  = "triton_final_response"
	paramHeaders        = "headers"
	paramBinaryDataOut  = "binary_data_output"
	reservedParamPrefix = "triton_"
)

// callOptions are the per-request settings carried in reserved parameters.
type callOptions struct {
	timeout    time.Duration // zero: none
	emptyFinal bool
	// classes holds the classification count of each requested output (0: none); nil when no
	// output asks for classification.
	classes []int
	// shmOut holds, for each requested output, the shared memory window it is written to (nil:
	// none); nil when no output uses shared memory. The caller releases them (releaseShm).
	shmOut []*shm.View
	// shmIn holds the CUDA regions' windows a GPU model reads its inputs from in place, until
	// the request ends (releaseShm).
	shmIn []*shm.View
}

// decode turns a wire request into the engine request for model e: typed contents become raw
// bytes, raw entries are matched to inputs in order (aliased, not copied), and reserved parameters
// are checked. Errors carry Triton's codes and texts.
func decode(e *engines.Entry, req *inference.ModelInferRequest, sm shmScope) (*engines.Request, callOptions, error) {
	model := e.Name()
	r := &engines.Request{ID: req.GetId(), Inputs: make([]engines.Tensor, len(req.GetInputs()))}
	gpu, onGPU := e.DeviceOrdinal()
	var shmIn []*shm.View
	fail := func(err error) (*engines.Request, callOptions, error) {
		for _, v := range shmIn {
			v.Release()
		}
		return nil, callOptions{}, err
	}
	raw := req.GetRawInputContents()
	next := 0
	for i, in := range req.GetInputs() {
		t := &r.Inputs[i]
		t.Name, t.Shape = in.GetName(), in.GetShape()
		t.Datatype = tensor.ParseDatatype(in.GetDatatype())
		sp, err := parseShmParams(t.Name, in.GetParameters())
		if err != nil {
			return fail(err)
		}
		if sp.hasShm {
			if sm.m == nil {
				return fail(unimplemented(extSystemSharedMemory))
			}
			if in.GetContents() != nil {
				return fail(invalid("unexpected 'content' provided when using shared memory for input tensor '%s' for model '%s'", t.Name, model))
			}
			if onGPU && tensor.ElementSize(t.Datatype) > 0 {
				// A GPU model reads a CUDA region on its own GPU in place; the window stays held
				// until the request ends.
				v, err := sm.m.Acquire(sm.owner, sp.region, sp.offset, sp.size)
				if err != nil {
					return fail(err)
				}
				if ord, ptr, ok := v.Device(); ok && ord == gpu {
					shmIn = append(shmIn, v)
					t.Device = &engines.DeviceBuffer{Ordinal: ord, Ptr: ptr, Len: v.Len()}
					continue
				}
				v.Release()
			}
			// Copied out of the region: the engine must not read memory the client can
			// truncate under it (see package shm).
			if t.Data, err = sm.m.Read(sm.owner, sp.region, sp.offset, sp.size); err != nil {
				return fail(err)
			}
			continue
		}
		switch {
		case in.GetContents() != nil:
			if len(raw) > 0 {
				return fail(invalid("contents field must not be specified when using raw_input_contents for '%s' for model '%s'", t.Name, model))
			}
			if !tensor.Valid(t.Datatype) {
				continue // Validate reports the datatype
			}
			data, err := tensor.FromContents(t.Datatype, in.GetContents())
			if ce, ok := err.(*tensor.ContentsError); ok {
				return fail(invalid("unexpected explicit tensor data for input tensor '%s' for model '%s' of type '%s', expected datatype '%s'",
					t.Name, model, tensor.Name(ce.Field), in.GetDatatype()))
			}
			t.Data = data
		case next < len(raw):
			t.Data = raw[next]
			next++
		default:
			return fail(invalid("unable to find data for input tensor '%s' for model '%s' in request.", t.Name, model))
		}
	}
	if next < len(raw) {
		return fail(invalid("expected %d entries in raw_input_contents (one per input) but got %d for model '%s'", next, len(raw), model))
	}
	var classes []int
	var shmOut []*shm.View
	if outs := req.GetOutputs(); len(outs) > 0 {
		r.Outputs = make([]string, len(outs))
		for i, o := range outs {
			r.Outputs[i] = o.GetName()
		}
		var err error
		if classes, err = parseClassification(e, outs); err != nil {
			return fail(err)
		}
		if shmOut, err = acquireOutputs(outs, classes, sm); err != nil {
			return fail(err)
		}
	}
	if onGPU && shmOut != nil {
		// A GPU model writes outputs whose CUDA region is on its GPU in place.
		for i, v := range shmOut {
			if v == nil {
				continue
			}
			if ord, ptr, ok := v.Device(); ok && ord == gpu {
				if r.OutputBuffers == nil {
					r.OutputBuffers = make([]*engines.DeviceBuffer, len(shmOut))
				}
				r.OutputBuffers[i] = &engines.DeviceBuffer{Ordinal: ord, Ptr: ptr, Len: v.Len()}
			}
		}
	}
	opts, err := parseParameters(r, req.GetParameters())
	opts.classes, opts.shmOut, opts.shmIn = classes, shmOut, shmIn
	return r, opts, err
}

// acquireOutputs holds the shared memory windows requested outputs are written to, checked
// before the model runs as Triton checks them; on error it holds none.
func acquireOutputs(outs []*inference.ModelInferRequest_InferRequestedOutputTensor, classes []int, sm shmScope) ([]*shm.View, error) {
	var views []*shm.View
	fail := func(err error) ([]*shm.View, error) {
		for _, v := range views {
			v.Release()
		}
		return nil, err
	}
	for i, o := range outs {
		sp, err := parseShmParams(o.GetName(), o.GetParameters())
		if err != nil {
			return fail(err)
		}
		if !sp.hasShm {
			continue
		}
		if sm.m == nil {
			return fail(unimplemented(extSystemSharedMemory))
		}
		if classes != nil && classes[i] > 0 {
			return fail(invalid("output can't set both 'shared_memory_region' and 'classification'"))
		}
		v, err := sm.m.Acquire(sm.owner, sp.region, sp.offset, sp.size)
		if err != nil {
			return fail(err)
		}
		if views == nil {
			views = make([]*shm.View, len(outs))
		}
		views[i] = v
	}
	return views, nil
}

// parseParameters moves the reserved parameters into r and opts and leaves the rest to the model.
func parseParameters(r *engines.Request, params map[string]*inference.InferParameter) (callOptions, error) {
	var opts callOptions
	if len(params) == 0 {
		return opts, nil
	}
	custom := false
	for k, p := range params {
		switch k {
		case paramSequenceID:
			switch v := p.GetParameterChoice().(type) {
			case *inference.InferParameter_Int64Param:
				r.Sequence.ID.Uint = uint64(v.Int64Param)
			case *inference.InferParameter_Uint64Param:
				r.Sequence.ID.Uint = v.Uint64Param
			case *inference.InferParameter_StringParam:
				r.Sequence.ID.Text = v.StringParam
			default:
				return opts, wrongType(k, "int64_param or string_param")
			}
		case paramSequenceStart, paramSequenceEnd:
			v, ok := p.GetParameterChoice().(*inference.InferParameter_BoolParam)
			if !ok {
				return opts, wrongType(k, "bool_param")
			}
			if k == paramSequenceStart {
				r.Sequence.Start = v.BoolParam
			} else {
				r.Sequence.End = v.BoolParam
			}
		case paramPriority:
			switch v := p.GetParameterChoice().(type) {
			case *inference.InferParameter_Uint64Param:
				r.Priority = v.Uint64Param
			case *inference.InferParameter_Int64Param:
				if v.Int64Param < 0 {
					return opts, invalid("invalid value for 'priority' parameter, expected a value >= 0, got %d.", v.Int64Param)
				}
				r.Priority = uint64(v.Int64Param)
			default:
				return opts, wrongType(k, "int64_param or uint64_param")
			}
		case paramTimeout:
			v, ok := p.GetParameterChoice().(*inference.InferParameter_Int64Param)
			if !ok {
				return opts, wrongType(k, "int64_param")
			}
			if v.Int64Param > 0 {
				opts.timeout = time.Duration(min(v.Int64Param, math.MaxInt64/int64(time.Microsecond))) * time.Microsecond
				r.Timeout = opts.timeout
			}
		case paramEmptyFinal:
			v, ok := p.GetParameterChoice().(*inference.InferParameter_BoolParam)
			if !ok {
				return opts, wrongType(k, "bool_param")
			}
			opts.emptyFinal = v.BoolParam
		case paramHeaders, paramBinaryDataOut:
			// HTTP-side keys; meaningless on gRPC and ignored as Triton does.
		default:
			if strings.HasPrefix(k, reservedParamPrefix) {
				return opts, invalid("parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.")
			}
			if p.GetParameterChoice() == nil {
				return opts, invalid("parameter '%s' has no value", k)
			}
			custom = true
		}
	}
	if custom {
		r.Parameters = params
	}
	return opts, nil
}

func wrongType(key, want string) error {
	return invalid("invalid value type for '%s' parameter, expected %s.", key, want)
}

// encode builds the wire response for res: requested outputs in request order (all outputs in config
// order when none were requested), data in raw_output_contents as Triton always sends it.
func encode(e *engines.Entry, req *engines.Request, res *engines.Response, opts callOptions) (*inference.ModelInferResponse, error) {
	out := &inference.ModelInferResponse{
		ModelName:    e.Name(),
		ModelVersion: e.Version(),
		Id:           req.ID,
		Parameters:   res.Parameters,
	}
	n := len(req.Outputs)
	if n == 0 {
		n = len(res.Outputs)
	}
	tensors := make([]inference.ModelInferResponse_InferOutputTensor, n)
	out.Outputs = make([]*inference.ModelInferResponse_InferOutputTensor, n)
	out.RawOutputContents = make([][]byte, n)
	for i := range n {
		var t *engines.Tensor
		if len(req.Outputs) == 0 {
			t = &res.Outputs[i]
		} else if t = findOutput(res.Outputs, req.Outputs[i]); t == nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("model '%s' did not produce requested output '%s'", e.Name(), req.Outputs[i]))
		}
		if opts.classes != nil && opts.classes[i] > 0 {
			c, err := classify(e, t, opts.classes[i])
			if err != nil {
				return nil, err
			}
			t = &c
		}
		tensors[i].Name, tensors[i].Datatype, tensors[i].Shape = t.Name, tensor.Name(t.Datatype), t.Shape
		out.Outputs[i] = &tensors[i]
		data := t.Data
		if opts.shmOut != nil && opts.shmOut[i] != nil {
			if t.Device == nil { // else the GPU model wrote it there in place
				if err := writeShmOutput(opts.shmOut[i], t.Name, data); err != nil {
					return nil, err
				}
			}
			data = nil // Triton sends an empty entry for an output in shared memory
		}
		if data == nil {
			data = []byte{} // present even when empty, one entry per output
		}
		out.RawOutputContents[i] = data
	}
	return out, nil
}

func findOutput(outs []engines.Tensor, name string) *engines.Tensor {
	for i := range outs {
		if outs[i].Name == name {
			return &outs[i]
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// asStatus gives any error a gRPC code: *connect.Error keeps its own, context errors map to
// CANCELLED and DEADLINE_EXCEEDED, anything else is INTERNAL.
func asStatus(err error) *connect.Error {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}
