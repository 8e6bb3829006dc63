package kserve

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/models/builtin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func largeRequest() *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName: "identity_fp32", ModelVersion: "1", Id: "big",
		Parameters: map[string]*inference.InferParameter{"k": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 3}}},
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "FP32", Shape: []int64{1 << 16}},
			{Name: "EMPTY", Datatype: "FP32", Shape: []int64{0}},
		},
		Outputs:          []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT0"}},
		RawInputContents: [][]byte{bytes.Repeat([]byte{1, 2, 3, 4}, 1<<16), {}},
	}
}

func TestTensorCodecRequestMatchesProtoAndAliases(t *testing.T) {
	want := largeRequest()
	wire, err := proto.Marshal(want)
	require.NoError(t, err)
	// Unknown fields and a second raw entry split around other fields must survive too.
	wire = protowire.AppendTag(wire, 99, protowire.VarintType)
	wire = protowire.AppendVarint(wire, 5)
	wire = protowire.AppendTag(wire, fieldRawInputContents, protowire.BytesType)
	wire = protowire.AppendBytes(wire, []byte("tail"))
	var fromProto inference.ModelInferRequest
	require.NoError(t, proto.Unmarshal(wire, &fromProto))

	got := new(inference.ModelInferRequest)
	require.NoError(t, unmarshalInferRequest(wire, got))
	assert.True(t, proto.Equal(&fromProto, got), "decodes exactly as protobuf-go does")
	require.Len(t, got.RawInputContents, 3)
	start := uintptr(unsafe.Pointer(&wire[0]))
	p := uintptr(unsafe.Pointer(&got.RawInputContents[0][0]))
	assert.True(t, p >= start && p < start+uintptr(len(wire)), "raw contents alias the message buffer")

	c := newTensorCodec()
	viaCodec := new(inference.ModelInferRequest)
	require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:len(wire)/2]), mem.SliceBuffer(wire[len(wire)/2:])}, viaCodec))
	assert.True(t, proto.Equal(&fromProto, viaCodec))

	require.Error(t, unmarshalInferRequest(wire[:len(wire)-1], new(inference.ModelInferRequest)), "truncated message")
}

func TestTensorCodecResponseMatchesProto(t *testing.T) {
	res := &inference.ModelInferResponse{ModelName: "identity_fp32", ModelVersion: "1", Id: "big",
		Outputs:           []*inference.ModelInferResponse_InferOutputTensor{{Name: "OUTPUT0", Datatype: "FP32", Shape: []int64{1 << 16}}, {Name: "E", Datatype: "FP32", Shape: []int64{0}}},
		RawOutputContents: [][]byte{bytes.Repeat([]byte{9, 8, 7, 6}, 1<<16), {}},
	}
	out, err := newTensorCodec().Marshal(res)
	require.NoError(t, err)
	wire := out.Materialize()
	var decoded inference.ModelInferResponse
	require.NoError(t, proto.Unmarshal(wire, &decoded))
	assert.True(t, proto.Equal(res, &decoded))
	assert.Len(t, res.RawOutputContents, 2, "the response is left as it was")
	found := false
	for _, b := range out {
		if len(b.ReadOnlyData()) == 1<<18 && &b.ReadOnlyData()[0] == &res.RawOutputContents[0][0] {
			found = true
		}
	}
	assert.True(t, found, "the tensor is sent from the model's buffer, not copied")

	small := &inference.ModelInferResponse{ModelName: "simple", RawOutputContents: [][]byte{{1}}}
	out, err = newTensorCodec().Marshal(small)
	require.NoError(t, err)
	require.NoError(t, proto.Unmarshal(out.Materialize(), &decoded))
	assert.True(t, proto.Equal(small, &decoded))
}

func FuzzTensorCodecRequest(f *testing.F) {
	wire, _ := proto.Marshal(largeRequest())
	f.Add(wire[:200])
	small, _ := proto.Marshal(&inference.ModelInferRequest{ModelName: "m", RawInputContents: [][]byte{{1, 2}, {}}})
	f.Add(small)
	f.Add([]byte{0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // raw_input_contents claiming 4 GiB
	f.Add([]byte{0x38, 0x01})                         // field 7 with the varint wire type
	f.Fuzz(func(t *testing.T, b []byte) {
		var want inference.ModelInferRequest
		wantErr := proto.Unmarshal(b, &want)
		got := new(inference.ModelInferRequest)
		err := unmarshalInferRequest(b, got)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("codec error %v, protobuf-go error %v", err, wantErr)
		}
		if err == nil && !proto.Equal(&want, got) {
			t.Fatalf("codec decoded %v, protobuf-go %v", got, &want)
		}
	})
}

func TestTimeoutParameterDoesNotOverflow(t *testing.T) {
	var r engines.Request
	opts, err := parseParameters(&r, map[string]*inference.InferParameter{
		"timeout": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 18446744073709552}},
	})
	require.NoError(t, err)
	assert.Greater(t, opts.timeout, 100*365*24*time.Hour, "a huge timeout stays huge instead of wrapping to nanoseconds")
}

func TestLargePoolReusesCloseSizesOnly(t *testing.T) {
	p := newLargePool()
	a := p.Get(8 << 20)
	require.Len(t, *a, 8<<20)
	p.Put(a)
	b := p.Get(8<<20 - 1000)
	assert.Same(t, &(*a)[:1][0], &(*b)[:1][0], "a buffer within an eighth of the size is reused")
	assert.Len(t, *b, 8<<20-1000)
	p.Put(b)
	c := p.Get(4 << 20)
	assert.NotSame(t, &(*a)[:1][0], &(*c)[:1][0], "a buffer twice the size is not handed out")
	assert.Equal(t, 4<<20, cap(*c))
	p.Put(c)
	for range 3 {
		p.Put(p.Get(16 << 20))
		x := make([]byte, 32<<20)
		p.Put(&x)
	}
	p.mu.Lock()
	assert.Len(t, p.idle, largePoolIdle, "idle buffers are bounded")
	for i := range p.idle {
		p.idle[i].at = p.idle[i].at.Add(-largePoolIdleFor) // a minute passes
	}
	p.mu.Unlock()
	p.expire()
	p.mu.Lock()
	assert.Empty(t, p.idle, "idle for a minute: dropped")
	p.mu.Unlock()

	huge := make([]byte, largePoolMax+1)
	p.Put(&huge)
	p.mu.Lock()
	assert.Empty(t, p.idle, "a buffer above the cap is not kept")
	p.mu.Unlock()
}

func TestFramePoolKeepsFrames(t *testing.T) {
	p := newFramePool()
	f := p.Get(frameSize)
	require.Len(t, *f, frameSize)
	p.Put(f)
	g := p.Get(9000)
	assert.Same(t, f, g, "a frame buffer is reused whatever the frame's length")
	assert.Len(t, *g, 9000)
	small := p.Get(100)
	assert.Len(t, *small, 100)
	p.Put(small)
	p.mu.Lock()
	assert.Empty(t, p.free, "small buffers stay in grpc-go's pool")
	p.mu.Unlock()

	p.Put(p.Get(frameSize))
	p.expire()
	p.mu.Lock()
	assert.Len(t, p.free, 1, "frames came back just now: kept")
	p.lastPut = p.lastPut.Add(-largePoolIdleFor)
	p.mu.Unlock()
	p.expire()
	p.mu.Lock()
	assert.Empty(t, p.free, "no frame came back for a minute: dropped")
	p.mu.Unlock()
}

// TestCodecForgetsRequests: every decoded large request is claimed by its RPC, unary or streamed,
// so the codec's maps stay empty between calls.
func TestCodecForgetsRequests(t *testing.T) {
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	svc := NewService(reg)
	srv := grpc.NewServer(svc.ServerOptions()...)
	svc.RegisterGRPC(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	c := inference.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()

	req := largeRequest()
	req.Inputs, req.RawInputContents, req.Outputs = req.Inputs[:1], req.RawInputContents[:1], nil
	_, err = c.ModelInfer(ctx, req)
	require.NoError(t, err)
	bad := largeRequest() // fails validation: the handler returns an error, no response is sent
	bad.ModelName = "simple"
	_, err = c.ModelInfer(ctx, bad)
	require.Error(t, err)
	s, err := c.ModelStreamInfer(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Send(req))
	_, err = s.Recv()
	require.NoError(t, err)
	require.NoError(t, s.CloseSend())
	_, err = s.Recv()
	require.Equal(t, io.EOF, err)

	// A unary call that never ends its request (the client cancels after one message), and
	// one with two messages: the server decodes a message each time and fails the call, before
	// any interceptor runs. Neither may leave a buffer behind.
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	cctx, cancel := context.WithCancel(ctx)
	cs, err := conn.NewStream(cctx, desc, inference.GRPCInferenceService_ModelInfer_FullMethodName)
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(req))
	time.Sleep(50 * time.Millisecond) // let the server decode it
	cancel()
	cs, err = conn.NewStream(ctx, desc, inference.GRPCInferenceService_ModelInfer_FullMethodName)
	require.NoError(t, err)
	require.NoError(t, cs.SendMsg(req))
	require.NoError(t, cs.SendMsg(req))
	require.NoError(t, cs.CloseSend())
	require.Error(t, cs.RecvMsg(new(inference.ModelInferResponse)), "two requests on a unary call")

	count := func(m *sync.Map) int {
		n := 0
		m.Range(func(any, any) bool { n++; return true })
		return n
	}
	require.Eventually(t, func() bool { return count(&svc.codec.reading) == 0 && count(&svc.codec.writing) == 0 },
		5*time.Second, 10*time.Millisecond, "reading %d, writing %d", count(&svc.codec.reading), count(&svc.codec.writing))
}

// TestTensorCodecAlignsFirstTensor: whatever the length of the fields before it, the first raw
// tensor of a large request lands 8-byte aligned, so typed views of it need no copy.
func TestTensorCodecAlignsFirstTensor(t *testing.T) {
	c := newTensorCodec()
	for pad := range 9 {
		req := largeRequest()
		req.Id = strings.Repeat("x", pad)
		wire, err := proto.Marshal(req)
		require.NoError(t, err)
		got := new(inference.ModelInferRequest)
		require.NoError(t, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:100]), mem.SliceBuffer(wire[100:])}, got))
		assert.True(t, proto.Equal(req, got))
		assert.Zero(t, uintptr(unsafe.Pointer(&got.RawInputContents[0][0]))%8, "id of %d bytes", pad)
		assert.Len(t, tensor.View[float32](got.RawInputContents[0]), 1<<16)
		assert.Same(t, &got.RawInputContents[0][0], (*byte)(unsafe.Pointer(&tensor.View[float32](got.RawInputContents[0])[0])), "a view, not a copy")
		c.releaseRequest(c.claimRequest(got), nil)
	}
}
