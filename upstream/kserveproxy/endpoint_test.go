package kserveproxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/kserveproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func TestConfigErrors(t *testing.T) {
	reg := engines.NewRegistry()
	for name, tc := range map[string]struct {
		ep   upstream.Endpoint
		want string
	}{
		"path":           {upstream.Endpoint{Name: "x", Type: "kserve", URL: "http://h:8001/v2"}, `endpoint "x": url: "http://h:8001/v2" has a path`},
		"grpc header":    {upstream.Endpoint{Name: "x", Type: "kserve", URL: "http://h:8001", Headers: map[string]string{"Grpc-Timeout": "1S"}}, `endpoint "x": headers: "Grpc-Timeout" is set by the gRPC client itself`},
		"unset env":      {upstream.Endpoint{Name: "x", Type: "kserve", URL: "http://h:8001", Headers: map[string]string{"Authorization": "${INFERGATE_UNSET_KSP}"}}, "INFERGATE_UNSET_KSP is not set"},
		"metadata key":   {upstream.Endpoint{Name: "x", Type: "kserve", URL: "http://h:8001", Headers: map[string]string{"X!": "v"}}, `"X!" is not a valid gRPC metadata key`},
		"metadata value": {upstream.Endpoint{Name: "x", Type: "kserve", URL: "http://h:8001", Headers: map[string]string{"X": "caf\xe9"}}, "printable ASCII"},
		"no url":         {upstream.Endpoint{Name: "x", Type: "kserve"}, `endpoint "x": url: required`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := kserveproxy.New(kserveproxy.Options{Registry: reg, Endpoints: []upstream.Endpoint{tc.ep}})
			require.ErrorContains(t, err, tc.want)
			var fe *upstream.FieldError
			assert.True(t, errors.As(err, &fe))
		})
	}
	_, err := kserveproxy.New(kserveproxy.Options{Registry: reg, Endpoints: []upstream.Endpoint{
		{Name: "x", Type: "kserve", URL: "http://h:1"}, {Name: "x", Type: "kserve", URL: "http://h:2"}}})
	require.ErrorContains(t, err, `endpoint "x": name: duplicate endpoint name`)
	_, err = kserveproxy.New(kserveproxy.Options{Endpoints: nil})
	require.ErrorContains(t, err, "Registry is required")

	// Other types are the OpenAI proxy's: ignored by New, refused by Add.
	p, err := kserveproxy.New(kserveproxy.Options{Registry: reg, Logger: quiet(), Endpoints: []upstream.Endpoint{
		{Name: "vllm", Type: "vllm", URL: "http://h:8000"}}})
	require.NoError(t, err)
	assert.Empty(t, p.Status())
	require.ErrorContains(t, p.Add(upstream.Endpoint{Name: "v", Type: "vllm", URL: "http://h:8000"}), `"vllm" is not kserve`)
	p.Close()
}

// TestHeadersAndEnv: configured headers, ${ENV} expanded, reach the upstream as gRPC metadata;
// the client's own metadata does not.
func TestHeadersAndEnv(t *testing.T) {
	t.Setenv("INFERGATE_TEST_TOKEN", "s3cret")
	var seen atomic.Value
	whoami := func(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
		md, _ := metadata.FromIncomingContext(ctx)
		seen.Store(md)
		return echo(ctx, req, send)
	}
	up := startUpstream(t, &testModel{name: "whoami", exec: whoami}, &testModel{name: "whoami_stream", decoupled: true, exec: whoami})
	e := ep("triton", up.Addr, 0)
	e.Headers = map[string]string{"Authorization": "Bearer ${INFERGATE_TEST_TOKEN}", "X-Tenant": "t1"}
	f := startFront(t, fast(e))
	f.waitModel(t, "whoami")

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-client-secret", "not forwarded")
	_, err := f.client.ModelInfer(ctx, testRequest("whoami", 1))
	require.NoError(t, err)
	md := seen.Load().(metadata.MD)
	assert.Equal(t, []string{"Bearer s3cret"}, md.Get("authorization"))
	assert.Equal(t, []string{"t1"}, md.Get("x-tenant"))
	assert.Empty(t, md.Get("x-client-secret"), "the client's own metadata stays at the front")

	_, err = stream(ctx, t, f.client, testRequest("whoami_stream", 1))
	require.NoError(t, err)
	md = seen.Load().(metadata.MD)
	assert.Equal(t, []string{"Bearer s3cret"}, md.Get("authorization"))
	assert.Equal(t, []string{"true"}, md.Get(engines.GRPCErrorHeader), "streams ask for gRPC status errors")
}

// TestHTTPHealthCheck: with health_check_url the endpoint's health is that URL's (Triton's HTTP
// /v2/health/ready on its other port, say); models are discovered only once it is healthy.
func TestHTTPHealthCheck(t *testing.T) {
	up := startUpstream(t)
	var ready atomic.Bool
	var auth atomic.Value
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		if r.URL.Path != "/v2/health/ready" || !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(hs.Close)
	e := ep("triton", up.Addr, 0)
	e.HealthCheckURL = hs.URL + "/v2/health/ready"
	e.Headers = map[string]string{"Authorization": "Bearer x"}
	f := startFront(t, fast(e))

	assert.False(t, f.status("triton").Healthy)
	assert.Empty(t, f.proxy.Models(), "nothing discovered from an unhealthy endpoint")
	ready.Store(true)
	f.waitModel(t, "simple")
	assert.True(t, f.status("triton").Healthy)
	assert.Equal(t, "Bearer x", auth.Load())
	ready.Store(false)
	require.Eventually(t, func() bool { return !f.status("triton").Healthy }, 10*time.Second, 10*time.Millisecond)
	_, err := f.client.ModelInfer(context.Background(), simpleRequest("simple", ""))
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, "no healthy upstream endpoint serves model 'simple'", status.Convert(err).Message())
}

// TestAddRemove: endpoints added at run time serve their models once healthy; removing the last
// endpoint serving a model takes the model out of the registry.
func TestAddRemove(t *testing.T) {
	a := startUpstream(t)
	b := startUpstream(t, &testModel{name: "only_b", exec: echo})
	f := startFront(t, fast(ep("a", a.Addr, 0)))
	assert.NotContains(t, f.proxy.Models(), "only_b")

	require.NoError(t, f.proxy.Add(ep("b", b.Addr, 0)))
	require.ErrorContains(t, f.proxy.Add(ep("b", b.Addr, 0)), "duplicate endpoint name")
	f.waitModel(t, "only_b")
	res, err := f.client.ModelInfer(context.Background(), testRequest("only_b", 9))
	require.NoError(t, err)
	assert.Equal(t, []int32{9}, int32s(res.RawOutputContents[0]))
	st := f.status("b")
	assert.True(t, st.Healthy)
	assert.Contains(t, st.Models, "only_b")
	assert.Contains(t, st.Models, "simple")

	require.True(t, f.proxy.Remove("b"))
	assert.False(t, f.proxy.Remove("b"))
	assert.Nil(t, f.Registry.Lookup("only_b"), "removed at once")
	assert.NotNil(t, f.Registry.Lookup("simple"), "a still serves simple")
	require.True(t, f.proxy.Remove("a"))
	assert.Empty(t, f.proxy.Models())
	assert.Empty(t, f.Registry.Entries())
}

// TestIncompatibleConfigNotRouted: an endpoint whose model of the same name has other tensors is
// not routed to; the model follows the higher-priority endpoint's config.
func TestIncompatibleConfigNotRouted(t *testing.T) {
	other := &testModel{name: "simple", exec: echo} // INPUT/OUTPUT, not simple's INPUT0/INPUT1
	a := startUpstream(t)
	bReg := engines.NewRegistry()
	_, err := bReg.Register(other)
	require.NoError(t, err)
	b := serveAt(t, bReg, "127.0.0.1:0")
	f := startFront(t, fast(ep("a", a.Addr, 10), ep("b", b.Addr, 10)))
	for range 4 {
		res, err := f.client.ModelInfer(context.Background(), simpleRequest("simple", ""))
		require.NoError(t, err)
		checkSimple(t, res)
	}
	assert.Equal(t, uint64(4), inferences(a.Registry, "simple"))
	assert.Contains(t, f.status("a").Models, "simple")
	assert.Empty(t, f.status("b").Models, "b's simple is not the served one")
}

// plainKServe is a KServe v2 server without Triton's repository and model_configuration
// extensions (KServe's Python server, say): RepositoryIndex and ModelConfig are UNIMPLEMENTED.
type plainKServe struct {
	inference.GRPCInferenceServiceServer
}

func (plainKServe) RepositoryIndex(context.Context, *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method RepositoryIndex")
}

func (plainKServe) ModelConfig(context.Context, *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	return nil, status.Error(codes.Unimplemented, "unknown method ModelConfig")
}

// TestPlainKServeUpstream: without RepositoryIndex the allow-list names the models; without
// ModelConfig their config is built from ModelMetadata.
func TestPlainKServeUpstream(t *testing.T) {
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	svc := kserve.NewService(reg)
	srv := grpc.NewServer(svc.ServerOptions()...)
	inference.RegisterGRPCInferenceServiceServer(srv, plainKServe{svc.GRPCServer()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	e := ep("plain", ln.Addr().String(), 0)
	e.Models = []string{"simple", "simple_string", "nope"}
	f := startFront(t, fast(e))
	assert.Equal(t, []string{"simple", "simple_string"}, f.proxy.Models(), "nope has no metadata: skipped")
	res, err := f.client.ModelInfer(context.Background(), simpleRequest("simple", ""))
	require.NoError(t, err)
	checkSimple(t, res)
	md, err := f.client.ModelMetadata(context.Background(), &inference.ModelMetadataRequest{Name: "simple"})
	require.NoError(t, err)
	want, err := svc.ModelMetadata(context.Background(), &inference.ModelMetadataRequest{Name: "simple"})
	require.NoError(t, err)
	assert.True(t, proto.Equal(want, md), "the metadata the config was built from comes back\nfront:    %v\nupstream: %v", md, want)

	// An allow-listed model the server stops knowing (NOT_FOUND) leaves the front.
	require.True(t, reg.Remove("simple_string"))
	f.waitGone(t, "simple_string")

	// Without an allow-list there is nothing to serve.
	f2 := startFront(t, fast(ep("plain", ln.Addr().String(), 0)))
	assert.True(t, f2.status("plain").Healthy)
	assert.Empty(t, f2.proxy.Models())
}

// TestTLS: an https:// endpoint speaks TLS (verified against the system roots unless DialOptions
// bring others); http:// is cleartext.
func TestTLS(t *testing.T) {
	hs := httptest.NewUnstartedServer(http.NotFoundHandler())
	hs.StartTLS() // only for its 127.0.0.1 certificate
	cert, root := hs.TLS.Certificates[0], hs.Certificate()
	hs.Close()

	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gw := gateway.New(reg, gateway.Config{Logger: quiet()})
	go func() {
		_ = gw.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}))
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	addr := ln.Addr().String()

	roots := x509.NewCertPool()
	roots.AddCert(root)
	secure := ep("tls", addr, 0)
	secure.URL = "https://" + addr
	opts := fast(secure)
	opts.DialOptions = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots}))}
	f := startFront(t, opts)
	f.waitModel(t, "simple")
	res, err := f.client.ModelInfer(context.Background(), simpleRequest("simple", ""))
	require.NoError(t, err)
	checkSimple(t, res)

	// Start returns after each endpoint's first health check.
	untrusted := startFront(t, fast(secure)) // system roots do not know the test certificate
	plain := startFront(t, fast(ep("plain", addr, 0)))
	assert.False(t, untrusted.status("tls").Healthy)
	assert.False(t, plain.status("plain").Healthy)
}

// reshaping is an upstream that answers ModelInfer its own way: typed contents instead of raw,
// outputs out of order, or wrongly.
type reshaping struct {
	inference.GRPCInferenceServiceServer
	mode *atomic.Value
}

func (r reshaping) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	res, err := r.GRPCInferenceServiceServer.ModelInfer(ctx, req)
	if err != nil {
		return nil, err
	}
	switch r.mode.Load().(string) {
	case "typed": // KServe's Python server answers in typed contents, and any order will do
		for i, o := range res.Outputs {
			c, ok := tensor.ToContents(tensor.ParseDatatype(o.Datatype), res.RawOutputContents[i])
			if !ok {
				return nil, status.Error(codes.Internal, "no typed form")
			}
			o.Contents = c
		}
		res.RawOutputContents = nil
		slices.Reverse(res.Outputs)
	case "short":
		res.RawOutputContents = res.RawOutputContents[:1]
	case "unknown":
		res.Outputs[0].Name = "EXTRA"
	case "datatype":
		res.Outputs[0].Datatype = "INT33"
	case "bytes":
		res.RawOutputContents[0] = res.RawOutputContents[0][:7]
	case "huge":
		res.Outputs[0].Shape = []int64{1 << 40, 1 << 30}
	case "negative":
		res.Outputs[0].Shape = []int64{-1}
	case "both":
		res.Outputs[0].Contents = &inference.InferTensorContents{IntContents: make([]int32, 16)}
	case "contents":
		res.RawOutputContents = nil
		res.Outputs[0].Contents = &inference.InferTensorContents{Fp32Contents: make([]float32, 16)}
		res.Outputs[1].Contents = &inference.InferTensorContents{IntContents: make([]int32, 16)}
	case "missing":
		res.RawOutputContents = nil
	case "framing":
		res.RawOutputContents[0] = []byte{9, 0, 0, 0, 'a'}
	case "count":
		res.RawOutputContents[0] = tensor.AppendBytes(nil, []byte("a"))
	}
	return res, nil
}

// TestUpstreamResponses: typed-contents answers in any order come back raw in config order; an
// answer that does not fit the model's config is INTERNAL, naming the endpoint.
func TestUpstreamResponses(t *testing.T) {
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	svc := kserve.NewService(reg)
	srv := grpc.NewServer(svc.ServerOptions()...)
	mode := &atomic.Value{}
	mode.Store("typed")
	inference.RegisterGRPCInferenceServiceServer(srv, reshaping{svc.GRPCServer(), mode})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	f := startFront(t, fast(ep("odd", ln.Addr().String(), 0)))
	ctx := context.Background()

	res, err := f.client.ModelInfer(ctx, simpleRequest("simple", ""))
	require.NoError(t, err)
	assert.Equal(t, "OUTPUT0", res.Outputs[0].Name)
	checkSimple(t, res)

	// Shapes and bytes are checked against each other: nothing after the proxy may trust them.
	for m, want := range map[string]string{
		"short":    "upstream 'odd' answered model 'simple' wrongly: 1 raw_output_contents for 2 outputs",
		"unknown":  "upstream 'odd' answered model 'simple' wrongly: output 'EXTRA' is not in the model's config",
		"datatype": "upstream 'odd' answered model 'simple' wrongly: output 'OUTPUT0' has datatype 'INT33'",
		"bytes":    "upstream 'odd' answered model 'simple' wrongly: output 'OUTPUT0' of shape [1 16] has 7 bytes",
		"huge":     "upstream 'odd' answered model 'simple' wrongly: output 'OUTPUT0' has shape [1099511627776 1073741824]",
		"negative": "upstream 'odd' answered model 'simple' wrongly: output 'OUTPUT0' has shape [-1]",
		"both":     "upstream 'odd' answered model 'simple' wrongly: output 'OUTPUT0' has both contents and raw_output_contents",
		"contents": "upstream 'odd' answered model 'simple' wrongly: output 'OUTPUT0': unexpected explicit tensor data of type 'FP32'",
		"missing":  "upstream 'odd' answered model 'simple' wrongly: output 'OUTPUT0' of shape [1 16] has 0 bytes",
	} {
		mode.Store(m)
		_, err := f.client.ModelInfer(ctx, simpleRequest("simple", ""))
		assert.Equal(t, codes.Internal, status.Code(err), m)
		assert.Equal(t, want, status.Convert(err).Message(), m)
	}
	for _, m := range []string{"framing", "count"} {
		mode.Store(m)
		_, err := f.client.ModelInfer(ctx, stringRequest())
		assert.Equal(t, codes.Internal, status.Code(err), m)
		assert.Equal(t, "upstream 'odd' answered model 'simple_string' wrongly: output 'OUTPUT0' of shape [1 16] does not hold 16 framed BYTES elements",
			status.Convert(err).Message(), m)
	}
	mode.Store("as is")
	res, err = f.client.ModelInfer(ctx, stringRequest())
	require.NoError(t, err)
	sums, err := tensor.SplitBytes(res.RawOutputContents[0])
	require.NoError(t, err)
	assert.Len(t, sums, 16, "a consistent BYTES answer passes")
}

// stringRequest is `simple_string`'s request: INPUT0 = "0".."15", INPUT1 = "1"s, BYTES [1,16].
func stringRequest() *inference.ModelInferRequest {
	var in0, in1 []byte
	for i := range 16 {
		in0 = tensor.AppendBytes(in0, []byte(strconv.Itoa(i)))
		in1 = tensor.AppendBytes(in1, []byte("1"))
	}
	return &inference.ModelInferRequest{ModelName: "simple_string",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("INPUT0", "BYTES", 1, 16), rawInput("INPUT1", "BYTES", 1, 16)},
		RawInputContents: [][]byte{in0, in1},
	}
}
