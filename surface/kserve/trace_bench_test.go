package kserve_test

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/kserve"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkRESTInferTracing: the REST simple infer, handler called in process, on a service
// without a Tracer (the baseline), with one whose level is OFF, and with one tracing but not
// sampling this request (rate 1e9), in interleaved rounds of one run. Reported: each one's ns/op
// over the baseline's, and the allocations each adds per request.
func BenchmarkRESTInferTracing(b *testing.B) {
	reg := engines.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		b.Fatal(err)
	}
	newTracer := func(s tracing.Settings) *tracing.Tracer {
		tr, err := tracing.New(context.Background(), tracing.Config{Exporter: tracetest.NewInMemoryExporter(), Synchronous: true, Settings: &s})
		if err != nil {
			b.Fatal(err)
		}
		return tr
	}
	handlers := []http.Handler{
		kserve.NewService(reg).RESTHandler(),
		kserve.NewService(reg, kserve.WithTracing(newTracer(tracing.DefaultSettings))).RESTHandler(),
		kserve.NewService(reg, kserve.WithTracing(newTracer(tracing.Settings{Level: tracing.LevelTimestamps, Rate: 1e9, Count: -1}))).RESTHandler(),
	}
	body := []byte(simpleJSON)
	serve := func(h http.Handler) {
		req := httptest.NewRequest(http.MethodPost, "/v2/models/simple/infer", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	best := []float64{math.Inf(1), math.Inf(1), math.Inf(1)}
	for range 5 {
		for i, h := range handlers {
			start := time.Now()
			for range b.N {
				serve(h)
			}
			best[i] = min(best[i], float64(time.Since(start).Nanoseconds())/float64(b.N))
		}
	}
	allocs := make([]float64, len(handlers))
	for i, h := range handlers {
		allocs[i] = testing.AllocsPerRun(50, func() { serve(h) })
	}
	b.ReportMetric(best[0], "baseline-ns/op")
	b.ReportMetric(best[1]/best[0], "off/baseline")
	b.ReportMetric(best[2]/best[0], "unsampled/baseline")
	b.ReportMetric(allocs[1]-allocs[0], "off-extra-allocs/op")
	b.ReportMetric(allocs[2]-allocs[0], "unsampled-extra-allocs/op")
}
