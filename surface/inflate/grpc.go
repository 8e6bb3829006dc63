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

// GRPC inflates gzip- and deflate-compressed messages on a grpc-go server within the Inflater's
// bounds, and answers each call compressed only with an encoding its client accepts.
//
// grpc-go's own gzip decompressor stops only at the server's message limit (2 GiB for Triton's
// clients), runs before any handler or interceptor, and turns every failure into INTERNAL, with
// the status already sent. So this defers the inflating to the call: the server's decompressor
// (grpc-go's one per-server hook) passes a compressed message on as it came, marked; the codec
// keeps the marked bytes aside instead of decoding them; and each service registered through
// Registrar inflates them when its handler asks for the message, in the call's goroutine, where
// a refusal gets its proper code (RESOURCE_EXHAUSTED for a bound, INVALID_ARGUMENT for corrupt
// data) and the budget is held exactly until the message is decoded.
//
// grpc-go has one per-server decompression hook, taken by gzip; deflate reaches the server only
// through grpc-go's process-wide compressor registry. So this package registers a "deflate"
// compressor there (see deflate.go) that inflates as any client expects, except when it runs
// inside a message read of a service registered through Registrar: there it passes the message
// on marked, like gzip's.
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

// The marks a compressed message is passed on behind, one per encoding. No protobuf message
// starts with a zero byte (field number 0 does not exist), so no real message is taken for one.
var (
	deferredGzip    = []byte("\x00infergate:gzip\x00")
	deferredDeflate = []byte("\x00infergate:deflate\x00")
)

// passGzip passes a gzip message on undecompressed, behind the mark.
type passGzip struct{}

func (passGzip) Type() string { return "gzip" }

func (passGzip) Do(r io.Reader) ([]byte, error) {
	b := bytes.NewBuffer(append(make([]byte, 0, 4<<10), deferredGzip...))
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// setAside is a compressed message kept for the call to inflate.
type setAside struct {
	encoding string
	b        []byte
}

// deferringCodec sets a marked message's bytes aside for the call to inflate, and decodes any
// other message with the server's codec.
type deferringCodec struct {
	encoding.CodecV2
	pending sync.Map     // message being received -> its compressed bytes
	held    atomic.Int64 // entries in pending: when none, a read skips the map
}

func (c *deferringCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if len(data) == 0 {
		return c.CodecV2.Unmarshal(data, v)
	}
	b := data[0].ReadOnlyData()
	switch {
	case len(data) == 1 && bytes.HasPrefix(b, deferredGzip):
		// passGzip's own buffer, which grpc-go does not recycle: kept as it is.
		c.held.Add(1)
		c.pending.Store(v, setAside{"gzip", b[len(deferredGzip):]})
		return nil
	case len(b) > 0 && b[0] == 0:
		// Perhaps the deflate compressor's output: buffers from grpc-go's pool, which it
		// recycles once this returns, so the bytes are copied out.
		if all := data.Materialize(); bytes.HasPrefix(all, deferredDeflate) {
			c.held.Add(1)
			c.pending.Store(v, setAside{"deflate", all[len(deferredDeflate):]})
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
	m := b.(setAside)
	r, err := g.in.newReader(m.encoding, bytes.NewReader(m.b), g.maxMsg)
	if err != nil {
		return statusOf(err)
	}
	defer r.Close() // the budget is given back once the message is decoded
	out, err := readAll(r, len(m.b))
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
// decoding and streams' RecvMsg) inflate the messages the codec set aside, and so that a call
// is answered compressed only with an encoding its client accepts. It also serves reflection's
// GetServiceInfo when r does.
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
			answerAccepted(ctx)
			return h(srv, ctx, func(v any) error { return r.g.receive(v, receiveDeferring(recvFunc(dec), v)) }, ic)
		}
		d.Methods[i] = m
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, s := range desc.Streams {
		h := s.Handler
		s.Handler = func(srv any, ss grpc.ServerStream) error {
			answerAccepted(ss.Context())
			return h(srv, receiving{ss, r.g})
		}
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

func (s receiving) RecvMsg(m any) error {
	return s.g.receive(m, receiveDeferring(s.ServerStream, m))
}

// answerAccepted keeps grpc-go from answering in an encoding the client did not list in
// grpc-accept-encoding. grpc-go answers a compressed request in the request's encoding without
// looking at that list; gRPC's compression spec has a server compress only with an encoding the
// client accepts. A client that sent no list gets identity, which every client reads.
func answerAccepted(ctx context.Context) {
	s, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ SendCompress() string })
	if !ok {
		return
	}
	enc := s.SendCompress()
	if enc == "" || enc == encoding.Identity {
		return // uncompressed requests are answered uncompressed
	}
	if accepted, err := grpc.ClientSupportedCompressors(ctx); err == nil && !slices.Contains(accepted, enc) {
		_ = grpc.SetSendCompressor(ctx, encoding.Identity) // identity is always allowed
	}
}
