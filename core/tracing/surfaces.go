package tracing

import (
	"context"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Like Triton, infergate traces inference requests (ModelInfer, ModelStreamInfer, REST infer and
// generate), not metadata, health or control calls, which would spend the trace count.

func inferenceMethod(procedure string) bool {
	return strings.HasSuffix(procedure, "/ModelInfer") || strings.HasSuffix(procedure, "/ModelStreamInfer")
}

func inferencePath(path string) bool {
	return strings.HasSuffix(path, "/infer") || strings.HasSuffix(path, "/generate") || strings.HasSuffix(path, "/generate_stream")
}

// HTTP wraps the KServe REST handler: a span per inference request, for the model its path names
// (/v2/models/{model}/...).
func (t *Tracer) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t == nil || !t.snap.Load().on || !inferencePath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		ctx, span := t.Start(r.Context(), "KServe REST", modelInPath(r.URL.Path), propagation.HeaderCarrier(r.Header))
		if span == nil {
			if ctx != r.Context() { // the client's trace context, for upstreams
				r = r.WithContext(ctx)
			}
			next.ServeHTTP(w, r)
			return
		}
		span.SetAttributes(attribute.String("http.request.method", r.Method), attribute.String("url.path", r.URL.Path))
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
			if sw.status >= 500 {
				span.SetStatus(codes.Error, http.StatusText(sw.status))
			}
			span.End()
		}()
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}

// modelInPath is the model a KServe REST path names, or "".
func modelInPath(path string) string {
	rest, ok := strings.CutPrefix(path, "/v2/models/")
	if !ok {
		return ""
	}
	model, _, _ := strings.Cut(rest, "/")
	if model == "stats" {
		return ""
	}
	return model
}

// statusWriter remembers the status a handler wrote; Unwrap lets http.ResponseController reach
// the connection's Flush for streaming endpoints.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// modelOf is the model a KServe request message names, or "".
func modelOf(msg any) string {
	switch m := msg.(type) {
	case interface{ GetModelName() string }:
		return m.GetModelName()
	case interface{ GetName() string }:
		return m.GetName()
	}
	return ""
}

// Connect is a connect-go handler interceptor (gRPC, gRPC-Web and Connect on one handler): a
// span per inference call, named for its procedure. A stream (ModelStreamInfer) gets none of its
// own: as Triton traces each request of a stream, the stream's handler starts a span per request
// (StreamRequest), under that request's model's settings; the interceptor only carries the
// client's trace context to them.
func (t *Tracer) Connect() connect.Interceptor { return connectInterceptor{t} }

type connectInterceptor struct{ t *Tracer }

func (c connectInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !inferenceMethod(req.Spec().Procedure) {
			return next(ctx, req)
		}
		ctx, span := c.t.Start(ctx, req.Spec().Procedure, modelOf(req.Any()), propagation.HeaderCarrier(req.Header()))
		res, err := next(ctx, req)
		End(span, err)
		return res, err
	}
}

func (connectInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c connectInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if !inferenceMethod(conn.Spec().Procedure) {
			return next(ctx, conn)
		}
		return next(c.t.extract(ctx, propagation.HeaderCarrier(conn.RequestHeader())), conn)
	}
}

// mdCarrier reads incoming gRPC metadata (lower-case keys).
type mdCarrier metadata.MD

func (m mdCarrier) Get(key string) string {
	if key == "Traceparent" {
		key = "traceparent" // Start's question, answered without an allocation
	} else {
		key = strings.ToLower(key)
	}
	if v := m[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (m mdCarrier) Set(key, value string) { m[strings.ToLower(key)] = []string{value} }
func (m mdCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

func (t *Tracer) incoming(ctx context.Context) propagation.TextMapCarrier {
	if t == nil {
		return nil
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil
	}
	return mdCarrier(md)
}

// GRPCUnary and GRPCStream are grpc-go server interceptors for the native gRPC transport: a span
// per call, and a stream's trace context for its requests' spans, as Connect's.
func (t *Tracer) GRPCUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if t == nil || !t.snap.Load().on || !inferenceMethod(info.FullMethod) {
			return h(ctx, req)
		}
		ctx, span := t.Start(ctx, strings.TrimPrefix(info.FullMethod, "/"), modelOf(req), t.incoming(ctx))
		res, err := h(ctx, req)
		End(span, err)
		return res, err
	}
}

// GRPCStream: see GRPCUnary.
func (t *Tracer) GRPCStream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if t == nil || !t.snap.Load().on || !inferenceMethod(info.FullMethod) {
			return h(srv, ss)
		}
		ctx := t.extract(ss.Context(), t.incoming(ss.Context()))
		if ctx == ss.Context() {
			return h(srv, ss)
		}
		return h(srv, ctxStream{ss, ctx})
	}
}

// StreamRequest begins the span of one request of a ModelStreamInfer stream, for its model, under
// the client's trace context that the stream's interceptor put in ctx. End it with End when the
// request's last response is sent.
func (t *Tracer) StreamRequest(ctx context.Context, model, id string) (context.Context, trace.Span) {
	ctx, span := t.Start(ctx, "inference.GRPCInferenceService/ModelStreamInfer", model, nil)
	if span != nil && id != "" {
		span.SetAttributes(attribute.String("infergate.request_id", id))
	}
	return ctx, span
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

// Interceptor is the LLM pipeline's stage (put it first, before the guard, so refusals are traced
// too): a span per request, named for its OpenAI path, ending when the response body is
// finished, so a stream's span covers the whole stream.
func (t *Tracer) Interceptor() pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			var carrier propagation.TextMapCarrier
			if req.Header != nil {
				carrier = propagation.HeaderCarrier(req.Header)
			}
			ctx, span := t.Start(ctx, req.Path, req.Model(), carrier)
			if span == nil {
				return next(ctx, req)
			}
			span.SetAttributes(attribute.Bool("infergate.stream", req.Stream()))
			res, err := next(ctx, req)
			if err != nil {
				End(span, err)
				return nil, err
			}
			span.SetAttributes(attribute.Int("http.response.status_code", res.StatusCode))
			if res.Endpoint != "" {
				span.SetAttributes(attribute.String("infergate.endpoint", res.Endpoint))
			}
			res.Body = &spanBody{Body: res.Body, span: span, status: res.StatusCode}
			return res, nil
		}
	}
}

// spanBody ends the request's span when its body is finished.
type spanBody struct {
	pipeline.Body
	span   trace.Span
	status int
	done   bool
}

func (b *spanBody) Finish(clientErr error) pipeline.Usage {
	u := b.Body.Finish(clientErr)
	if !b.done {
		b.done = true
		if err := b.Body.Err(); err != nil {
			b.span.SetStatus(codes.Error, err.Error())
		} else if b.status >= 500 {
			b.span.SetStatus(codes.Error, http.StatusText(b.status))
		}
		b.span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", u.PromptTokens), attribute.Int64("gen_ai.usage.output_tokens", u.CompletionTokens))
		b.span.End()
	}
	return u
}
