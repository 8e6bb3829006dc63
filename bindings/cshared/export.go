//go:build cgo

package main

/*
#include <stdint.h>
#include <stdlib.h>

// A tensor model's function: call identifies the request for ig_output and ig_fail; hdr is the
// request's JSON header (id, inputs' names, datatypes and shapes, requested outputs); data and
// lens are the inputs' raw bytes, in the header's order, valid until the function returns.
typedef int32_t (*ig_tensor_fn)(uint64_t call, const char *hdr, int64_t hdr_len, void **data, int64_t *lens, int32_t n);
// An LLM's function: body is the OpenAI request; text goes back through ig_emit.
typedef int32_t (*ig_llm_fn)(uint64_t call, const char *body, int64_t len, int32_t stream);

static int32_t ig_run_tensor(void *f, uint64_t call, const char *hdr, int64_t hl, void **d, int64_t *l, int32_t n) {
	return ((ig_tensor_fn)f)(call, hdr, hl, d, l, n);
}
static int32_t ig_run_llm(void *f, uint64_t call, const char *b, int64_t l, int32_t stream) {
	return ((ig_llm_fn)f)(call, b, l, stream);
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/bindings/embed"
	"github.com/infergate/infergate/engines"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/lib/tensor"
	"google.golang.org/protobuf/encoding/protojson"
)

// Handles: C holds integers, never Go pointers.
var (
	gateways sync.Map // int64 -> *host
	nextID   atomic.Int64
	calls    sync.Map // uint64 -> *call
	nextCall atomic.Uint64
)

// host is one gateway and the Python functions it calls. Calls into Python hold inflight, so
// that Stop can wait for them before the interpreter goes away.
type host struct {
	gw       *embed.Gateway
	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup
}

// enter reports whether a call into Python may start; leave must follow.
func (h *host) enter() bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return false
	}
	h.inflight.Add(1)
	return true
}

// call is one request in Python's hands.
type call struct {
	outputs []engines.Tensor
	err     error
	emit    func(string) error
}

func setErr(dst **C.char, err error) C.int32_t {
	if dst != nil {
		*dst = C.CString(err.Error())
	}
	return 1
}

func lookup(h C.int64_t) (*host, error) {
	v, ok := gateways.Load(int64(h))
	if !ok {
		return nil, errors.New("unknown gateway handle")
	}
	return v.(*host), nil
}

//export ig_free
func ig_free(p *C.char) { C.free(unsafe.Pointer(p)) }

// ig_new builds a gateway from a YAML/JSON config (isPath: cfg names a file). It returns a handle
// > 0, or 0 with *err set.
//
//export ig_new
func ig_new(cfg *C.char, cfgLen C.int64_t, isPath C.int32_t, errOut **C.char) C.int64_t {
	var c embed.Config
	var err error
	if isPath != 0 {
		c, err = embed.LoadConfig(C.GoStringN(cfg, C.int(cfgLen)))
	} else {
		c, err = embed.ParseConfig(C.GoBytes(unsafe.Pointer(cfg), C.int(cfgLen)))
	}
	if err != nil {
		setErr(errOut, err)
		return 0
	}
	gw, err := embed.New(c)
	if err != nil {
		setErr(errOut, err)
		return 0
	}
	id := nextID.Add(1)
	gateways.Store(id, &host{gw: gw})
	return C.int64_t(id)
}

// ig_start listens on listen; *addr gets the address (free it with ig_free).
//
//export ig_start
func ig_start(h C.int64_t, listen *C.char, addr **C.char, errOut **C.char) C.int32_t {
	g, err := lookup(h)
	if err != nil {
		return setErr(errOut, err)
	}
	a, err := g.gw.Start(C.GoString(listen))
	if err != nil {
		return setErr(errOut, err)
	}
	*addr = C.CString(a)
	return 0
}

// ig_stop drains the gateway for at most timeoutMs, then waits (as long again at most) for the
// Python calls still running, and refuses any new one. The handle stays valid until ig_close.
//
//export ig_stop
func ig_stop(h C.int64_t, timeoutMs C.int64_t, errOut **C.char) C.int32_t {
	g, err := lookup(h)
	if err != nil {
		return setErr(errOut, err)
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = g.gw.Stop(ctx)
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		err = errors.Join(err, errors.New("Python model calls still running after the drain timeout"))
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return setErr(errOut, err)
	}
	return 0
}

// ig_close forgets the handle (after ig_stop).
//
//export ig_close
func ig_close(h C.int64_t) { gateways.Delete(int64(h)) }

type tensorHeader struct {
	ID      string        `json:"id"`
	Inputs  []inputHeader `json:"inputs"`
	Outputs []string      `json:"outputs"`
}

type inputHeader struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ig_register_tensor registers a tensor model from a JSON embed.TensorSpec; fn is an ig_tensor_fn.
//
//export ig_register_tensor
func ig_register_tensor(h C.int64_t, spec *C.char, specLen C.int64_t, fn unsafe.Pointer, errOut **C.char) C.int32_t {
	g, err := lookup(h)
	if err != nil {
		return setErr(errOut, err)
	}
	var s embed.TensorSpec
	if err := json.Unmarshal(C.GoBytes(unsafe.Pointer(spec), C.int(specLen)), &s); err != nil {
		return setErr(errOut, fmt.Errorf("tensor model spec: %w", err))
	}
	name := s.Name
	err = g.gw.RegisterTensorModel(s, func(ctx context.Context, req *engines.Request) ([]engines.Tensor, error) {
		if !g.enter() {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("the gateway is stopping"))
		}
		defer g.inflight.Done()
		return runTensor(fn, name, req)
	})
	if err != nil {
		return setErr(errOut, err)
	}
	return 0
}

// runTensor calls the Python function with the request's inputs in place: their bytes are pinned
// and passed by address, not copied.
func runTensor(fn unsafe.Pointer, model string, req *engines.Request) ([]engines.Tensor, error) {
	hdr := tensorHeader{ID: req.ID, Inputs: make([]inputHeader, len(req.Inputs)), Outputs: req.Outputs}
	for i, in := range req.Inputs {
		hdr.Inputs[i] = inputHeader{Name: in.Name, Datatype: tensor.Name(in.Datatype), Shape: in.Shape}
	}
	hb, err := json.Marshal(hdr)
	if err != nil {
		return nil, err
	}
	n := len(req.Inputs)
	// C memory for the pointer and length arrays: C may hold pinned Go pointers only in C memory.
	ptrs := (*[1 << 20]unsafe.Pointer)(C.calloc(C.size_t(max(n, 1)), C.size_t(unsafe.Sizeof(uintptr(0)))))[:max(n, 1):max(n, 1)]
	lens := (*[1 << 20]C.int64_t)(C.calloc(C.size_t(max(n, 1)), 8))[:max(n, 1):max(n, 1)]
	defer C.free(unsafe.Pointer(&ptrs[0]))
	defer C.free(unsafe.Pointer(&lens[0]))
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, in := range req.Inputs {
		if len(in.Data) > 0 {
			pin.Pin(&in.Data[0])
			ptrs[i] = unsafe.Pointer(&in.Data[0])
		}
		lens[i] = C.int64_t(len(in.Data))
	}
	c := &call{}
	id := nextCall.Add(1)
	calls.Store(id, c)
	defer calls.Delete(id)
	pin.Pin(&hb[0])
	rc := C.ig_run_tensor(fn, C.uint64_t(id), (*C.char)(unsafe.Pointer(&hb[0])), C.int64_t(len(hb)),
		(*unsafe.Pointer)(unsafe.Pointer(&ptrs[0])), &lens[0], C.int32_t(n))
	if c.err != nil {
		return nil, c.err
	}
	if rc != 0 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("model '%s' failed without a message", model))
	}
	return c.outputs, nil
}

// ig_output adds one output to a running tensor call; its data is copied. Nonzero: the call is
// unknown, or the output is invalid (the call then fails with the reason).
//
//export ig_output
func ig_output(id C.uint64_t, name *C.char, datatype *C.char, shape *C.int64_t, ndim C.int32_t, data unsafe.Pointer, n C.int64_t) C.int32_t {
	v, ok := calls.Load(uint64(id))
	if !ok {
		return 1
	}
	c := v.(*call)
	out := C.GoString(name)
	if ndim < 0 || ndim > 64 || n < 0 || (n > 0 && data == nil) {
		c.err = connect.NewError(connect.CodeInternal, fmt.Errorf("output '%s': invalid rank %d or size %d", out, ndim, n))
		return 1
	}
	t := engines.Tensor{Name: out, Datatype: tensor.ParseDatatype(C.GoString(datatype)), Shape: make([]int64, ndim)}
	if ndim > 0 {
		for i, d := range unsafe.Slice(shape, int(ndim)) {
			t.Shape[i] = int64(d)
		}
	}
	t.Data = make([]byte, int(n))
	if n > 0 {
		copy(t.Data, unsafe.Slice((*byte)(data), int(n)))
	}
	c.outputs = append(c.outputs, t)
	return 0
}

// Codes Python may give ig_fail, as connect codes (Triton's gRPC codes).
var failCodes = map[string]connect.Code{
	"INVALID_ARGUMENT": connect.CodeInvalidArgument, "NOT_FOUND": connect.CodeNotFound,
	"UNAVAILABLE": connect.CodeUnavailable, "INTERNAL": connect.CodeInternal,
	"UNIMPLEMENTED": connect.CodeUnimplemented, "DEADLINE_EXCEEDED": connect.CodeDeadlineExceeded,
	"RESOURCE_EXHAUSTED": connect.CodeResourceExhausted, "FAILED_PRECONDITION": connect.CodeFailedPrecondition,
}

// ig_fail ends a running call (tensor or LLM) with an error; code is a gRPC code name (empty:
// INTERNAL).
//
//export ig_fail
func ig_fail(id C.uint64_t, code *C.char, msg *C.char) C.int32_t {
	v, ok := calls.Load(uint64(id))
	if !ok {
		return 1
	}
	cc, ok := failCodes[C.GoString(code)]
	if !ok {
		cc = connect.CodeInternal
	}
	v.(*call).err = connect.NewError(cc, errors.New(C.GoString(msg)))
	return 0
}

// ig_register_llm serves fn (an ig_llm_fn) as the LLM name.
//
//export ig_register_llm
func ig_register_llm(h C.int64_t, name *C.char, fn unsafe.Pointer, errOut **C.char) C.int32_t {
	g, err := lookup(h)
	if err != nil {
		return setErr(errOut, err)
	}
	model := C.GoString(name)
	err = g.gw.RegisterLLM(model, func(ctx context.Context, req embed.LLMRequest, emit func(string) error) error {
		if !g.enter() {
			return errors.New("the gateway is stopping")
		}
		defer g.inflight.Done()
		c := &call{emit: emit}
		id := nextCall.Add(1)
		calls.Store(id, c)
		defer calls.Delete(id)
		var pin runtime.Pinner
		defer pin.Unpin()
		body := req.Body
		if len(body) == 0 {
			body = []byte("{}")
		}
		pin.Pin(&body[0])
		stream := C.int32_t(0)
		if req.Stream {
			stream = 1
		}
		rc := C.ig_run_llm(fn, C.uint64_t(id), (*C.char)(unsafe.Pointer(&body[0])), C.int64_t(len(body)), stream)
		if c.err != nil {
			return c.err
		}
		if rc != 0 {
			return fmt.Errorf("model '%s' failed without a message", model)
		}
		return nil
	})
	if err != nil {
		return setErr(errOut, err)
	}
	return 0
}

// ig_emit sends text from a running LLM call. Nonzero: the client is gone (or the call unknown);
// the Python function should stop.
//
//export ig_emit
func ig_emit(id C.uint64_t, text *C.char, n C.int64_t) C.int32_t {
	v, ok := calls.Load(uint64(id))
	if !ok || n < 0 {
		return 1
	}
	c := v.(*call)
	if c.emit == nil {
		return 1
	}
	if err := c.emit(C.GoStringN(text, C.int(n))); err != nil {
		return 1
	}
	return 0
}

// ig_register_backend registers a remote backend from a JSON RegisterRequest (protojson, as the
// RegistryService takes it); *out gets the JSON RegisterResponse. The gateway heartbeats it.
//
//export ig_register_backend
func ig_register_backend(h C.int64_t, req *C.char, n C.int64_t, out **C.char, errOut **C.char) C.int32_t {
	g, err := lookup(h)
	if err != nil {
		return setErr(errOut, err)
	}
	var r registryv1.RegisterRequest
	if err := protojson.Unmarshal(C.GoBytes(unsafe.Pointer(req), C.int(n)), &r); err != nil {
		return setErr(errOut, fmt.Errorf("register request: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := g.gw.RegisterBackend(ctx, &r)
	if err != nil {
		return setErr(errOut, err)
	}
	b, _ := protojson.Marshal(res)
	*out = C.CString(string(b))
	return 0
}

// ig_deregister_backend ends a lease ig_register_backend took.
//
//export ig_deregister_backend
func ig_deregister_backend(h C.int64_t, lease *C.char, errOut **C.char) C.int32_t {
	g, err := lookup(h)
	if err != nil {
		return setErr(errOut, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.gw.DeregisterBackend(ctx, C.GoString(lease)); err != nil {
		return setErr(errOut, err)
	}
	return 0
}
