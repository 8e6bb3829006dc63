package tracing_test

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/core/tracing"
	"github.com/stretchr/testify/require"
)

// BenchmarkOffPath: a request through the KServe REST middleware and the LLM pipeline's
// interceptor, with tracing off (nil Tracer; level OFF) and on but not sampled (rate 1e9),
// against the bare handlers, in the same run. Reported: each one's ns/op over the baseline's.
func BenchmarkOffPath(b *testing.B) {
	ctx := context.Background()
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	terminal := func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return nil, nil }
	req := httptest.NewRequest(http.MethodPost, "/v2/models/simple/infer", nil)
	req.Header.Set("Traceparent", clientTraceparent)
	preq, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"m"}`))
	require.NoError(b, err)
	off, _ := newTracer(b, nil)
	unsampled, _ := newTracer(b, &tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1e9, Count: -1})
	measure := func(h http.Handler, p pipeline.Handler) float64 {
		start := time.Now()
		for range b.N {
			h.ServeHTTP(nil, req)
			_, _ = p(ctx, preq)
		}
		return float64(time.Since(start).Nanoseconds()) / float64(b.N)
	}
	var nilTracer *tracing.Tracer
	// Interleaved rounds, each case's best, so a neighbour's load on the shared cores does not
	// land on one case only.
	base, nilNs, offNs, unNs := math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)
	for range 5 {
		base = min(base, measure(next, terminal))
		nilNs = min(nilNs, measure(nilTracer.HTTP(next), pipeline.Chain(terminal, nilTracer.Interceptor())))
		offNs = min(offNs, measure(off.HTTP(next), pipeline.Chain(terminal, off.Interceptor())))
		unNs = min(unNs, measure(unsampled.HTTP(next), pipeline.Chain(terminal, unsampled.Interceptor())))
	}
	b.ReportMetric(base, "baseline-ns/op")
	b.ReportMetric(nilNs/base, "nil/baseline")
	b.ReportMetric(offNs/base, "off/baseline")
	b.ReportMetric(unNs/base, "unsampled/baseline")
}
