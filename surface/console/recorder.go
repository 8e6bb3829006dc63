package console

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/window"
	"github.com/infergate/infergate/stage/guard"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The window every figure of the console covers, and its resolutions.
const (
	// WindowSeconds is the overview's window: 15 minutes of one-second periods.
	WindowSeconds = 900
	// windowMinutes is the per-model and per-key window: 15 one-minute periods.
	windowMinutes = 15
	// maxModels and maxKeys bound the names tracked; past them names share window.Other.
	maxModels = 128
	maxKeys   = 256
)

// Recorder keeps what the console shows of traffic, in fixed memory: the overview's per-second
// ring, a per-minute ring per LLM model and per API key, and the requests in flight. The
// gateway's transports feed it (HTTP and HTTP/2 through HTTP and HTTPKey, native gRPC through its
// interceptors), and every model's LLM pipeline through Stage. It is safe for concurrent use.
//
// Recording takes no lock on the way of a request: it is a few atomic additions to the current
// slot of each ring it touches (lib/window; a ring locks only to zero a slot taken over by a new
// period, once per period, and a Keyed only to make a name's ring on its first use), and reads
// of the clock. It allocates one object per HTTP request, HTTP's status recorder (48 bytes), and
// one per LLM request, Stage's metered body (128 bytes); a native gRPC call allocates nothing
// here (BenchmarkRecord reports the allocations).
type Recorder struct {
	overview *window.Ring
	models   *window.Keyed
	keys     *window.Keyed
	inflight atomic.Int64
	now      func() time.Time
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{
		overview: window.New(WindowSeconds, time.Second, 2),
		models:   window.NewKeyed(maxModels, windowMinutes, time.Minute, 3),
		keys:     window.NewKeyed(maxKeys, windowMinutes, time.Minute, 0),
		now:      time.Now,
	}
}

// Bytes is the most memory the Recorder's rings hold, whatever the traffic.
func (rc *Recorder) Bytes() int {
	return rc.overview.Bytes() + rc.models.Bytes() + rc.keys.Bytes()
}

// untracked are the paths that are not traffic: the console itself (its polling would count
// itself), metrics scrapes and health checks.
func untracked(path string) bool {
	switch path {
	case "/metrics", "/health", "/v2/health/live", "/v2/health/ready", "/internal/health", "/version":
		return true
	}
	return path == "/console" || strings.HasPrefix(path, "/console/") || strings.HasPrefix(path, "/grpc.health.v1.Health/")
}

// keyName is the name of the request's API key ("" with keys off: no per-key figures).
func keyName(ctx context.Context) string {
	if p := guard.PrincipalFrom(ctx); p != nil {
		return p.Name
	}
	return ""
}

// classify counts a finished request by its HTTP status.
func classify(c *window.Counts, code int) {
	c.Requests = 1
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden || code == http.StatusTooManyRequests:
		c.Refused = 1
	case code >= 500 || code == 0:
		c.Errors = 1
	}
}

// request records one finished request of the transports; key is its API key's name ("" for
// none).
func (rc *Recorder) request(key string, start, end time.Time, code int) {
	ev := window.Event{Latency: end.Sub(start)}
	classify(&ev.Counts, code)
	rc.overview.Record(end, &ev)
	if key != "" {
		rc.keys.Of(key).Record(end, &window.Event{Counts: ev.Counts})
	}
}

// HTTP counts every HTTP request but the console's own, health checks and metrics. Mount it
// before the API key check, so the requests it refuses count too, and HTTPKey after it.
func (rc *Recorder) HTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if untracked(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		start := rc.now()
		rc.inflight.Add(1)
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			rc.inflight.Add(-1)
			code := sw.status
			if code == 0 {
				code = http.StatusOK // nothing written: net/http answers 200
			}
			rc.request(sw.key, start, rc.now(), code)
		}()
		next.ServeHTTP(sw, r)
	})
}

// HTTPKey tells HTTP which API key a request carries: mount it after the key check. It finds
// HTTP's status recorder among the writers wrapping the response (Unwrap), so it costs no
// allocation.
func (rc *Recorder) HTTPKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := keyName(r.Context()); name != "" {
			for cur := w; cur != nil; {
				if sw, ok := cur.(*statusWriter); ok {
					sw.key = name
					break
				}
				u, ok := cur.(interface{ Unwrap() http.ResponseWriter })
				if !ok {
					break
				}
				cur = u.Unwrap()
			}
		}
		next.ServeHTTP(w, r)
	})
}

// statusWriter remembers the status a handler wrote, and the request's key (HTTPKey). Flush and
// Unwrap keep streaming answers (SSE, Connect streams) working through it.
type statusWriter struct {
	http.ResponseWriter
	status int
	key    string
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// grpcStatus is the HTTP status that stands for a gRPC call's outcome, for classify.
func grpcStatus(err error) int {
	code := status.Code(err)
	// Inside the KServe service's own interceptor an error may still be a connect error (its
	// codes are gRPC's), which that interceptor turns into a status later. Looked for only
	// then: errors.As's target escapes, and every call would allocate it.
	if code == codes.Unknown {
		var ce *connect.Error
		if errors.As(err, &ce) {
			code = codes.Code(ce.Code())
		}
	}
	switch code {
	case codes.OK:
		return http.StatusOK
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Internal, codes.Unavailable, codes.Unknown, codes.DataLoss, codes.DeadlineExceeded:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// GRPCOptions count native gRPC calls (health checks and reflection left out), as HTTP counts the
// other transports.
func (rc *Recorder) GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(rc.unary), grpc.ChainStreamInterceptor(rc.stream)}
}

// untrackedRPC are the gRPC methods that are not traffic: health checks and reflection.
func untrackedRPC(method string) bool {
	return untracked(method) || strings.HasPrefix(method, "/grpc.reflection.")
}

func (rc *Recorder) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if untrackedRPC(info.FullMethod) {
		return handler(ctx, req)
	}
	start := rc.now()
	rc.inflight.Add(1)
	res, err := handler(ctx, req)
	rc.inflight.Add(-1)
	rc.request(keyName(ctx), start, rc.now(), grpcStatus(err))
	return res, err
}

func (rc *Recorder) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if untrackedRPC(info.FullMethod) {
		return handler(srv, ss)
	}
	start := rc.now()
	rc.inflight.Add(1)
	err := handler(srv, ss)
	rc.inflight.Add(-1)
	rc.request(keyName(ss.Context()), start, rc.now(), grpcStatus(err))
	return err
}

// Stage is the LLM pipeline's meter for model, outermost in its chain: every surface's LLM
// requests (OpenAI HTTP and RPC, the KServe bridge, Anthropic, Responses, batch lines) pass it.
// It records the model's requests, refusals (the guard's, the context length's), failures,
// cache hits, latency, time to first token and inter-token latency, and the tokens of the
// overview and of the request's key. The transports count the requests themselves (HTTP, GRPC):
// the overview's request figures come from them, so a request is not counted twice.
func (rc *Recorder) Stage(model string) pipeline.Interceptor {
	ring := rc.models.Of(model)
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			start := req.Start
			if start.IsZero() {
				start = rc.now()
			}
			resp, err := next(ctx, req)
			if err != nil || resp == nil {
				rc.failed(ring, start, err)
				return resp, err
			}
			resp.Body = &meteredBody{Body: resp.Body, rc: rc, ring: ring, key: keyName(ctx), start: start,
				stream: resp.Stream, status: resp.StatusCode}
			return resp, nil
		}
	}
}

// failed records a request its chain answered with an error.
func (rc *Recorder) failed(ring *window.Ring, start time.Time, err error) {
	now := rc.now()
	ev := window.Event{Latency: now.Sub(start)}
	code := http.StatusInternalServerError
	var pe *pipeline.Error
	switch {
	case errors.As(err, &pe):
		code = pe.Status
		if pe.Code == "context_length_exceeded" {
			ev.ContextRefused = 1
		}
	case errors.Is(err, context.Canceled):
		code = 499
	}
	classify(&ev.Counts, code)
	ring.Record(now, &ev)
}

// meteredBody measures an LLM answer as it is read: its first byte (time to first token, for a
// stream), and at Finish its latency, its tokens and the mean gap between its tokens.
type meteredBody struct {
	pipeline.Body
	rc       *Recorder
	ring     *window.Ring
	key      string
	start    time.Time
	first    time.Time
	stream   bool
	status   int
	finished bool
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.Body.Read(p)
	if n > 0 && b.stream && b.first.IsZero() { // only a stream has a first token to time
		b.first = b.rc.now()
	}
	return n, err
}

func (b *meteredBody) Finish(clientErr error) pipeline.Usage {
	u := b.Body.Finish(clientErr)
	if b.finished {
		return u
	}
	b.finished = true
	now := b.rc.now()
	ev := window.Event{Latency: now.Sub(b.start)}
	code := b.status
	if b.Body.Err() != nil {
		code = 0 // the upstream failed mid-answer
	}
	classify(&ev.Counts, code)
	ev.TokensIn, ev.TokensOut = u.PromptTokens, u.CompletionTokens
	if u.Cached {
		ev.CacheHits = 1
	}
	if b.stream && !b.first.IsZero() {
		ev.TTFT = b.first.Sub(b.start)
		out := u.CompletionTokens
		if out == 0 {
			out = u.Chunks
		}
		if out > 1 {
			ev.ITL = now.Sub(b.first) / time.Duration(out-1)
		}
	}
	b.ring.Record(now, &ev)
	// The overview and the key get the tokens and the first token's time; their requests were
	// counted by the transport.
	tok := window.Event{Counts: window.Counts{TokensIn: ev.TokensIn, TokensOut: ev.TokensOut, CacheHits: ev.CacheHits}, TTFT: ev.TTFT}
	b.rc.overview.Record(now, &tok)
	if b.key != "" {
		b.rc.keys.Of(b.key).Record(now, &tok)
	}
	return u
}
