// Package tracing is infergate's OpenTelemetry tracing: a span per request on every surface, the
// upstream call as its child, W3C traceparent accepted from clients and sent to upstreams, and
// Triton's trace settings (level, rate, count; for the server and per model) deciding which
// requests are traced, changeable at run time through the trace extension.
//
// Tracing is off by default: a nil *Tracer, or one whose every scope's level is OFF, costs a
// request one nil check and one atomic load, and allocates nothing.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// Config configures a Tracer.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's URL (http://collector:4318, or with the path
	// /v1/traces). Empty with no Exporter: spans are not exported and tracing stays off whatever
	// the settings say.
	Endpoint string
	// Headers are sent with every export (a collector's API key).
	Headers map[string]string
	// Exporter, when set, is used instead of an OTLP exporter (tests: tracetest's in-memory one).
	Exporter sdktrace.SpanExporter
	// Synchronous exports each span as it ends instead of in batches (tests).
	Synchronous bool
	// ServiceName is the resource's service.name (default "infergate").
	ServiceName string
	// Settings are the server's trace settings at start (zero value: DefaultSettings).
	Settings *Settings
}

// MaxModelSettings bounds the models with trace settings of their own.
const MaxModelSettings = 4096

// Tracer starts spans for requests as the trace settings decide. Its methods are safe on a nil
// *Tracer, which never traces.
type Tracer struct {
	tp     *sdktrace.TracerProvider // nil: no exporter
	tracer trace.Tracer
	prop   propagation.TextMapPropagator

	snap atomic.Pointer[snapshot]

	mu      sync.Mutex // serialises updates
	initial Settings
	global  Settings
	gc      *counters
	models  map[string]*override
}

// New returns a Tracer exporting to cfg's endpoint or exporter. Call Shutdown to flush.
func New(ctx context.Context, cfg Config) (*Tracer, error) {
	t := &Tracer{prop: propagation.TraceContext{}, initial: DefaultSettings, models: map[string]*override{}}
	if cfg.Settings != nil {
		t.initial = *cfg.Settings
	}
	t.global = t.initial
	t.gc = &counters{}
	t.gc.remaining.Store(int64(t.global.Count))
	exp := cfg.Exporter
	if exp == nil && cfg.Endpoint != "" {
		var err error
		// A collector's address without a path means its traces path, as OTEL_EXPORTER_OTLP_ENDPOINT
		// does; WithEndpointURL alone would post to "/".
		endpoint := cfg.Endpoint
		if u, perr := url.Parse(endpoint); perr == nil && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
			endpoint = u.String()
		}
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint), otlptracehttp.WithHeaders(cfg.Headers))
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", cfg.Endpoint, err)
		}
	}
	if exp != nil {
		name := cfg.ServiceName
		if name == "" {
			name = "infergate"
		}
		span := sdktrace.WithBatcher(exp)
		if cfg.Synchronous {
			span = sdktrace.WithSyncer(exp)
		}
		// The settings decide which requests get a span; once started, a span is recorded.
		t.tp = sdktrace.NewTracerProvider(span, sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", name))))
		t.tracer = t.tp.Tracer("github.com/infergate/infergate")
	}
	t.publish()
	return t, nil
}

// Shutdown flushes and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Exporting reports whether spans go anywhere.
func (t *Tracer) Exporting() bool { return t != nil && t.tp != nil }

// Start begins the server span of one request for model (empty: the server's settings), named
// name, a child of the trace context the client sent in carrier (nil: none). When the request is
// not traced it returns ctx and a nil span, allocating nothing when tracing is off; a client's
// traceparent is then still carried in ctx, so upstreams see the client's trace. End the span
// with End.
func (t *Tracer) Start(ctx context.Context, name, model string, carrier propagation.TextMapCarrier) (context.Context, trace.Span) {
	if t == nil {
		return ctx, nil
	}
	sn := t.snap.Load()
	if !sn.on {
		return ctx, nil
	}
	ctx = t.clientContext(ctx, carrier)
	if !sn.scopeFor(model).sample() {
		return ctx, nil
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	if model != "" {
		span.SetAttributes(attribute.String("infergate.model", model))
	}
	return ctx, span
}

// extract is ctx with the client's trace context from carrier (nil: none) while tracing is on,
// for spans started under it later.
func (t *Tracer) extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	if t == nil || !t.snap.Load().on {
		return ctx
	}
	return t.clientContext(ctx, carrier)
}

// clientContext is ctx with the trace context the client sent in carrier (nil: none), if any.
func (t *Tracer) clientContext(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	// The canonical spelling: http.Header's Get canonicalises any other with an allocation.
	if carrier == nil || carrier.Get("Traceparent") == "" {
		return ctx
	}
	return t.prop.Extract(ctx, carrier)
}

// End ends span (nil: nothing), recording err as its error status.
func End(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// StartUpstream begins the client span of one HTTP upstream call under ctx's span and writes its
// traceparent (and tracestate) into h. Under a span that is not recorded (a client's traceparent
// on a request not sampled) it writes that trace context and returns a nil span; with no trace
// context in ctx it does nothing and allocates nothing. End the span with End.
func StartUpstream(ctx context.Context, endpoint string, h http.Header) (context.Context, trace.Span) {
	ctx, span, ok := startUpstream(ctx, endpoint)
	if ok {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	}
	return ctx, span
}

// StartUpstreamGRPC is StartUpstream for a gRPC upstream call: the trace context goes into ctx's
// outgoing metadata (call it after setting the call's own metadata, which would replace it).
func StartUpstreamGRPC(ctx context.Context, endpoint string) (context.Context, trace.Span) {
	ctx, span, ok := startUpstream(ctx, endpoint)
	if ok {
		var kv []string
		propagation.TraceContext{}.Inject(ctx, funcCarrier(func(k, v string) { kv = append(kv, k, v) }))
		ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	}
	return ctx, span
}

func startUpstream(ctx context.Context, endpoint string) (context.Context, trace.Span, bool) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, nil, false
	}
	if !parent.IsRecording() {
		return ctx, nil, true
	}
	ctx, span := parent.TracerProvider().Tracer("github.com/infergate/infergate").Start(ctx, "upstream "+endpoint,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("infergate.endpoint", endpoint)))
	return ctx, span, true
}

type funcCarrier func(key, value string)

func (funcCarrier) Get(string) string       { return "" }
func (f funcCarrier) Set(key, value string) { f(key, value) }
func (funcCarrier) Keys() []string          { return nil }
