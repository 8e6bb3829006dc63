// Package engines defines what a servable model is (Model), the registry that names, versions and
// serves models (Registry), and the protocol-independent request path every adapter shares:
// validation against the model's config with Triton's error texts, sequence control, statistics.
package engines

import (
	"context"
	"time"

	"github.com/infergate/infergate/gen/inference"
)

// Tensor is one named tensor with its data in KServe raw form: little-endian, row-major, and for
// BYTES a run of uint32-length-prefixed elements. Data usually aliases the decoded request, whose
// buffer may be pooled: a model must not keep an input's Data after Execute returns (an output
// may alias an input; it is sent before the buffer is reused).
type Tensor struct {
	Name     string
	Datatype inference.DataType
	Shape    []int64
	Data     []byte
	// Device, for an input, holds its bytes in GPU memory in place of Data (Triton's CUDA
	// shared memory), given only to a GPUModel on that GPU, and only for a fixed-size
	// datatype. For an output, it says the model wrote the tensor to the request's
	// OutputBuffer for it, and Data is nil.
	Device *DeviceBuffer
}

// DeviceBuffer is Len bytes of GPU memory at device address Ptr on GPU Ordinal, valid in this
// process until the request ends (a client's CUDA shared memory region, opened here).
type DeviceBuffer struct {
	Ordinal int
	Ptr     uintptr
	Len     int
}

// ByteLen is the size of the tensor's bytes, wherever they are.
func (t *Tensor) ByteLen() int {
	if t.Device != nil {
		return t.Device.Len
	}
	return len(t.Data)
}

// Sequence carries the sequence-batching fields of a request to a sequence model.
type Sequence struct {
	// ID is the correlation id; a zero ID means the request names no sequence.
	ID         CorrelationID
	Start, End bool
}

// CorrelationID identifies a sequence: either a non-zero integer or a non-empty string.
type CorrelationID struct {
	Uint uint64
	Text string
}

// IsZero reports whether the id names no sequence.
func (c CorrelationID) IsZero() bool { return c.Uint == 0 && c.Text == "" }

// Request is one validated inference request as every model sees it, whatever protocol it came in on.
type Request struct {
	ID     string
	Inputs []Tensor
	// Outputs lists the requested output names in request order; empty means all outputs.
	Outputs []string
	// OutputBuffers, for a GPUModel, holds where on its GPU each requested output may be
	// written in place (a client's CUDA shared memory region), aligned with Outputs; nil
	// entries, or a nil slice: none.
	OutputBuffers []*DeviceBuffer
	Parameters    map[string]*inference.InferParameter
	Sequence      Sequence
	// Priority is the request's "priority" parameter (0: the model's default level) and Timeout
	// its "timeout" parameter (0: none); a scheduler such as the dynamic batcher reads them.
	Priority uint64
	Timeout  time.Duration
	// Queued and Batched are set by a Scheduler that ran the request: how long it waited in the
	// queue, and that it ran inside a batch the scheduler accounted as one execution (so the
	// adapter does not count it again).
	Queued  time.Duration
	Batched bool
}

// OutputBuffer returns the device buffer output name may be written to in place, or nil.
func (r *Request) OutputBuffer(name string) *DeviceBuffer {
	for i, o := range r.Outputs {
		if o == name && i < len(r.OutputBuffers) {
			return r.OutputBuffers[i]
		}
	}
	return nil
}

// Input returns the input tensor called name, or nil.
func (r *Request) Input(name string) *Tensor {
	for i := range r.Inputs {
		if r.Inputs[i].Name == name {
			return &r.Inputs[i]
		}
	}
	return nil
}

// Response is one response of a model: outputs in the model's config order, and for decoupled
// models whether it is the last one of the request.
type Response struct {
	Outputs    []Tensor
	Parameters map[string]*inference.InferParameter
	// Final marks the last response of a decoupled request. A decoupled model that returns without
	// sending a Final response ends with a flags-only final, as Triton backends do.
	Final bool
}

// Model is anything that can be served: a built-in engine model, an upstream server's model, a
// registered backend. Config is called once at registration and must not change afterwards.
//
// Execute runs one request. A model whose config is not decoupled calls send exactly once (unless
// it is a RequestDecoupler and the request asks to stream); a decoupled model calls it zero or
// more times. send returns an error when the client is gone, and Execute should then stop. Errors
// are returned as *connect.Error to choose their code; any other error is reported as INTERNAL.
type Model interface {
	Config() *inference.ModelConfig
	Execute(ctx context.Context, req *Request, send func(*Response) error) error
}

// RequestDecoupler is implemented by a model whose config is not decoupled but that answers some
// requests the way a decoupled model does, with zero or more responses, the last marked Final: an
// LLM whose request asks to stream. Its config stays non-decoupled, so one-response endpoints
// (ModelInfer, REST infer) serve its other requests.
type RequestDecoupler interface {
	Model
	// RequestDecoupled reports whether the validated request req is to be answered as a decoupled
	// model answers. Adapters serve such a request only where a stream of responses can go
	// (ModelStreamInfer, REST generate_stream) and refuse it elsewhere.
	RequestDecoupled(req *Request) bool
}

// InputReshaper is implemented by a model that also accepts inputs in a shape equivalent to the
// declared one (an LLM's text_input as [1,1] as well as [1], as Dynamo's frontend accepts it).
// Validate calls ReshapeInputs after checking input names and before checking shapes; it may set
// an input's Shape to the declared one (assigning a new slice: the old one may alias the wire
// request). Validate still checks the data against the new shape.
type InputReshaper interface {
	Model
	ReshapeInputs(req *Request)
}

// Scheduler runs an entry's requests in place of calling its model directly: the dynamic
// batcher. It has Model.Execute's contract, and sets the request's Queued and Batched.
type Scheduler interface {
	Execute(ctx context.Context, req *Request, send func(*Response) error) error
}

// SchedulerFactory returns the scheduler for an entry whose model runs with run, or nil to run
// the entry's requests directly. It is called when the entry is registered or reconfigured.
type SchedulerFactory func(e *Entry, run ExecuteFunc) Scheduler
