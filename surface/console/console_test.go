package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clock is a Recorder's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestRecorder() (*Recorder, *clock) {
	c := &clock{t: time.Unix(1_800_000_000, 0)}
	rc := NewRecorder()
	rc.now = c.now
	return rc, c
}

func TestRecorderHTTP(t *testing.T) {
	rc, clk := newTestRecorder()
	// HTTP, then (as a key check would) the request's key in its context, then HTTPKey.
	var inner http.Handler
	withKey := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/nokey" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		inner.ServeHTTP(w, r.WithContext(guard.WithPrincipal(r.Context(), &guard.Principal{Name: "team-a"})))
	})
	h := rc.HTTP(withKey)
	inner = rc.HTTPKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clk.t = clk.t.Add(20 * time.Millisecond)
		switch r.URL.Path {
		case "/v1/fail":
			w.WriteHeader(http.StatusBadGateway)
		case "/v1/limited":
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			_, _ = w.Write([]byte("ok"))
		}
	}))
	for _, path := range []string{"/v1/ok", "/v1/ok", "/v1/fail", "/v1/limited", "/v1/nokey", "/console/api/state", "/metrics", "/health"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	pt := rc.overview.Total(clk.t, 60)
	assert.EqualValues(t, 5, pt.Counts.Requests, "the console, metrics and health are not traffic")
	assert.EqualValues(t, 1, pt.Counts.Errors)
	assert.EqualValues(t, 2, pt.Counts.Refused, "a rate limit and a missing key")
	assert.InDelta(t, 20, pt.Hists[0].Quantile(0.5).Seconds()*1000, 4)
	k := rc.keys.Of("team-a").Total(clk.t, windowMinutes)
	assert.EqualValues(t, 4, k.Counts.Requests, "the request without a key is no key's")
	assert.EqualValues(t, 1, k.Counts.Refused)
	assert.Zero(t, rc.inflight.Load())
}

func TestGRPCStatus(t *testing.T) {
	assert.Equal(t, http.StatusOK, grpcStatus(nil))
	assert.Equal(t, http.StatusTooManyRequests, grpcStatus(status.Error(codes.ResourceExhausted, "x")))
	assert.Equal(t, http.StatusInternalServerError, grpcStatus(status.Error(codes.Unavailable, "x")))
	assert.Equal(t, http.StatusBadRequest, grpcStatus(status.Error(codes.NotFound, "x")))
	assert.Equal(t, http.StatusInternalServerError, grpcStatus(errors.New("plain")))
	assert.Equal(t, http.StatusTooManyRequests, grpcStatus(fmt.Errorf("wrapped: %w",
		connect.NewError(connect.CodeResourceExhausted, errors.New("x")))), "a connect error, before its interceptor made it a status")
}

// TestGRPCNoAllocs: counting a native gRPC call allocates nothing, whether it succeeds or not.
func TestGRPCNoAllocs(t *testing.T) {
	rc, _ := newTestRecorder()
	ctx := guard.WithPrincipal(context.Background(), &guard.Principal{Name: "team-a"})
	info := &grpc.UnaryServerInfo{FullMethod: "/inference.GRPCInferenceService/ModelInfer"}
	refused := status.Error(codes.ResourceExhausted, "x")
	for name, err := range map[string]error{"ok": nil, "refused": refused} {
		handler := func(context.Context, any) (any, error) { return nil, err }
		allocs := testing.AllocsPerRun(100, func() { _, _ = rc.unary(ctx, nil, info, handler) })
		assert.Zero(t, allocs, name)
	}
	pt := rc.overview.Total(rc.now(), 60)
	assert.EqualValues(t, 202, pt.Counts.Requests, "AllocsPerRun's warm-up call and its 100, twice")
	assert.EqualValues(t, 101, pt.Counts.Refused)
}

func TestStage(t *testing.T) {
	rc, clk := newTestRecorder()
	var answer func() (*pipeline.Response, error)
	next := func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) { return answer() }
	h := rc.Stage("llama")(next)
	req, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"llama","stream":true}`))
	require.NoError(t, err)
	req.Start = clk.t
	ctx := guard.WithPrincipal(context.Background(), &guard.Principal{Name: "team-a"})

	// A stream: first byte after 100 ms, 11 tokens over the next second.
	answer = func() (*pipeline.Response, error) {
		return &pipeline.Response{StatusCode: 200, Stream: true, Body: &fakeBody{}}, nil
	}
	res, err := h(ctx, req)
	require.NoError(t, err)
	clk.t = clk.t.Add(100 * time.Millisecond)
	_, _ = res.Body.Read(make([]byte, 64))
	clk.t = clk.t.Add(time.Second)
	res.Body.Finish(nil)
	res.Body.Finish(nil) // once

	// A cache hit, a context-length refusal, a rate-limit refusal, an upstream failure.
	answer = func() (*pipeline.Response, error) {
		return &pipeline.Response{StatusCode: 200, Body: cachedBody{}}, nil
	}
	res, err = h(ctx, req)
	require.NoError(t, err)
	res.Body.Finish(nil)
	for _, e := range []error{
		pipeline.InvalidRequest("input_tokens", "context_length_exceeded", "too long"),
		&pipeline.Error{Status: 429, Code: "rate_limit_exceeded"},
		pipeline.ServerError(502, "upstream_unreachable", "down"),
	} {
		answer = func() (*pipeline.Response, error) { return nil, e }
		_, err = h(ctx, req)
		require.Error(t, err)
	}

	m := rc.models.Of("llama").Total(clk.t, windowMinutes)
	assert.EqualValues(t, 5, m.Counts.Requests)
	assert.EqualValues(t, 1, m.Counts.CacheHits)
	assert.EqualValues(t, 1, m.Counts.ContextRefused)
	assert.EqualValues(t, 1, m.Counts.Refused)
	assert.EqualValues(t, 1, m.Counts.Errors)
	assert.EqualValues(t, 12, m.Counts.TokensIn)
	assert.EqualValues(t, 40, m.Counts.TokensOut)
	assert.InDelta(t, 100, m.Hists[1].Quantile(0.5).Seconds()*1000, 20, "TTFT")
	assert.InDelta(t, 1000.0/39, m.Hists[2].Quantile(0.5).Seconds()*1000, 5, "ITL: a second over 39 gaps")
	o := rc.overview.Total(clk.t, 60)
	assert.Zero(t, o.Counts.Requests, "the transports count the overview's requests")
	assert.EqualValues(t, 40, o.Counts.TokensOut)
	assert.EqualValues(t, 40, rc.keys.Of("team-a").Total(clk.t, windowMinutes).Counts.TokensOut)
}

type cachedBody struct{}

func (cachedBody) Read([]byte) (int, error)    { return 0, nil }
func (cachedBody) Finish(error) pipeline.Usage { return pipeline.Usage{Status: 200, Cached: true} }
func (cachedBody) Err() error                  { return nil }

// TestHandler: the page, its assets and the state document with no sources at all; every
// answer forbids caching and loading from elsewhere.
func TestHandler(t *testing.T) {
	rc, _ := newTestRecorder()
	c := New(rc, Sources{Version: "v9", Started: time.Unix(1_800_000_000-90, 0), ConfigPath: "/etc/infergate.yaml",
		Batches: func(context.Context) ([]*batchstate.Batch, error) {
			return []*batchstate.Batch{{ID: "batch_1", Status: batchstate.InProgress, InProgressAt: 1_800_000_000 - 10,
				Counts: batchstate.Counts{Total: 100, Completed: 18, Failed: 2}}}, nil
		}})
	mux := http.NewServeMux()
	c.Mount(mux)
	for path, ctype := range map[string]string{"/console": "text/html", "/console/assets/console.js": "javascript",
		"/console/assets/console.css": "text/css", "/console/api/state": "application/json"} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, http.StatusOK, w.Code, path)
		assert.Contains(t, w.Header().Get("Content-Type"), ctype, path)
		assert.Contains(t, w.Header().Get("Content-Security-Policy"), "default-src 'none'", path)
		assert.Equal(t, "no-store", w.Header().Get("Cache-Control"), path)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/api/state", nil))
	var s State
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &s))
	assert.Equal(t, "v9", s.Version)
	assert.EqualValues(t, 90, s.Uptime)
	require.Len(t, s.Batches, 1)
	b := s.Batches[0]
	assert.InDelta(t, 2, b.Rate, 1e-9, "20 lines in 10 s")
	assert.InDelta(t, 40, b.ETA, 1e-9, "80 lines left at 2 a second")
	assert.NotNil(t, s.Upstreams)
	assert.NotNil(t, s.Keys)
}

// TestTensors: a tensor model's row has its stages as the source names them, and its mean queue
// and compute times to the microsecond (a built-in model computes in a few).
func TestTensors(t *testing.T) {
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	e := reg.Lookup("simple")
	start := time.Unix(1_800_000_000, 0)
	e.Stats.RecordSuccess(1, engines.Timing{Start: start, Queued: 1500 * time.Nanosecond, Infer: 4 * time.Microsecond}, start.Add(time.Millisecond))
	rc, _ := newTestRecorder()
	c := New(rc, Sources{Tensors: reg, TensorStages: func(e *engines.Entry) []string { return []string{"guard", e.Name()} }})
	var simple *Tensor
	tensors := c.tensors()
	for i := range tensors {
		if tensors[i].Name == "simple" {
			simple = &tensors[i]
		}
	}
	require.NotNil(t, simple)
	assert.Equal(t, []string{"guard", "simple"}, simple.Stages)
	assert.InDelta(t, 0.002, simple.QueueAvg, 1e-12)
	assert.InDelta(t, 0.004, simple.ComputeAvg, 1e-12)
}

func TestScrubURLs(t *testing.T) {
	assert.Equal(t, `Get "http://up:8000/health": dial tcp: refused`,
		scrubURLs(`Get "http://user:pw@up:8000/health?key=s3cret": dial tcp: refused`))
	assert.Equal(t, "(not shown)", safeURL("not a url"))
}
