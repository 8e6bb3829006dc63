package kserve_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// traceServer is a KServe service with the trace and logging extensions, served over HTTP
// (Connect and REST) and native gRPC on loopback ports.
type traceServer struct {
	rest  restPeer
	conn  *client // connect over HTTP/1.1
	grpc  *client // grpc-go on the native transport
	spans *tracetest.InMemoryExporter
	level *slog.LevelVar
}

func startTraced(t *testing.T, opts ...kserve.Option) *traceServer {
	t.Helper()
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	ts := &traceServer{spans: tracetest.NewInMemoryExporter(), level: new(slog.LevelVar)}
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: ts.spans, Synchronous: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	if opts == nil {
		opts = []kserve.Option{kserve.WithTracing(tr), kserve.WithLogLevel(ts.level)}
	}
	svc := kserve.NewService(reg, opts...)
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	mux.Handle("/v2", svc.RESTHandler())
	mux.Handle("/v2/", svc.RESTHandler())
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)

	gs := grpc.NewServer(svc.ServerOptions()...)
	svc.RegisterGRPC(gs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })

	ts.rest = restPeer{"http1", hs.URL, hs.Client()}
	ts.conn = &client{name: "connect", http: hs.Client(), url: hs.URL}
	ts.grpc = &client{name: "grpc-go", conn: cc}
	return ts
}

func (ts *traceServer) setTrace(t *testing.T, model string, settings map[string][]string) map[string][]string {
	t.Helper()
	req := &inference.TraceSettingRequest{ModelName: model, Settings: map[string]*inference.TraceSettingRequest_SettingValue{}}
	for k, v := range settings {
		req.Settings[k] = &inference.TraceSettingRequest_SettingValue{Value: v}
	}
	res, err := call[inference.TraceSettingRequest, inference.TraceSettingResponse](context.Background(), ts.grpc, "TraceSetting", req)
	require.NoError(t, err)
	out := map[string][]string{}
	for k, v := range res.GetSettings() {
		out[k] = v.GetValue()
	}
	return out
}

const clientTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func TestTraceAndLoggingOffAnswerUnimplemented(t *testing.T) {
	t.Parallel()
	ts := startTraced(t, kserve.WithServerName("triton"))
	requireRESTError(t, ts.rest.get(t, "/v2/trace/setting"), http.StatusNotImplemented,
		"infergate does not implement the trace extension; ServerMetadata lists the extensions it does")
	requireRESTError(t, ts.rest.post(t, "/v2/models/simple/trace/setting", `{"trace_rate":"1"}`), http.StatusNotImplemented,
		"infergate does not implement the trace extension; ServerMetadata lists the extensions it does")
	requireRESTError(t, ts.rest.post(t, "/v2/logging", `{"log_info":true}`), http.StatusNotImplemented,
		"infergate does not implement the logging extension; ServerMetadata lists the extensions it does")
	_, err := call[inference.TraceSettingRequest, inference.TraceSettingResponse](context.Background(), ts.grpc, "TraceSetting", &inference.TraceSettingRequest{})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	_, err = call[inference.LogSettingsRequest, inference.LogSettingsResponse](context.Background(), ts.conn, "LogSettings", &inference.LogSettingsRequest{})
	assert.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err))
	md, err := call[inference.ServerMetadataRequest, inference.ServerMetadataResponse](context.Background(), ts.grpc, "ServerMetadata", &inference.ServerMetadataRequest{})
	require.NoError(t, err)
	assert.NotContains(t, md.GetExtensions(), "trace")
	assert.NotContains(t, md.GetExtensions(), "logging")
	assert.Equal(t, http.StatusMethodNotAllowed, ts.rest.do(t, http.MethodPut, "/v2/logging", nil).status)
}

func TestTraceSettingsREST(t *testing.T) {
	t.Parallel()
	ts := startTraced(t)
	md, err := call[inference.ServerMetadataRequest, inference.ServerMetadataResponse](context.Background(), ts.conn, "ServerMetadata", &inference.ServerMetadataRequest{})
	require.NoError(t, err)
	assert.Contains(t, md.GetExtensions(), "trace")
	assert.Contains(t, md.GetExtensions(), "logging")

	r := ts.rest.get(t, "/v2/trace/setting")
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	assert.JSONEq(t, `{"trace_level":["OFF"],"trace_rate":"1000","trace_count":"-1","log_frequency":"0","trace_file":"","trace_mode":"opentelemetry"}`, string(r.body))

	r = ts.rest.post(t, "/v2/trace/setting", `{"trace_level":["TIMESTAMPS","TENSORS"],"trace_rate":"10"}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	assert.JSONEq(t, `{"trace_level":["TIMESTAMPS","TENSORS"],"trace_rate":"10","trace_count":"-1","log_frequency":"0","trace_file":"","trace_mode":"opentelemetry"}`, string(r.body))

	// A model's own settings: the rest follows the server's, now and after it changes.
	r = ts.rest.post(t, "/v2/models/simple/trace/setting", `{"trace_rate":"2","log_frequency":5}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	assert.JSONEq(t, `{"trace_level":["TIMESTAMPS","TENSORS"],"trace_rate":"2","trace_count":"-1","log_frequency":"5","trace_file":"","trace_mode":"opentelemetry"}`, string(r.body))
	require.Equal(t, http.StatusOK, ts.rest.post(t, "/v2/trace/setting", `{"trace_level":["TIMESTAMPS"]}`).status)
	r = ts.rest.get(t, "/v2/models/simple/trace/setting")
	assert.JSONEq(t, `{"trace_level":["TIMESTAMPS"],"trace_rate":"2","trace_count":"-1","log_frequency":"5","trace_file":"","trace_mode":"opentelemetry"}`, string(r.body))
	// null clears one setting; an empty body all of the model's.
	r = ts.rest.post(t, "/v2/models/simple/trace/setting", `{"trace_rate":null}`)
	assert.JSONEq(t, `{"trace_level":["TIMESTAMPS"],"trace_rate":"10","trace_count":"-1","log_frequency":"5","trace_file":"","trace_mode":"opentelemetry"}`, string(r.body))
	r = ts.rest.post(t, "/v2/models/simple/trace/setting", ``)
	assert.JSONEq(t, `{"trace_level":["TIMESTAMPS"],"trace_rate":"10","trace_count":"-1","log_frequency":"0","trace_file":"","trace_mode":"opentelemetry"}`, string(r.body))

	// Triton's refusals, in its words.
	for body, want := range map[string]string{
		`{"trace_rate":"abc"}`:                 "Unable to parse 'trace_rate', got: abc",
		`{"trace_rate":"99999999999"}`:         "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 99999999999",
		`{"trace_count":"-2"}`:                 "Unable to parse 'trace_count'. Expecting value >= -1, got: -2",
		`{"trace_rate":["1","2"]}`:             "expect only 1 value for 'trace_rate'",
		`{"trace_level":["OFF","TIMESTAMPS"]}`: "Expect only one trace level 'OFF' is specified",
		`{"trace_rate":{}}`:                    "expect string or array of strings for 'trace_rate'",
	} {
		requireRESTError(t, ts.rest.post(t, "/v2/trace/setting", body), http.StatusBadRequest, want)
	}
	requireRESTError(t, ts.rest.post(t, "/v2/trace/setting", `{"trace_file":"/tmp/x"}`), http.StatusNotImplemented,
		"trace file location can not be updated through network protocol")
	requireRESTError(t, ts.rest.post(t, "/v2/models/nope/trace/setting", `{"trace_rate":"1"}`), http.StatusBadRequest,
		"Request for unknown model : nope")
	// A refused request changed nothing.
	r = ts.rest.get(t, "/v2/trace/setting")
	assert.JSONEq(t, `{"trace_level":["TIMESTAMPS"],"trace_rate":"10","trace_count":"-1","log_frequency":"0","trace_file":"","trace_mode":"opentelemetry"}`, string(r.body))

	_, err = call[inference.TraceSettingRequest, inference.TraceSettingResponse](context.Background(), ts.grpc, "TraceSetting",
		&inference.TraceSettingRequest{Settings: map[string]*inference.TraceSettingRequest_SettingValue{"trace_file": {Value: []string{"x"}}}})
	assert.Equal(t, codes.Unimplemented, status.Code(err))
	assert.Equal(t, "trace file location can not be updated through network protocol", status.Convert(err).Message())
}

// A span per request on each surface, a child of the client's traceparent; the settings API's
// rate and count decide which requests get one.
func TestSpansFollowTraceSettings(t *testing.T) {
	t.Parallel()
	ts := startTraced(t)
	ctx := context.Background()
	// Off by default: no spans.
	_, err := infer(ctx, ts.grpc, simpleRequest("1"))
	require.NoError(t, err)
	assert.Empty(t, ts.spans.GetSpans())

	ts.setTrace(t, "", map[string][]string{"trace_level": {"TIMESTAMPS"}, "trace_rate": {"1"}})
	md := metadata.AppendToOutgoingContext(ctx, "traceparent", clientTraceparent)
	_, err = infer(md, ts.grpc, simpleRequest("2"))
	require.NoError(t, err)
	req := connect.NewRequest(simpleRequest("3"))
	req.Header().Set("traceparent", clientTraceparent)
	_, err = connect.NewClient[inference.ModelInferRequest, inference.ModelInferResponse](ts.conn.http, ts.conn.url+servicePath+"ModelInfer").CallUnary(ctx, req)
	require.NoError(t, err)
	r := ts.rest.post(t, "/v2/models/simple/infer", simpleJSON, "traceparent", clientTraceparent)
	require.Equal(t, http.StatusOK, r.status, "%s", r)

	spans := ts.spans.GetSpans()
	require.Len(t, spans, 3)
	for i, name := range []string{"inference.GRPCInferenceService/ModelInfer", "/inference.GRPCInferenceService/ModelInfer", "KServe REST"} {
		s := spans[i]
		assert.Equal(t, name, s.Name)
		assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", s.SpanContext.TraceID().String(), name)
		assert.Equal(t, "b7ad6b7169203331", s.Parent.SpanID().String(), name)
		assert.True(t, s.Parent.IsRemote(), name)
		assert.Contains(t, s.Attributes, attribute.String("infergate.model", "simple"), name)
	}

	// One in two, then a count of one.
	ts.spans.Reset()
	ts.setTrace(t, "simple", map[string][]string{"trace_rate": {"2"}})
	for i := range 4 {
		_, err = infer(ctx, ts.grpc, simpleRequest(string(rune('a'+i))))
		require.NoError(t, err)
	}
	assert.Len(t, ts.spans.GetSpans(), 2)
	ts.spans.Reset()
	got := ts.setTrace(t, "", map[string][]string{"trace_count": {"1"}, "trace_rate": {"1"}})
	assert.Equal(t, []string{"1"}, got["trace_count"])
	ts.setTrace(t, "simple", map[string][]string{"trace_rate": {}})
	for i := range 3 {
		_, err = infer(ctx, ts.grpc, simpleRequest(string(rune('a'+i))))
		require.NoError(t, err)
	}
	assert.Len(t, ts.spans.GetSpans(), 1)
	assert.Equal(t, []string{"0"}, ts.setTrace(t, "", nil)["trace_count"])

	// Level OFF again: nothing.
	ts.spans.Reset()
	ts.setTrace(t, "", map[string][]string{"trace_level": {"OFF"}, "trace_count": {"-1"}})
	_, err = infer(ctx, ts.grpc, simpleRequest("z"))
	require.NoError(t, err)
	assert.Empty(t, ts.spans.GetSpans())
}

func TestLogSettingsSetLevel(t *testing.T) {
	t.Parallel()
	ts := startTraced(t)
	r := ts.rest.get(t, "/v2/logging")
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	assert.JSONEq(t, `{"log_file":"","log_info":true,"log_warning":true,"log_error":true,"log_verbose_level":0,"log_format":"default"}`, string(r.body))

	r = ts.rest.post(t, "/v2/logging", `{"log_verbose_level":1}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	assert.Equal(t, slog.LevelDebug, ts.level.Level())
	r = ts.rest.post(t, "/v2/logging", `{"log_verbose_level":0,"log_info":false}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r)
	assert.JSONEq(t, `{"log_file":"","log_info":false,"log_warning":true,"log_error":true,"log_verbose_level":0,"log_format":"default"}`, string(r.body))
	assert.Equal(t, slog.LevelWarn, ts.level.Level())

	requireRESTError(t, ts.rest.post(t, "/v2/logging", `{"log_file":"/tmp/log"}`), http.StatusNotImplemented,
		"log file location can not be updated through network protocol")
	requireRESTError(t, ts.rest.post(t, "/v2/logging", `{"log_info":"yes"}`), http.StatusBadRequest, "expect boolean for 'log_info'")
	requireRESTError(t, ts.rest.post(t, "/v2/logging", `{"log_verbose_level":-1}`), http.StatusBadRequest, "expect int32 for 'log_verbose_level'")
	requireRESTError(t, ts.rest.post(t, "/v2/logging", `{"log_format":"json"}`), http.StatusBadRequest, "invalid argument for log_format, got: json")
	requireRESTError(t, ts.rest.post(t, "/v2/logging", `{"log_error":true,"log_warning":1}`), http.StatusBadRequest, "expect boolean for 'log_warning'")
	assert.Equal(t, slog.LevelWarn, ts.level.Level(), "a refused request changes nothing")

	res, err := call[inference.LogSettingsRequest, inference.LogSettingsResponse](context.Background(), ts.grpc, "LogSettings", &inference.LogSettingsRequest{
		Settings: map[string]*inference.LogSettingsRequest_SettingValue{
			"log_warning": {ParameterChoice: &inference.LogSettingsRequest_SettingValue_BoolParam{BoolParam: false}},
		}})
	require.NoError(t, err)
	assert.False(t, res.GetSettings()["log_warning"].GetBoolParam())
	assert.Equal(t, slog.LevelError, ts.level.Level())
	_, err = call[inference.LogSettingsRequest, inference.LogSettingsResponse](context.Background(), ts.grpc, "LogSettings", &inference.LogSettingsRequest{
		Settings: map[string]*inference.LogSettingsRequest_SettingValue{
			"log_verbose_level": {ParameterChoice: &inference.LogSettingsRequest_SettingValue_BoolParam{BoolParam: true}},
		}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Equal(t, "expect int32 for 'log_verbose_level'", status.Convert(err).Message())
}

// Each request of a ModelStreamInfer stream gets its own span, as Triton traces them: named for
// the method, a child of the client's traceparent, under its model's trace settings, failed
// requests marked as errors, a decoupled request's ending with its last response; the stream
// itself gets none.
func TestStreamRequestsGetSpans(t *testing.T) {
	t.Parallel()
	ts := startTraced(t)
	ts.setTrace(t, "", map[string][]string{"trace_level": {"TIMESTAMPS"}, "trace_rate": {"1"}})
	stream := func(responses int, reqs ...*inference.ModelInferRequest) {
		t.Helper()
		s := openStream(context.Background(), t, ts.grpc, "traceparent", clientTraceparent)
		for _, r := range reqs {
			require.NoError(t, s.Send(r))
		}
		require.NoError(t, s.CloseSend())
		res, err := recvAll(t, s)
		require.NoError(t, err)
		require.Len(t, res, responses)
	}
	unknown := simpleRequest("s3")
	unknown.ModelName = "nope"
	stream(2+1+3, simpleRequest("s1"), simpleRequest("s2"), unknown, repeatRequest("r", []int32{1, 2, 3}, 5))
	spans := map[string]tracetest.SpanStub{}
	for _, s := range ts.spans.GetSpans() {
		assert.Equal(t, "inference.GRPCInferenceService/ModelStreamInfer", s.Name)
		assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", s.SpanContext.TraceID().String())
		assert.Equal(t, "b7ad6b7169203331", s.Parent.SpanID().String())
		for _, a := range s.Attributes {
			if a.Key == "infergate.request_id" {
				spans[a.Value.AsString()] = s
			}
		}
	}
	require.Len(t, ts.spans.GetSpans(), 4, "one per request, none for the stream")
	require.Len(t, spans, 4)
	assert.Contains(t, spans["s1"].Attributes, attribute.String("infergate.model", "simple"))
	assert.Contains(t, spans["r"].Attributes, attribute.String("infergate.model", "repeat_int32"))
	assert.GreaterOrEqual(t, spans["r"].EndTime.Sub(spans["r"].StartTime), 15*time.Millisecond, "three responses 5 ms apart")
	assert.Equal(t, otelcodes.Unset, spans["s1"].Status.Code)
	assert.Equal(t, otelcodes.Error, spans["s3"].Status.Code, "the unknown model's request failed")

	// The model's own settings: one request in two.
	ts.spans.Reset()
	ts.setTrace(t, "simple", map[string][]string{"trace_rate": {"2"}})
	stream(4, simpleRequest("a"), simpleRequest("b"), simpleRequest("c"), simpleRequest("d"))
	assert.Len(t, ts.spans.GetSpans(), 2)
}
