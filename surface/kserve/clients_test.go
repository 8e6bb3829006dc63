package kserve_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const servicePath = "/inference.GRPCInferenceService/"

// client is one real peer: grpc-go, or connect-go speaking gRPC, gRPC-Web or Connect.
type client struct {
	name    string
	conn    *grpc.ClientConn // grpc-go only
	http    *http.Client     // connect only
	url     string
	options []connect.ClientOption
}

// clients returns every kind of client the gateway must serve, connected to srv.
func clients(t *testing.T, srv *gatewaytest.Server) []*client {
	t.Helper()
	conn, err := grpc.NewClient(srv.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	// Each HTTP/2 client gets its own connection: the gateway pins a cleartext HTTP/2 connection
	// to the protocol family of its first request (see README).
	return []*client{
		{name: "grpc-go", conn: conn},
		{name: "connect-grpc", http: gatewaytest.H2CClient(), url: srv.URL, options: []connect.ClientOption{connect.WithGRPC()}},
		{name: "connect-grpcweb", http: gatewaytest.H2CClient(), url: srv.URL, options: []connect.ClientOption{connect.WithGRPCWeb()}},
		{name: "connect-connect", http: gatewaytest.H2CClient(), url: srv.URL},
		{name: "connect-connect-http1", http: http.DefaultClient, url: srv.URL},
	}
}

// start runs a gateway with the built-in models (plus extra) for one test.
func start(t *testing.T, extra ...engines.Model) *gatewaytest.Server {
	return gatewaytest.Start(t, gateway.Config{}, extra...)
}

// call makes one unary call of method with any client.
func call[Req, Resp any](ctx context.Context, c *client, method string, req *Req) (*Resp, error) {
	if c.conn != nil {
		resp := new(Resp)
		err := c.conn.Invoke(ctx, servicePath+method, req, resp)
		if err != nil {
			return nil, err
		}
		return resp, nil
	}
	res, err := connect.NewClient[Req, Resp](c.http, c.url+servicePath+method, c.options...).CallUnary(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func infer(ctx context.Context, c *client, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return call[inference.ModelInferRequest, inference.ModelInferResponse](ctx, c, "ModelInfer", req)
}

// codeOf and messageOf read the status of an error from either client library.
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.Code(status.Code(err))
}

func messageOf(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return status.Convert(err).Message()
}

// requireStatus asserts an error's gRPC code and exact message.
func requireStatus(t *testing.T, err error, code connect.Code, msg string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, codeOf(err), "code of %v", err)
	require.Equal(t, msg, messageOf(err))
}

// bidi is a ModelStreamInfer stream from either client library.
type bidi interface {
	Send(*inference.ModelInferRequest) error
	Recv() (*inference.ModelStreamInferResponse, error)
	CloseSend() error
}

type grpcBidi struct{ s grpc.ClientStream }

func (b grpcBidi) Send(m *inference.ModelInferRequest) error { return b.s.SendMsg(m) }
func (b grpcBidi) CloseSend() error                          { return b.s.CloseSend() }
func (b grpcBidi) Recv() (*inference.ModelStreamInferResponse, error) {
	m := new(inference.ModelStreamInferResponse)
	return m, b.s.RecvMsg(m)
}

type connectBidi struct {
	s *connect.BidiStreamForClient[inference.ModelInferRequest, inference.ModelStreamInferResponse]
}

func (b connectBidi) Send(m *inference.ModelInferRequest) error          { return b.s.Send(m) }
func (b connectBidi) CloseSend() error                                   { return b.s.CloseRequest() }
func (b connectBidi) Recv() (*inference.ModelStreamInferResponse, error) { return b.s.Receive() }

// openStream opens ModelStreamInfer; header pairs become gRPC metadata.
func openStream(ctx context.Context, t *testing.T, c *client, header ...string) bidi {
	t.Helper()
	if c.conn != nil {
		if len(header) > 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, header...)
		}
		s, err := c.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, servicePath+"ModelStreamInfer")
		require.NoError(t, err)
		return grpcBidi{s}
	}
	s := connect.NewClient[inference.ModelInferRequest, inference.ModelStreamInferResponse](c.http, c.url+servicePath+"ModelStreamInfer", c.options...).CallBidiStream(ctx)
	for i := 0; i+1 < len(header); i += 2 {
		s.RequestHeader().Set(header[i], header[i+1])
	}
	return connectBidi{s}
}

// streamClients are the clients that can hold a bidirectional stream (HTTP/2 ones).
func streamClients(t *testing.T, srv *gatewaytest.Server) []*client {
	var out []*client
	for _, c := range clients(t, srv) {
		if c.http != http.DefaultClient {
			out = append(out, c)
		}
	}
	return out
}

// recvAll reads a stream to its end.
func recvAll(t *testing.T, s bidi) ([]*inference.ModelStreamInferResponse, error) {
	t.Helper()
	var out []*inference.ModelStreamInferResponse
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

// Request builders.

func rawInput(name, datatype string, shape []int64) *inference.ModelInferRequest_InferInputTensor {
	return &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: datatype, Shape: shape}
}

func seq(n int, f func(int) int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// simpleRequest is Triton's simple client request: INPUT0 = 0..15, INPUT1 = ones, raw.
func simpleRequest(id string) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{
		ModelName: "simple", Id: id,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			rawInput("INPUT0", "INT32", []int64{1, 16}), rawInput("INPUT1", "INT32", []int64{1, 16}),
		},
		RawInputContents: [][]byte{
			tensor.Bytes(seq(16, func(i int) int32 { return int32(i) })),
			tensor.Bytes(seq(16, func(int) int32 { return 1 })),
		},
	}
}

func int32s(b []byte) []int32 { return append([]int32(nil), tensor.View[int32](b)...) }

func boolParam(v bool) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: v}}
}

func int64Param(v int64) *inference.InferParameter {
	return &inference.InferParameter{ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: v}}
}

func clone[M proto.Message](m M) M { return proto.Clone(m).(M) }

// recvAllWithin is recvAll that fails the test if the stream has not ended within d.
func recvAllWithin(t *testing.T, s bidi, d time.Duration) ([]*inference.ModelStreamInferResponse, error) {
	t.Helper()
	type result struct {
		msgs []*inference.ModelStreamInferResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		for {
			m, err := s.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					r.err = err
				}
				done <- r
				return
			}
			r.msgs = append(r.msgs, m)
		}
	}()
	select {
	case r := <-done:
		return r.msgs, r.err
	case <-time.After(d):
		t.Fatalf("stream still open after %v", d)
		return nil, nil
	}
}
