//go:build cuda

package cuda

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/dense"
	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/protobuf/proto"
)

// instance is one model instance: a stream of its own and the C memory its launches read their
// arguments from. A model's instances run requests in parallel, as Triton's do.
type instance struct {
	st *stream
	a  *args
}

// instances is a model's set of instances, taken one per request.
type instances struct {
	d    *Device
	free chan *instance
	all  []*instance
}

func newInstances(d *Device, count int) (*instances, error) {
	if count < 1 {
		count = 1
	}
	is := &instances{d: d, free: make(chan *instance, count)}
	for range count {
		st, err := d.newStream()
		if err != nil {
			is.close()
			return nil, err
		}
		in := &instance{st: st, a: newArgs()}
		is.all = append(is.all, in)
		is.free <- in
	}
	return is, nil
}

// run takes a free instance (waiting while all are busy, until ctx ends) and calls fn with it
// on a thread with the device's context current.
func (is *instances) run(ctx context.Context, fn func(*instance) error) error {
	var in *instance
	select {
	case in = <-is.free:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { is.free <- in }()
	return is.d.run(func() error { return fn(in) })
}

func (is *instances) close() {
	for _, in := range is.all {
		in.st.close()
		in.a.free()
	}
}

// staging is what one request holds from the device's pools, given back by release.
type staging struct {
	d      *Device
	dev    []block[uintptr]
	pinned []block[unsafe.Pointer]
}

func (s *staging) device(n int) (uintptr, error) {
	b, err := s.d.mem.get(int64(n))
	if err != nil {
		return 0, err
	}
	s.dev = append(s.dev, b)
	return b.ptr, nil
}

// host returns n bytes of pinned host memory, as a slice over it.
func (s *staging) host(n int) ([]byte, error) {
	b, err := s.d.pinned.get(int64(n))
	if err != nil {
		return nil, err
	}
	s.pinned = append(s.pinned, b)
	return unsafe.Slice((*byte)(b.ptr), n), nil
}

func (s *staging) release() {
	for _, b := range s.dev {
		s.d.mem.put(b)
	}
	for _, b := range s.pinned {
		s.d.pinned.put(b)
	}
}

// directBytes is the size from which tensors are copied between Go memory and the device
// directly (the driver stages pageable memory itself, in pipelined chunks) rather than through
// the pinned pool (one memcpy into pinned memory, then the DMA): below it, the pinned copy is
// asynchronous and cheaper; above it, the driver's pipeline beats a copy then a DMA.
// BenchmarkCopy measures both.
var directBytes = 1 << 20

// upload copies data to fresh device memory; the copy is queued on st (from pinned memory) or
// done (from Go memory, directBytes and up) when upload returns.
func (s *staging) upload(st *stream, data []byte) (uintptr, error) {
	if len(data) >= directBytes {
		p, err := s.device(len(data))
		if err != nil {
			return 0, err
		}
		return p, st.upload(p, unsafe.Pointer(&data[0]), len(data))
	}
	h, err := s.host(len(data))
	if err != nil {
		return 0, err
	}
	copy(h, data)
	p, err := s.device(len(data))
	if err != nil {
		return 0, err
	}
	return p, st.upload(p, unsafe.Pointer(&h[0]), len(data))
}

// input returns where t's bytes are on the device: in place when they are in GPU memory on
// this device already (a client's CUDA shared memory), else uploaded.
func (s *staging) input(st *stream, t *engines.Tensor) (uintptr, error) {
	if t.Device != nil {
		if t.Device.Ordinal != s.d.ordinal {
			return 0, fmt.Errorf("cuda: input '%s' is on GPU %d, not this model's GPU %d", t.Name, t.Device.Ordinal, s.d.ordinal)
		}
		return t.Device.Ptr, nil
	}
	return s.upload(st, t.Data)
}

// outputTarget returns the device buffer output name is written to in place, when the request
// gives one on this device big enough for n bytes.
func (s *staging) outputTarget(req *engines.Request, name string, n int) *engines.DeviceBuffer {
	b := req.OutputBuffer(name)
	if b == nil || b.Ordinal != s.d.ordinal || b.Len < n {
		return nil
	}
	return b
}

// downloadTo copies len(dst) bytes at p into dst, once the stream's work before it is done:
// directly from directBytes up (the call returns when they are there), else by way of pinned
// memory, whose bytes finish reaches dst after the stream's sync.
func (s *staging) downloadTo(st *stream, dst []byte, p uintptr) (finish func(), err error) {
	if len(dst) >= directBytes {
		return func() {}, st.download(unsafe.Pointer(&dst[0]), p, len(dst))
	}
	h, err := s.download(st, p, len(dst))
	if err != nil {
		return nil, err
	}
	return func() { copy(dst, h) }, nil
}

// deliver puts t's n bytes, at src on the device, where the request wants them: copied device to
// device into its buffer for t (t.Device set), or to the host (t.Data); it waits for the stream.
func (s *staging) deliver(st *stream, req *engines.Request, t *engines.Tensor, src uintptr, n int) error {
	if b := s.outputTarget(req, t.Name, n); b != nil {
		t.Device = b
		if err := st.copyDevice(b.Ptr, src, n); err != nil {
			return err
		}
		return st.sync()
	}
	t.Data = make([]byte, n)
	finish, err := s.downloadTo(st, t.Data, src)
	if err != nil {
		return err
	}
	if err := st.sync(); err != nil {
		return err
	}
	finish()
	return nil
}

// download queues the copy of n bytes at p to pinned memory; the bytes are there once the
// stream is synchronized.
func (s *staging) download(st *stream, p uintptr, n int) ([]byte, error) {
	h, err := s.host(n)
	if err != nil {
		return nil, err
	}
	return h, st.download(unsafe.Pointer(&h[0]), p, n)
}

// gpuConfig is cfg served on GPU ordinal with count instances.
func gpuConfig(cfg *inference.ModelConfig, ordinal, count int) *inference.ModelConfig {
	c := proto.Clone(cfg).(*inference.ModelConfig)
	c.InstanceGroup = []*inference.ModelInstanceGroup{{
		Name: c.GetName(), Kind: inference.ModelInstanceGroup_KIND_GPU, Count: int32(max(count, 1)), Gpus: []int32{int32(ordinal)},
	}}
	return c
}

// onDevice is what every GPU model has: its config and its instances on one device.
type onDevice struct {
	cfg *inference.ModelConfig
	is  *instances
}

// place makes a model's instances: cfg (its CPU config) served on d with count of them.
func place(d *Device, cfg *inference.ModelConfig, count int) (onDevice, error) {
	is, err := newInstances(d, count)
	if err != nil {
		return onDevice{}, err
	}
	return onDevice{cfg: gpuConfig(cfg, d.ordinal, count), is: is}, nil
}

// Config implements engines.Model.
func (m *onDevice) Config() *inference.ModelConfig { return m.cfg }

// GPU implements engines.GPUModel.
func (m *onDevice) GPU() int { return m.is.d.ordinal }

// Close frees the model's streams.
func (m *onDevice) Close() { m.is.close() }

// Simple is Triton's `simple` on the GPU: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 -
// INPUT1 over INT32 [batch, 16], computed by a kernel.
type Simple struct{ onDevice }

// NewSimple places `simple` (whose CPU config is cfg) on d with count instances.
func NewSimple(d *Device, cfg *inference.ModelConfig, count int) (*Simple, error) {
	o, err := place(d, cfg, count)
	return &Simple{o}, err
}

// Execute implements engines.Model.
func (m *Simple) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	a, b := req.Input("INPUT0"), req.Input("INPUT1")
	if a == nil || b == nil || a.ByteLen() != b.ByteLen() || a.ByteLen() == 0 {
		return fmt.Errorf("simple: INPUT0 and INPUT1 must be the same shape")
	}
	n := a.ByteLen()
	outs := []engines.Tensor{
		{Name: "OUTPUT0", Datatype: inference.DataType_TYPE_INT32, Shape: a.Shape},
		{Name: "OUTPUT1", Datatype: inference.DataType_TYPE_INT32, Shape: a.Shape},
	}
	err := m.is.run(ctx, func(in *instance) error {
		s := &staging{d: m.is.d}
		defer s.release()
		da, err := s.input(in.st, a)
		if err != nil {
			return err
		}
		db, err := s.input(in.st, b)
		if err != nil {
			return err
		}
		// Each output goes where the request wants it on the device, or to scratch memory and
		// then to the host.
		var dst [2]uintptr
		for i := range outs {
			if t := s.outputTarget(req, outs[i].Name, n); t != nil {
				dst[i], outs[i].Device = t.Ptr, t
				continue
			}
			if dst[i], err = s.device(n); err != nil {
				return err
			}
		}
		in.a.set(uint64(da), uint64(db), uint64(dst[0]), uint64(dst[1]), uint64(n/4))
		if err := in.st.launch(m.is.d.addSub, n/4, in.a); err != nil {
			return err
		}
		var finish []func()
		for i := range outs {
			if outs[i].Device != nil {
				continue
			}
			outs[i].Data = make([]byte, n)
			f, err := s.downloadTo(in.st, outs[i].Data, dst[i])
			if err != nil {
				return err
			}
			finish = append(finish, f)
		}
		if err := in.st.sync(); err != nil {
			return err
		}
		for _, f := range finish {
			f()
		}
		return nil
	})
	if err != nil {
		return status(m.cfg.GetName(), err)
	}
	return send(&engines.Response{Outputs: outs})
}

// Identity is identity_fp32 on the GPU: the input goes to the device and comes back, which is
// the round trip's cost and nothing else.
type Identity struct{ onDevice }

// NewIdentity places identity_fp32 (whose CPU config is cfg) on d with count instances.
func NewIdentity(d *Device, cfg *inference.ModelConfig, count int) (*Identity, error) {
	o, err := place(d, cfg, count)
	return &Identity{o}, err
}

// Execute implements engines.Model.
func (m *Identity) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("INPUT0")
	if in == nil {
		return fmt.Errorf("identity_fp32: no INPUT0")
	}
	n := in.ByteLen()
	res := engines.Tensor{Name: "OUTPUT0", Datatype: inference.DataType_TYPE_FP32, Shape: in.Shape}
	if n > 0 {
		err := m.is.run(ctx, func(inst *instance) error {
			s := &staging{d: m.is.d}
			defer s.release()
			if t := s.outputTarget(req, "OUTPUT0", n); t != nil && in.Device == nil {
				// From the host into the client's region: the upload itself.
				res.Device = t
				if err := inst.st.upload(t.Ptr, unsafe.Pointer(&in.Data[0]), n); err != nil {
					return err
				}
				return inst.st.sync()
			}
			p, err := s.input(inst.st, in)
			if err != nil {
				return err
			}
			return s.deliver(inst.st, req, &res, p, n)
		})
		if err != nil {
			return status(m.cfg.GetName(), err)
		}
	} else {
		res.Data = []byte{}
	}
	return send(&engines.Response{Outputs: []engines.Tensor{res}})
}

// Dense is a dense network on the GPU: its weights uploaded once, each layer a cuBLAS SGEMM and
// a bias-and-activation kernel, the whole request one queue of work on an instance's stream.
type Dense struct {
	onDevice
	net    *dense.Network
	layers []deviceLayer
}

type deviceLayer struct {
	w, b uintptr
}

// NewDense uploads net's weights to d and serves it as name, batched up to maxBatch, with
// count instances.
func NewDense(d *Device, name string, net *dense.Network, maxBatch int32, count int) (*Dense, error) {
	if err := loadDriver(); err != nil {
		return nil, err
	}
	if driver.blasErr != nil {
		return nil, fmt.Errorf("cuda: the dense model needs cuBLAS: %w", driver.blasErr)
	}
	o, err := place(d, dense.Config(name, net, maxBatch, inference.ModelInstanceGroup_KIND_GPU, 1, "infergate_cuda"), count)
	if err != nil {
		return nil, err
	}
	m := &Dense{onDevice: o, net: net}
	alloc := deviceAlloc{d}
	st := o.is.all[0].st
	err = d.run(func() error {
		for _, l := range net.Layers {
			var dl deviceLayer
			for _, t := range []struct {
				dst *uintptr
				src []float32
			}{{&dl.w, l.W}, {&dl.b, l.B}} {
				p, err := alloc.alloc(int64(4 * len(t.src)))
				if err != nil {
					return err
				}
				*t.dst = p
				// A synchronous copy from Go memory: once, at load.
				if err := st.upload(p, unsafe.Pointer(&t.src[0]), 4*len(t.src)); err != nil {
					return err
				}
				if err := st.sync(); err != nil {
					return err
				}
			}
			m.layers = append(m.layers, dl)
		}
		return nil
	})
	if err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Close frees the weights and the streams.
func (m *Dense) Close() {
	alloc := deviceAlloc{m.is.d}
	for _, l := range m.layers {
		if l.w != 0 {
			_ = alloc.free(l.w)
		}
		if l.b != 0 {
			_ = alloc.free(l.b)
		}
	}
	m.layers = nil
	m.is.close()
}

// Execute implements engines.Model.
func (m *Dense) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in, rows, err := dense.Rows(req, m.net)
	if err != nil {
		return err
	}
	outBytes := 4 * rows * m.net.Out()
	res := engines.Tensor{Name: dense.Output, Datatype: inference.DataType_TYPE_FP32, Shape: []int64{int64(rows), int64(m.net.Out())}}
	err = m.is.run(ctx, func(inst *instance) error {
		s := &staging{d: m.is.d}
		defer s.release()
		x, err := s.input(inst.st, in)
		if err != nil {
			return err
		}
		y, err := m.forward(inst, s, x, rows)
		if err != nil {
			return err
		}
		return s.deliver(inst.st, req, &res, y, outBytes)
	})
	if err != nil {
		return status(m.cfg.GetName(), err)
	}
	return send(&engines.Response{Outputs: []engines.Tensor{res}})
}

// forward queues the network on x (rows×In on the device) and returns where the output will be.
func (m *Dense) forward(inst *instance, s *staging, x uintptr, rows int) (uintptr, error) {
	if err := inst.st.gemmHandle(); err != nil {
		return 0, err
	}
	var buf [2]uintptr
	for i := range buf {
		p, err := s.device(4 * rows * m.net.Widest())
		if err != nil {
			return 0, err
		}
		buf[i] = p
	}
	cur := x
	for i, l := range m.net.Layers {
		y := buf[i%2]
		if err := inst.st.gemm(y, cur, m.layers[i].w, rows, l.In, l.Out); err != nil {
			return 0, err
		}
		relu := uint64(0)
		if l.ReLU {
			relu = 1
		}
		inst.a.set(uint64(y), uint64(m.layers[i].b), uint64(rows), uint64(l.Out), relu)
		if err := inst.st.launch(m.is.d.biasAct, rows*l.Out, inst.a); err != nil {
			return 0, err
		}
		cur = y
	}
	return cur, nil
}
