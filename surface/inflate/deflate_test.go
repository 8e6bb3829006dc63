package inflate

import (
	"bytes"
	"compress/zlib"
	"errors"
	"io"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func deflateOf(t testing.TB) encoding.Compressor {
	c := encoding.GetCompressor(deflateName)
	require.NotNil(t, c, "deflate is registered with grpc-go")
	return c
}

// Outside a server's message read, the registered deflate is plain zlib both ways, as any grpc-go
// client in the process (kserveproxy's) needs, and as gRPC's C core writes and reads it.
func TestDeflateCompressorIsZlib(t *testing.T) {
	c := deflateOf(t)
	data := text(200 << 10)
	var b bytes.Buffer
	w, err := c.Compress(&b)
	require.NoError(t, err)
	_, err = w.Write(data)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	zr, err := zlib.NewReader(bytes.NewReader(b.Bytes()))
	require.NoError(t, err, "the standard library reads it")
	out, err := io.ReadAll(zr)
	require.NoError(t, err)
	assert.Equal(t, data, out)

	for range 2 { // the second time from the pool
		r, err := c.Decompress(bytes.NewReader(zl(t, data)))
		require.NoError(t, err)
		out, err = io.ReadAll(r)
		require.NoError(t, err)
		assert.Equal(t, data, out)
		require.NoError(t, r.(io.Closer).Close())
	}
	_, err = c.Decompress(bytes.NewReader([]byte("not zlib")))
	assert.Error(t, err)
}

// Inside receiveDeferring, as a server's read through Registrar runs it, the message is passed on
// as it came, behind the mark; the codec sets it aside even when grpc-go's pool split it over
// several buffers, and the call inflates it within the bounds.
func TestDeflateDeferredOnServerRead(t *testing.T) {
	c := deflateOf(t)
	msg, err := proto.Marshal(&inference.ModelInferRequest{ModelName: "simple", RawInputContents: [][]byte{text(100 << 10)}})
	require.NoError(t, err)
	compressed := zl(t, msg)

	var passed []byte
	require.NoError(t, receiveDeferring(recvFunc(func(any) error {
		r, err := c.Decompress(bytes.NewReader(compressed))
		if err != nil {
			return err
		}
		passed, err = io.ReadAll(r)
		return err
	}), nil))
	require.Equal(t, append(append([]byte{}, deferredDeflate...), compressed...), passed)

	in := New(Config{MaxBytes: 1 << 20, MaxInFlightBytes: 1 << 20})
	g := in.GRPC(encoding.GetCodecV2(grpcproto.Name), 1<<30)
	v := new(inference.ModelInferRequest)
	require.NoError(t, g.receive(v, g.codec.Unmarshal(split(passed, 7), v)))
	assert.Equal(t, "simple", v.GetModelName())
	assert.Len(t, v.GetRawInputContents()[0], 100<<10)
	assert.Zero(t, in.budget.used.Load())

	// Past the bound: RESOURCE_EXHAUSTED; corrupt: INVALID_ARGUMENT; the budget given back.
	big := append(append([]byte{}, deferredDeflate...), zl(t, make([]byte, 2<<20))...)
	err = g.receive(v, g.codec.Unmarshal(split(big, 3), v))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	bad := append(append([]byte{}, deferredDeflate...), "not zlib"...)
	err = g.receive(v, g.codec.Unmarshal(split(bad, 2), v))
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Zero(t, in.budget.used.Load())
	assert.Zero(t, g.codec.held.Load(), "nothing left set aside")
}

// Outside receiveDeferring, decompressing is false: a client's read, or another server's.
func TestDecompressingOnlyInsideReceive(t *testing.T) {
	assert.False(t, decompressing())
	var inside bool
	_ = receiveDeferring(recvFunc(func(any) error { inside = decompressing(); return nil }), nil)
	assert.True(t, inside)
	done := make(chan bool)
	_ = receiveDeferring(recvFunc(func(any) error {
		go func() { done <- decompressing() }() // another goroutine is not inside
		return nil
	}), nil)
	assert.False(t, <-done)
}

// split cuts b into n buffers, as grpc-go's pool hands a message to the codec.
func split(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	step := max(1, len(b)/n)
	for len(b) > 0 {
		k := min(step, len(b))
		s = append(s, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return s
}

// FuzzDeferredDeflate: whatever deflate message a client sends over native gRPC, the server's
// read of it never panics, yields a message or INVALID_ARGUMENT, RESOURCE_EXHAUSTED (a bound) or
// INTERNAL (inflated bytes that are not the message), and gives back its budget.
func FuzzDeferredDeflate(f *testing.F) {
	msg, _ := proto.Marshal(&inference.ModelInferRequest{ModelName: "simple", RawInputContents: [][]byte{[]byte("abc")}})
	f.Add(zl(f, msg), uint8(1))
	f.Add(zl(f, make([]byte, 8<<10)), uint8(3))
	f.Add(zl(f, []byte("not a message")), uint8(2))
	f.Add([]byte{0x78, 0x9c, 0xff}, uint8(1))
	f.Add([]byte{}, uint8(1))
	in := New(Config{MaxBytes: 4 << 10, MaxInFlightBytes: 1 << 20})
	g := in.GRPC(encoding.GetCodecV2(grpcproto.Name), 1<<30)
	c := deflateOf(f)
	f.Fuzz(func(t *testing.T, body []byte, pieces uint8) {
		var passed []byte
		err := receiveDeferring(recvFunc(func(any) error {
			r, err := c.Decompress(bytes.NewReader(body))
			if err != nil {
				return err
			}
			passed, err = io.ReadAll(r)
			return err
		}), nil)
		if err != nil {
			t.Fatalf("the server's decompressor passes bytes on, it does not fail: %v", err)
		}
		v := new(inference.ModelInferRequest)
		err = g.receive(v, g.codec.Unmarshal(split(passed, int(pieces)+1), v))
		switch code := status.Code(err); {
		case err == nil:
			if n := proto.Size(v); n > int(in.maxBytes) {
				t.Fatalf("decoded %d bytes past the %d bound", n, in.maxBytes)
			}
		case code == codes.InvalidArgument || code == codes.ResourceExhausted || code == codes.Internal:
		default:
			var ie *Error
			t.Fatalf("unexpected %v (%v)", err, errors.As(err, &ie))
		}
		if used := in.budget.used.Load(); used != 0 {
			t.Fatalf("budget not given back: %d", used)
		}
		if held := g.codec.held.Load(); held != 0 {
			t.Fatalf("%d messages left set aside", held)
		}
	})
}

// connect-go's deflate decompressor (for what Handler does not see) inflates within the same
// bounds, with connect-go's codes, and gives back its budget when connect-go closes it.
func TestConnectDecompressorBounded(t *testing.T) {
	in := New(Config{MaxBytes: 1 << 20, MaxInFlightBytes: 1 << 20})
	d := &connectDecompressor{in: in}
	require.NoError(t, d.Reset(bytes.NewReader(zl(t, []byte("hello")))))
	out, err := io.ReadAll(d)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(out))
	require.NoError(t, d.Close())

	require.NoError(t, d.Reset(bytes.NewReader(zl(t, make([]byte, 2<<20)))))
	_, err = io.ReadAll(d)
	assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	require.NoError(t, d.Close())
	assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(d.Reset(bytes.NewReader([]byte("not zlib")))))
	assert.Zero(t, in.budget.used.Load())
}
