package inflate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// GRPC inflates gzip-compressed messages on a grpc-go server within the Inflater's bounds.
//
// grpc-go's own gzip decompressor stops only at the server's message limit (2 GiB for Triton's
// clients), runs before any handler or interceptor, and turns every failure into INTERNAL, with
// the status already sent. So this defers the inflating to the call: the server's decompressor
// (grpc-go's one per-server hook) passes a compressed message on as it came, marked; the codec
// keeps the marked bytes aside instead of decoding them; and each service registered through
// Registrar inflates them when its handler asks for the message, in the call's goroutine, where
// a refusal gets its proper code (RESOURCE_EXHAUSTED for a bound, INVALID_ARGUMENT for corrupt
// data) and the budget is held exactly until the message is decoded.
type GRPC struct {
	in     *Inflater
	codec  *deferringCodec
	maxMsg int64
}

// GRPC returns the grpc-go side of the Inflater for a server whose codec is codec and whose
// messages may be maxMsg bytes at most (grpc.MaxRecvMsgSize): grpc-go checks that limit only
// against the compressed bytes it passes on, so a message inflates to at most the smaller of
// maxMsg and MaxBytes.
func (in *Inflater) GRPC(codec encoding.CodecV2, maxMsg int) *GRPC {
	return &GRPC{in: in, codec: &deferringCodec{CodecV2: codec}, maxMsg: int64(maxMsg)}
}

// ServerOptions are the decompressor and codec the server needs; they replace any codec given
// before them. Every service must then be registered through Registrar.
func (g *GRPC) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.RPCDecompressor(passGzip{}), // deprecated, but the only per-server decompression hook
		grpc.ForceServerCodecV2(g.codec),
	}
}

// deferred starts the bytes a compressed message is passed on as. No protobuf message starts with
// a zero byte (field number 0 does not exist), so no real message is taken for one.
var deferred = []byte("\x00infergate:gzip\x00")

// passGzip passes a gzip message on undecompressed, behind the mark.
type passGzip struct{}

func (passGzip) Type() string { return "gzip" }

func (passGzip) Do(r io.Reader) ([]byte, error) {
	b := bytes.NewBuffer(append(make([]byte, 0, 4<<10), deferred...))
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// deferringCodec sets a marked message's bytes aside for the call to inflate, and decodes any
// other message with the server's codec.
type deferringCodec struct {
	encoding.CodecV2
	pending sync.Map     // message being received -> its compressed bytes
	held    atomic.Int64 // entries in pending: when none, a read skips the map
}

func (c *deferringCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if len(data) == 1 {
		if b := data[0].ReadOnlyData(); bytes.HasPrefix(b, deferred) {
			// passGzip's own buffer, which grpc-go does not recycle: kept as it is.
			c.held.Add(1)
			c.pending.Store(v, b[len(deferred):])
			return nil
		}
	}
	return c.CodecV2.Unmarshal(data, v)
}

// receive completes the reading of v (err is grpc-go's): a message set aside is inflated and
// decoded now.
func (g *GRPC) receive(v any, err error) error {
	if g.codec.held.Load() == 0 {
		return err // nothing set aside, by this call or any other
	}
	b, ok := g.codec.pending.LoadAndDelete(v)
	if ok {
		g.codec.held.Add(-1)
	}
	if err != nil || !ok {
		return err
	}
	r, err := g.in.newReader("gzip", bytes.NewReader(b.([]byte)), g.maxMsg)
	if err != nil {
		return statusOf(err)
	}
	defer r.Close() // the budget is given back once the message is decoded
	out, err := readAll(r, len(b.([]byte)))
	if err != nil {
		return statusOf(err)
	}
	if err := g.codec.CodecV2.Unmarshal(mem.BufferSlice{mem.SliceBuffer(out)}, v); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	return nil
}

// readAll reads r to its end, starting from a buffer a few times the compressed size.
func readAll(r io.Reader, compressed int) ([]byte, error) {
	out := make([]byte, 0, min(4*compressed+512, 1<<20))
	for {
		if len(out) == cap(out) {
			out = slices.Grow(out, len(out)) // doubling: a large message is copied about once
		}
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// statusOf is the gRPC status of a refusal.
func statusOf(err error) error {
	var ie *Error
	switch {
	case !errors.As(err, &ie):
		return status.Error(codes.Internal, err.Error())
	case ie.Reason == Corrupt:
		return status.Error(codes.InvalidArgument, ie.Error())
	}
	return status.Error(codes.ResourceExhausted, ie.Error())
}

// Registrar returns r, registering every service so that its handlers' message reads (unary
// decoding and streams' RecvMsg) inflate the messages the codec set aside. It also serves
// reflection's GetServiceInfo when r does.
func (g *GRPC) Registrar(r grpc.ServiceRegistrar) grpc.ServiceRegistrar { return registrar{r, g} }

type registrar struct {
	grpc.ServiceRegistrar
	g *GRPC
}

func (r registrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		h := m.Handler
		m.Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return r.g.receive(v, dec(v)) }, ic)
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		h := s.Handler
		s.Handler = func(srv any, ss grpc.ServerStream) error { return h(srv, receiving{ss, r.g}) }
		d.Streams[i] = s
	}
	r.ServiceRegistrar.RegisterService(&d, impl)
}

// GetServiceInfo is the server's, for server reflection.
func (r registrar) GetServiceInfo() map[string]grpc.ServiceInfo {
	if s, ok := r.ServiceRegistrar.(interface {
		GetServiceInfo() map[string]grpc.ServiceInfo
	}); ok {
		return s.GetServiceInfo()
	}
	return nil
}

type receiving struct {
	grpc.ServerStream
	g *GRPC
}

func (s receiving) RecvMsg(m any) error { return s.g.receive(m, s.ServerStream.RecvMsg(m)) }
