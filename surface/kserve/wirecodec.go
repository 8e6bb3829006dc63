package kserve

import (
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// zeroCopyThreshold is the message size from which tensorCodec stops copying tensor payloads;
// below it the stock codec is as fast and pools its buffers.
const zeroCopyThreshold = 64 << 10

// Field numbers of the tensor payloads in Triton's messages.
const (
	fieldRawInputContents  protowire.Number = 7 // ModelInferRequest.raw_input_contents
	fieldRawOutputContents protowire.Number = 6 // ModelInferResponse.raw_output_contents
)

// tensorCodec is grpc-go's proto codec, except that large inference messages keep their tensor
// bytes where they are: a request's raw_input_contents alias the one buffer the message was read
// into (protobuf-go would copy every bytes field), and a response's raw_output_contents are sent
// from the model's own buffers instead of being copied into a marshalled message. For an identity
// model that is two fewer copies of the tensor per call.
//
// The buffer a large unary request is read into is pooled, so back-to-back large calls reuse one
// buffer instead of leaving the last call's as garbage: the request holds a reference until the
// call's handler returns (claimRequest / releaseRequest), and response tensors that alias it hold
// theirs until grpc-go has written them, so the buffer goes back to the pool only when nothing
// can read it any more.
type tensorCodec struct {
	stock encoding.CodecV2
	pool  *largePool
	// reading maps a decoded request to the pooled buffer its tensors alias, from Unmarshal until
	// the RPC claims it; writing maps a unary response to that buffer, from the handler's return
	// until Marshal sends it.
	reading, writing sync.Map
}

func newTensorCodec() *tensorCodec {
	return &tensorCodec{stock: encoding.GetCodecV2(grpcproto.Name), pool: newLargePool()}
}

func (*tensorCodec) Name() string { return grpcproto.Name }

func (c *tensorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	req, ok := v.(*inference.ModelInferRequest)
	if !ok || data.Len() < zeroCopyThreshold {
		return c.stock.Unmarshal(data, v)
	}
	// A buffer of our own (grpc-go recycles the pieces of data), which the request's raw contents
	// then alias for as long as the request lives. The message is placed so that the first raw
	// tensor starts 8-byte aligned: typed views of it (tensor.View) are then zero-copy, where an
	// unaligned tensor would be copied whole.
	n := data.Len()
	var head [4 << 10]byte
	shift := 0
	if o := rawOffset(head[:copyPrefix(head[:], data)]); o >= 0 {
		shift = (8 - o%8) % 8
	}
	buf := c.pool.Get(n + shift)
	msg := (*buf)[shift:]
	data.CopyTo(msg)
	held := mem.NewBuffer(buf, c.pool)
	if err := unmarshalInferRequest(msg, req); err != nil {
		held.Free()
		return err
	}
	// A message decoded into the same request again (a second message on a unary call) must not
	// strand the first one's buffer.
	if old, loaded := c.reading.Swap(req, held); loaded {
		old.(mem.Buffer).Free()
	}
	return nil
}

// copyPrefix copies the start of data into dst and returns how many bytes it copied.
func copyPrefix(dst []byte, data mem.BufferSlice) int {
	n := 0
	for _, b := range data {
		n += copy(dst[n:], b.ReadOnlyData())
		if n == len(dst) {
			break
		}
	}
	return n
}

// rawOffset returns where the first raw_input_contents payload starts in a ModelInferRequest
// whose first bytes are prefix, or -1 when prefix ends (or is malformed) before reaching it.
// Marshallers write fields in number order, so the small fields come first and the tensors last.
func rawOffset(prefix []byte) int {
	off := 0
	for off < len(prefix) {
		num, typ, n := protowire.ConsumeTag(prefix[off:])
		if n < 0 {
			return -1
		}
		if num == fieldRawInputContents && typ == protowire.BytesType {
			_, m := protowire.ConsumeVarint(prefix[off+n:])
			if m < 0 {
				return -1
			}
			return off + n + m
		}
		m := protowire.ConsumeFieldValue(num, typ, prefix[off+n:])
		if m < 0 {
			return -1
		}
		off += n + m
	}
	return -1
}

// claimRequest takes the pooled buffer a decoded request aliases, if any. Every decoded request
// must be claimed, or the codec would keep it reachable.
func (c *tensorCodec) claimRequest(req any) mem.Buffer {
	if _, ok := req.(*inference.ModelInferRequest); !ok {
		return nil
	}
	if b, ok := c.reading.LoadAndDelete(req); ok {
		return b.(mem.Buffer)
	}
	return nil
}

// releaseRequest hands a unary call's request buffer on once its handler returned: to Marshal, for
// the response tensors that alias it, or back to the pool when there is no response to send.
func (c *tensorCodec) releaseRequest(held mem.Buffer, resp any) {
	if held == nil {
		return
	}
	if res, ok := resp.(*inference.ModelInferResponse); ok && res != nil {
		c.writing.Store(res, held)
		return
	}
	held.Free()
}

// unmarshalInferRequest decodes b into req like proto.Unmarshal, but with raw_input_contents
// aliasing b. Every other field goes through protobuf-go.
func unmarshalInferRequest(b []byte, req *inference.ModelInferRequest) error {
	var rest []byte
	var raw [][]byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("inference.ModelInferRequest: %w", protowire.ParseError(n))
		}
		if num == fieldRawInputContents && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b[n:])
			if m < 0 {
				return fmt.Errorf("inference.ModelInferRequest: %w", protowire.ParseError(m))
			}
			raw = append(raw, v[:len(v):len(v)])
			b = b[n+m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("inference.ModelInferRequest: %w", protowire.ParseError(m))
		}
		rest = append(rest, b[:n+m]...)
		b = b[n+m:]
	}
	if err := proto.Unmarshal(rest, req); err != nil {
		return err
	}
	req.RawInputContents = append(req.RawInputContents, raw...)
	return nil
}

func (c *tensorCodec) Marshal(v any) (mem.BufferSlice, error) {
	res, ok := v.(*inference.ModelInferResponse)
	var held mem.Buffer
	if ok {
		if b, found := c.writing.LoadAndDelete(res); found {
			held = b.(mem.Buffer)
			defer held.Free() // the request's reference; views taken below keep their own
		}
	}
	if !ok || rawSize(res.GetRawOutputContents()) < zeroCopyThreshold {
		return c.stock.Marshal(v)
	}
	return marshalInferResponse(res, held)
}

// marshalInferResponse encodes res as proto.Marshal would, with each raw output sent from its own
// buffer. Fields may appear in any order on the wire, so the raw outputs simply follow the rest.
// The response belongs to the call being answered, so setting its raw contents aside while the
// other fields are marshalled is safe. An output that aliases held (the request's pooled buffer,
// as an identity model's does) is sent as a counted view of it, so the buffer is not reused before
// grpc-go has written it.
func marshalInferResponse(res *inference.ModelInferResponse, held mem.Buffer) (mem.BufferSlice, error) {
	raw := res.RawOutputContents
	res.RawOutputContents = nil
	head, err := proto.Marshal(res)
	res.RawOutputContents = raw
	if err != nil {
		return nil, err
	}
	out := make(mem.BufferSlice, 0, 1+2*len(raw))
	out = append(out, mem.SliceBuffer(head))
	for _, r := range raw {
		tag := protowire.AppendTag(make([]byte, 0, 12), fieldRawOutputContents, protowire.BytesType)
		tag = protowire.AppendVarint(tag, uint64(len(r)))
		out = append(out, mem.SliceBuffer(tag))
		if len(r) > 0 {
			out = append(out, viewOf(r, held))
		}
	}
	return out, nil
}

// viewOf returns r as a buffer to send: a counted view when r lies within held, else r itself.
func viewOf(r []byte, held mem.Buffer) mem.Buffer {
	if held != nil {
		all := held.ReadOnlyData()
		base := uintptr(unsafe.Pointer(unsafe.SliceData(all)))
		p := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
		if p >= base && p+uintptr(len(r)) <= base+uintptr(len(all)) {
			off := int(p - base)
			return held.Slice(off, off+len(r))
		}
	}
	return mem.SliceBuffer(r)
}

// largePool pools the buffers large requests are read into. Up to 1 MiB it is grpc-go's own tiered
// pool. Above, where rounding to a power of two could double a tensor's footprint, it keeps the
// last few buffers and reuses one whose size fits within an eighth. A buffer idle for a minute is
// dropped, and none above largePoolMax is kept, so a burst of huge tensors does not pin memory.
type largePool struct {
	small mem.BufferPool

	mu    sync.Mutex
	idle  []idleBuffer // most recently returned last
	timer *time.Timer
}

type idleBuffer struct {
	b  []byte
	at time.Time
}

const (
	largePoolMin     = 1 << 20
	largePoolMax     = 256 << 20
	largePoolIdle    = 2
	largePoolIdleFor = time.Minute
)

func newLargePool() *largePool { return &largePool{small: mem.DefaultBufferPool()} }

func (p *largePool) Get(n int) *[]byte {
	if n <= largePoolMin {
		return p.small.Get(n)
	}
	p.mu.Lock()
	for i := len(p.idle) - 1; i >= 0; i-- {
		if b := p.idle[i].b; cap(b) >= n && cap(b)-n <= n/8 {
			p.idle = slices.Delete(p.idle, i, i+1)
			p.mu.Unlock()
			b = b[:n]
			return &b
		}
	}
	p.mu.Unlock()
	b := make([]byte, n)
	return &b
}

func (p *largePool) Put(b *[]byte) {
	if cap(*b) <= largePoolMin {
		p.small.Put(b)
		return
	}
	if cap(*b) > largePoolMax {
		return // left to the garbage collector
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) == largePoolIdle {
		p.idle = slices.Delete(p.idle, 0, 1)
	}
	p.idle = append(p.idle, idleBuffer{(*b)[:0], time.Now()})
	if p.timer == nil {
		p.timer = time.AfterFunc(largePoolIdleFor, p.expire)
	}
}

// expire drops the buffers idle for largePoolIdleFor and checks again when the next one will be.
func (p *largePool) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.idle = slices.DeleteFunc(p.idle, func(b idleBuffer) bool { return now.Sub(b.at) >= largePoolIdleFor })
	if len(p.idle) == 0 {
		p.timer = nil
		return
	}
	p.timer.Reset(largePoolIdleFor - now.Sub(p.idle[0].at))
}

// framePool is the transport's buffer pool: grpc-go's default, except that the 16 KiB buffers
// HTTP/2 DATA frames are read into are kept on a free list rather than in a sync.Pool. A large
// message arrives as thousands of such frames, all held until the message is complete; a
// sync.Pool, emptied by every other garbage collection, would let the next message allocate a
// fresh set while the last one's is still garbage. The list keeps at most framePoolMax buffers and
// is dropped after a minute without frames coming back.
type framePool struct {
	small mem.BufferPool

	mu      sync.Mutex
	free    []*[]byte
	lastPut time.Time
	timer   *time.Timer
}

const (
	frameSize    = 16 << 10
	framePoolMax = 8192 // 128 MiB of frames
)

func newFramePool() *framePool { return &framePool{small: mem.DefaultBufferPool()} }

func (p *framePool) Get(n int) *[]byte {
	if n <= 4<<10 || n > frameSize {
		return p.small.Get(n)
	}
	p.mu.Lock()
	if k := len(p.free); k > 0 {
		b := p.free[k-1]
		p.free = p.free[:k-1]
		p.mu.Unlock()
		*b = (*b)[:n]
		return b
	}
	p.mu.Unlock()
	b := make([]byte, n, frameSize)
	return &b
}

func (p *framePool) Put(b *[]byte) {
	if cap(*b) != frameSize {
		p.small.Put(b)
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < framePoolMax {
		p.free = append(p.free, b)
	}
	p.lastPut = now
	if p.timer == nil {
		p.timer = time.AfterFunc(largePoolIdleFor, p.expire)
	}
}

// expire drops the free list once no frame came back for largePoolIdleFor, else checks again
// when that time would be up.
func (p *framePool) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if idle := time.Since(p.lastPut); idle < largePoolIdleFor {
		p.timer.Reset(largePoolIdleFor - idle)
		return
	}
	p.free = nil
	p.timer = nil
}

func rawSize(raw [][]byte) int {
	n := 0
	for _, r := range raw {
		n += len(r)
	}
	return n
}
