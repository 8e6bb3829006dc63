package kserveproxy_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/kserveproxy"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// server is a gateway on a loopback port, serving reg.
type server struct {
	Addr, URL string
	Registry  *engines.Registry
	gw        *gateway.Gateway
	done      chan error
}

// serveAt runs a gateway for reg on addr ("127.0.0.1:0" for any port) until stopped or the test ends.
func serveAt(tb testing.TB, reg *engines.Registry, addr string, services ...func(*http.ServeMux, grpc.ServiceRegistrar)) *server {
	tb.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(tb, err)
	s := &server{Addr: ln.Addr().String(), URL: "http://" + ln.Addr().String(), Registry: reg,
		gw: gateway.New(reg, gateway.Config{Logger: quiet(), Services: services}), done: make(chan error, 1)}
	go func() { s.done <- s.gw.Serve(ln) }()
	tb.Cleanup(s.stop)
	return s
}

func (s *server) stop() {
	if s.done == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.gw.Shutdown(ctx)
	<-s.done
	s.done = nil
}

// startUpstream starts the "Triton" behind the proxy: an infergate serving the built-in models (Triton's
// examples) plus extra.
func startUpstream(tb testing.TB, extra ...engines.Model) *gatewaytest.Server {
	tb.Helper()
	return gatewaytest.Start(tb, gateway.Config{}, extra...)
}

// restartAt starts a fresh upstream with the built-ins (plus extra) on a stopped upstream's address.
func restartAt(tb testing.TB, addr string, extra ...engines.Model) *server {
	tb.Helper()
	reg := engines.NewRegistry()
	require.NoError(tb, builtin.Register(reg))
	for _, m := range extra {
		_, err := reg.Register(m)
		require.NoError(tb, err)
	}
	var s *server
	require.Eventually(tb, func() bool {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		ln.Close()
		s = serveAt(tb, reg, addr)
		return true
	}, 5*time.Second, 20*time.Millisecond)
	return s
}

// front is the gateway under test: an empty registry (so upstream names do not clash with
// built-ins) filled by the proxy.
type front struct {
	*server
	proxy  *kserveproxy.Proxy
	client inference.GRPCInferenceServiceClient
}

// fast are Options for tests: quick health checks and discovery.
func fast(eps ...upstream.Endpoint) kserveproxy.Options {
	return kserveproxy.Options{Endpoints: eps, Logger: quiet(), DiscoveryInterval: 50 * time.Millisecond}
}

func startFront(tb testing.TB, opts kserveproxy.Options) *front {
	tb.Helper()
	if opts.Registry == nil {
		opts.Registry = engines.NewRegistry()
	}
	p, err := kserveproxy.New(opts)
	require.NoError(tb, err)
	p.Start(context.Background())
	tb.Cleanup(p.Close) // after the gateway's drain (cleanups run last-in first-out)
	s := serveAt(tb, opts.Registry, "127.0.0.1:0")
	s.gw.Metrics().MustRegister(p.Collectors()...)
	return &front{server: s, proxy: p, client: inference.NewGRPCInferenceServiceClient(dial(tb, s.Addr))}
}

// ep is a kserve endpoint for an upstream with fast health checks.
func ep(name, addr string, priority int) upstream.Endpoint {
	return upstream.Endpoint{Name: name, URL: "http://" + addr, Type: upstream.TypeKServe, Priority: priority,
		CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second}
}

// slowChecks makes an endpoint's health checks rare, so only the proxy's own failures move it.
func slowChecks(e upstream.Endpoint) upstream.Endpoint {
	e.CheckInterval = time.Hour
	return e
}

func dial(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
	require.NoError(tb, err)
	tb.Cleanup(func() { conn.Close() })
	return conn
}

func client(tb testing.TB, addr string) inference.GRPCInferenceServiceClient {
	return inference.NewGRPCInferenceServiceClient(dial(tb, addr))
}

func rawInput(name, dt string, shape ...int64) *inference.ModelInferRequest_InferInputTensor {
	return &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: dt, Shape: shape}
}

// simpleRequest is `simple`'s request: INPUT0 = 0..15, INPUT1 = ones, both INT32 [1,16], raw.
func simpleRequest(model, id string) *inference.ModelInferRequest {
	in0, in1 := make([]int32, 16), make([]int32, 16)
	for i := range 16 {
		in0[i], in1[i] = int32(i), 1
	}
	return &inference.ModelInferRequest{ModelName: model, Id: id,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "INT32", 1, 16), rawInput("INPUT1", "INT32", 1, 16)},
		RawInputContents: [][]byte{tensor.Bytes(in0), tensor.Bytes(in1)},
	}
}

func int32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// checkSimple asserts simple's results: OUTPUT0 = 1..16, OUTPUT1 = -1..14.
func checkSimple(tb testing.TB, res *inference.ModelInferResponse) {
	tb.Helper()
	require.Len(tb, res.RawOutputContents, 2)
	sum, diff := int32s(res.RawOutputContents[0]), int32s(res.RawOutputContents[1])
	require.Len(tb, sum, 16)
	require.Len(tb, diff, 16)
	for i := range 16 {
		require.Equal(tb, int32(i+1), sum[i])
		require.Equal(tb, int32(i-1), diff[i])
	}
}

func repeatRequest(id string, in []int32, delayMS ...uint32) *inference.ModelInferRequest {
	delay := make([]uint32, len(in))
	for i := range delay {
		if i < len(delayMS) {
			delay[i] = delayMS[i]
		}
	}
	return &inference.ModelInferRequest{ModelName: "repeat_int32", Id: id,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			rawInput("IN", "INT32", int64(len(in))), rawInput("DELAY", "UINT32", int64(len(in))), rawInput("WAIT", "UINT32", 1),
		},
		RawInputContents: [][]byte{tensor.Bytes(in), tensor.Bytes(delay), tensor.Bytes([]uint32{0})},
	}
}

// stream sends reqs on one ModelStreamInfer call, half-closes it and returns every response.
func stream(ctx context.Context, tb testing.TB, c inference.GRPCInferenceServiceClient, reqs ...*inference.ModelInferRequest) ([]*inference.ModelStreamInferResponse, error) {
	tb.Helper()
	s, err := c.ModelStreamInfer(ctx)
	require.NoError(tb, err)
	for _, r := range reqs {
		require.NoError(tb, s.Send(r))
	}
	require.NoError(tb, s.CloseSend())
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

func final(r *inference.ModelInferResponse) (value, present bool) {
	p, ok := r.GetParameters()["triton_final_response"]
	return p.GetBoolParam(), ok
}

// inferences is how many successful requests an upstream's model has run.
func inferences(s *engines.Registry, model string) uint64 {
	e := s.Lookup(model)
	if e == nil {
		return 0
	}
	return e.Stats.Success.Count()
}

// testModel is an upstream model for behaviours the built-ins lack (blocking, failing, seeing
// headers): INPUT INT32 [-1] -> OUTPUT INT32 [-1], optionally decoupled.
type testModel struct {
	name      string
	decoupled bool
	exec      func(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error
}

func (m *testModel) Config() *inference.ModelConfig {
	cfg := &inference.ModelConfig{Name: m.name, Platform: "test", Backend: "test",
		Input:  []*inference.ModelInput{{Name: "INPUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{-1}}},
		Output: []*inference.ModelOutput{{Name: "OUTPUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{-1}}},
	}
	if m.decoupled {
		cfg.ModelTransactionPolicy = &inference.ModelTransactionPolicy{Decoupled: true}
	}
	return cfg
}

func (m *testModel) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	return m.exec(ctx, req, send)
}

// echo answers OUTPUT = INPUT.
func echo(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("INPUT")
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: "OUTPUT", Datatype: inference.DataType_TYPE_INT32, Shape: in.Shape, Data: in.Data}}})
}

func testRequest(model string, vals ...int32) *inference.ModelInferRequest {
	return &inference.ModelInferRequest{ModelName: model,
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT", "INT32", int64(len(vals)))},
		RawInputContents: [][]byte{tensor.Bytes(vals)},
	}
}

// served waits until the front serves model.
func (f *front) waitModel(tb testing.TB, model string) {
	tb.Helper()
	require.Eventually(tb, func() bool {
		res, err := f.client.ModelReady(context.Background(), &inference.ModelReadyRequest{Name: model})
		return err == nil && res.Ready
	}, 10*time.Second, 10*time.Millisecond, "model %s never served", model)
}

func (f *front) waitGone(tb testing.TB, model string) {
	tb.Helper()
	require.Eventually(tb, func() bool { return f.Registry.Lookup(model) == nil }, 10*time.Second, 10*time.Millisecond, "model %s still served", model)
}

func (f *front) status(name string) kserveproxy.EndpointStatus {
	for _, s := range f.proxy.Status() {
		if s.Name == name {
			return s
		}
	}
	return kserveproxy.EndpointStatus{}
}
