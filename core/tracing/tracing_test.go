package tracing_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/core/tracing"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"
)

const clientTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

func newTracer(t testing.TB, s *tracing.Settings) (*tracing.Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), tracing.Config{Exporter: exp, Synchronous: true, Settings: s})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

func update(t *testing.T, tr *tracing.Tracer, model string, kv ...string) map[string][]string {
	t.Helper()
	m := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = []string{kv[i+1]}
	}
	out, err := tr.Update(model, m)
	require.NoError(t, err)
	return out
}

func TestParseUpdateTritonMessages(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		settings map[string][]string
		msg      string
	}{
		{map[string][]string{"trace_rate": {"x1"}}, "Unable to parse 'trace_rate', got: x1"},
		{map[string][]string{"trace_rate": {"-1"}}, "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -1"},
		{map[string][]string{"trace_count": {"-5"}}, "Unable to parse 'trace_count'. Expecting value >= -1, got: -5"},
		{map[string][]string{"trace_count": {"3000000000"}}, "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: 3000000000"},
		{map[string][]string{"log_frequency": {"1", "2"}}, "expect only 1 value for 'log_frequency'"},
		{map[string][]string{"trace_level": {"TENSORS", "OFF"}}, "Expect only one trace level 'OFF' is specified"},
		{map[string][]string{"trace_file": {"x"}}, "trace file location can not be updated through network protocol"},
	} {
		_, err := tracing.ParseUpdate(c.settings)
		require.Error(t, err, "%v", c.settings)
		assert.Equal(t, c.msg, err.Error())
	}
	_, err := tracing.ParseUpdate(map[string][]string{"trace_rate": {" 12abc"}, "unknown": {"x"}})
	assert.NoError(t, err, "std::stoi reads leading digits; unknown names are ignored")
}

func TestSamplingFollowsSettings(t *testing.T) {
	t.Parallel()
	tr, exp := newTracer(t, nil)
	ctx := context.Background()
	traced := func(model string, n int) int {
		exp.Reset()
		for range n {
			_, span := tr.Start(ctx, "req", model, nil)
			tracing.End(span, nil)
		}
		return len(exp.GetSpans())
	}
	assert.Zero(t, traced("m", 10), "off by default")
	update(t, tr, "", "trace_level", "TIMESTAMPS", "trace_rate", "3")
	assert.Equal(t, 3, traced("m", 9), "one in three")
	update(t, tr, "m", "trace_rate", "1")
	assert.Equal(t, 4, traced("m", 4), "the model's own rate")
	assert.Equal(t, 1, traced("other", 3), "other models keep the server's")
	update(t, tr, "m", "trace_count", "2")
	assert.Equal(t, 2, traced("m", 5), "the model's count")
	assert.Equal(t, []string{"0"}, tr.Get("m")["trace_count"])
	assert.Equal(t, []string{"-1"}, tr.Get("")["trace_count"])
	update(t, tr, "m", "trace_level", "OFF")
	_, err := tr.Update("m", map[string][]string{"trace_count": {}, "trace_rate": {}})
	require.NoError(t, err)
	assert.Zero(t, traced("m", 6), "the model's level OFF")
	assert.Equal(t, []string{"OFF"}, tr.Get("m")["trace_level"])
	assert.Equal(t, []string{"TIMESTAMPS"}, tr.Get("")["trace_level"])
	_, err = tr.Update("m", map[string][]string{"trace_level": {}})
	require.NoError(t, err)
	assert.Equal(t, 2, traced("m", 6), "back to the server's settings")
	_, err = tr.Update("", map[string][]string{"trace_level": {}, "trace_rate": {}})
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"trace_level": {"OFF"}, "trace_rate": {"1000"}, "trace_count": {"-1"},
		"log_frequency": {"0"}, "trace_file": {""}, "trace_mode": {"opentelemetry"}}, tr.Get(""), "cleared: the start's settings")
}

func TestNoExporterNeverTraces(t *testing.T) {
	t.Parallel()
	on := tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1, Count: -1}
	tr, err := tracing.New(context.Background(), tracing.Config{Settings: &on})
	require.NoError(t, err)
	_, span := tr.Start(context.Background(), "req", "", nil)
	assert.Nil(t, span)
	assert.Equal(t, []string{"TIMESTAMPS"}, tr.Get("")["trace_level"])
}

// The client's traceparent is the parent; the upstream gets the upstream span's, over HTTP and
// gRPC metadata; a request not sampled still passes the client's on.
func TestPropagation(t *testing.T) {
	t.Parallel()
	on := tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1, Count: -1}
	tr, exp := newTracer(t, &on)
	got := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("traceparent") }))
	defer up.Close()

	in := http.Header{"Traceparent": {clientTraceparent}}
	ctx, span := tr.Start(context.Background(), "req", "m", propagation.HeaderCarrier(in))
	require.NotNil(t, span)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, up.URL, nil)
	require.NoError(t, err)
	_, upSpan := tracing.StartUpstream(ctx, "up", req.Header)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	tracing.End(upSpan, nil)
	gctx, gSpan := tracing.StartUpstreamGRPC(metadata.AppendToOutgoingContext(ctx, "x-own", "1"), "grpc-up")
	tracing.End(gSpan, nil)
	tracing.End(span, nil)

	spans := exp.GetSpans()
	require.Len(t, spans, 3)
	assert.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-"+spans[0].SpanContext.SpanID().String()+"-01", <-got)
	md, _ := metadata.FromOutgoingContext(gctx)
	assert.Equal(t, []string{"00-0af7651916cd43dd8448eb211c80319c-" + spans[1].SpanContext.SpanID().String() + "-01"}, md.Get("traceparent"))
	assert.Equal(t, []string{"1"}, md.Get("x-own"), "the call's own metadata is kept")
	assert.Equal(t, spans[2].SpanContext.SpanID(), spans[0].Parent.SpanID())
	assert.Equal(t, "b7ad6b7169203331", spans[2].Parent.SpanID().String())

	// A count of 0: the request is not sampled, but the client's trace context goes upstream.
	update(t, tr, "", "trace_count", "0")
	ctx, span = tr.Start(context.Background(), "req", "", propagation.HeaderCarrier(in))
	assert.Nil(t, span)
	h := http.Header{}
	_, upSpan = tracing.StartUpstream(ctx, "up", h)
	assert.Nil(t, upSpan)
	assert.Equal(t, clientTraceparent, h.Get("traceparent"))
}

func TestOffPathAllocatesNothing(t *testing.T) {
	var nilTracer *tracing.Tracer
	off, _ := newTracer(t, nil) // exporter, level OFF
	ctx := context.Background()
	h := http.Header{"Traceparent": {clientTraceparent}}
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	req := httptest.NewRequest(http.MethodPost, "/v2/models/simple/infer", nil)
	req.Header = h
	for name, tr := range map[string]*tracing.Tracer{"nil": nilTracer, "off": off} {
		mw := tr.HTTP(next)
		chain := pipeline.Chain(func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return nil, nil }, tr.Interceptor())
		preq, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"m"}`))
		require.NoError(t, err)
		preq.Header = h
		allocs := testing.AllocsPerRun(100, func() {
			c, span := tr.Start(ctx, "req", "simple", propagation.HeaderCarrier(h))
			tracing.End(span, nil)
			_, up := tracing.StartUpstream(c, "up", h)
			tracing.End(up, nil)
			mw.ServeHTTP(nil, req)
			_, _ = chain(ctx, preq)
		})
		assert.Zero(t, allocs, name)
	}
	// Tracing on, this request not sampled, no client trace context: nothing either.
	unsampled, _ := newTracer(t, &tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1e9, Count: -1})
	plain := httptest.NewRequest(http.MethodPost, "/v2/models/simple/infer", nil)
	mw := unsampled.HTTP(next)
	allocs := testing.AllocsPerRun(100, func() {
		_, span := unsampled.Start(ctx, "req", "simple", propagation.HeaderCarrier(plain.Header))
		tracing.End(span, nil)
		mw.ServeHTTP(nil, plain)
	})
	assert.Zero(t, allocs, "unsampled")
}

func TestLogsSetLevel(t *testing.T) {
	t.Parallel()
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelWarn)
	l := tracing.NewLogs(lv)
	assert.False(t, *l.Get()[tracing.LogInfo].Bool, "read from the level at start")
	f, tru := false, true
	for _, c := range []struct {
		set  map[string]tracing.LogValue
		want slog.Level
	}{
		{map[string]tracing.LogValue{tracing.LogInfo: {Bool: &tru}}, slog.LevelInfo},
		{map[string]tracing.LogValue{tracing.LogVerboseLevel: {Uint32: new(uint32(2))}}, slog.LevelDebug},
		{map[string]tracing.LogValue{tracing.LogVerboseLevel: {Uint32: new(uint32(0))}, tracing.LogInfo: {Bool: &f}, tracing.LogWarning: {Bool: &f}}, slog.LevelError},
		{map[string]tracing.LogValue{tracing.LogError: {Bool: &f}}, slog.LevelError + 4},
	} {
		_, err := l.Update(c.set)
		require.NoError(t, err)
		assert.Equal(t, c.want, lv.Level())
	}
}

// Sampling reads a snapshot while updates replace it: under -race, no data race, and a count
// is never overspent.
func TestConcurrentSamplingAndUpdates(t *testing.T) {
	t.Parallel()
	tr, exp := newTracer(t, &tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1, Count: 50})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			update(t, tr, "m", "log_frequency", string(rune('0'+i%10)))
		}
	}()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, span := tr.Start(context.Background(), "req", "", nil)
				tracing.End(span, nil)
			}
		})
	}
	wg.Wait()
	<-done
	assert.Len(t, exp.GetSpans(), 50)
	assert.Equal(t, []string{"0"}, tr.Get("")["trace_count"])
}

// The OTLP/HTTP exporter posts spans to the configured endpoint: a collector in the test process.
func TestOTLPExportToEndpoint(t *testing.T) {
	t.Parallel()
	got := make(chan string, 4)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type") + " " + r.Header.Get("X-Key")
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	on := tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1, Count: -1}
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: collector.URL + "/v1/traces", Headers: map[string]string{"X-Key": "k"}, Settings: &on})
	require.NoError(t, err)
	require.True(t, tr.Exporting())
	_, span := tr.Start(context.Background(), "req", "m", nil)
	require.NotNil(t, span)
	tracing.End(span, nil)
	require.NoError(t, tr.Shutdown(context.Background()), "flushes the batch")
	assert.Equal(t, "POST /v1/traces application/x-protobuf k", <-got)
}
