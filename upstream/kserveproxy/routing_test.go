package kserveproxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/store/breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestFailoverStoppedEndpoint: an endpoint that died since its last health check costs the request
// nothing: it fails over to the next endpoint, and the dead one leaves rotation at once.
func TestFailoverStoppedEndpoint(t *testing.T) {
	a, b := startUpstream(t), startUpstream(t)
	f := startFront(t, fast(slowChecks(ep("a", a.Addr, 10)), slowChecks(ep("b", b.Addr, 0))))
	ctx := context.Background()

	res, err := f.client.ModelInfer(ctx, simpleRequest("simple", ""))
	require.NoError(t, err)
	checkSimple(t, res)
	require.Equal(t, uint64(1), inferences(a.Registry, "simple"), "the higher tier serves while healthy")

	require.NoError(t, a.Stop(5*time.Second))
	require.True(t, f.status("a").Healthy, "no health check ran since")
	res, err = f.client.ModelInfer(ctx, simpleRequest("simple", ""))
	require.NoError(t, err)
	checkSimple(t, res)
	assert.Equal(t, uint64(1), inferences(b.Registry, "simple"), "failed over to b")
	assert.False(t, f.status("a").Healthy, "a connection failure takes the endpoint out at once")

	// Decoupled models fail over the same way.
	got, err := stream(ctx, t, f.client, repeatRequest("r", []int32{1, 2}))
	require.NoError(t, err)
	require.Len(t, got, 2)
	// The upstream counts a stream once its final response is out: possibly after the proxy
	// passed that response on and the client read it (50 ms put before the count fails an
	// immediate check every time).
	assert.Eventually(t, func() bool { return b.Registry.Lookup("repeat_int32").Stats.Success.Count() == 1 },
		5*time.Second, time.Millisecond, "b served the stream")
}

// TestFailoverUnavailable: an endpoint answering UNAVAILABLE hands the request to the next one
// and stays in rotation (its connection is fine); the last endpoint's UNAVAILABLE is the answer.
func TestFailoverUnavailable(t *testing.T) {
	unavailable := func(context.Context, *engines.Request, func(*engines.Response) error) error {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("model 'flaky' is warming up"))
	}
	a := startUpstream(t, &testModel{name: "flaky", exec: unavailable})
	b := startUpstream(t, &testModel{name: "flaky", exec: echo})
	f := startFront(t, fast(slowChecks(ep("a", a.Addr, 10)), slowChecks(ep("b", b.Addr, 0))))
	ctx := context.Background()
	f.waitModel(t, "flaky")

	res, err := f.client.ModelInfer(ctx, testRequest("flaky", 7, 8))
	require.NoError(t, err)
	assert.Equal(t, []int32{7, 8}, int32s(res.RawOutputContents[0]))
	assert.Equal(t, uint64(1), inferences(b.Registry, "flaky"))
	assert.Equal(t, uint64(1), a.Registry.Lookup("flaky").Stats.Fail.Count(), "a was tried first")
	assert.True(t, f.status("a").Healthy, "a server's UNAVAILABLE does not take a live connection out")
	assert.Equal(t, 1.0, metric(t, f, `infergate_kserve_upstream_requests_total{code="ok",endpoint="b",model="flaky"}`))

	// Only a is left: its UNAVAILABLE passes through, code and message.
	require.True(t, f.proxy.Remove("b"))
	_, err = f.client.ModelInfer(ctx, testRequest("flaky", 1))
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, "model 'flaky' is warming up", status.Convert(err).Message())

	assert.Equal(t, 2.0, metric(t, f, `infergate_kserve_upstream_requests_total{code="unavailable",endpoint="a",model="flaky"}`))
	assert.Equal(t, 1.0, metric(t, f, `infergate_kserve_upstream_healthy{endpoint="a"}`))
	assert.Equal(t, -1.0, metric(t, f, `infergate_kserve_upstream_healthy{endpoint="b"}`), "a removed endpoint leaves the gauge")
	assert.Equal(t, -1.0, metric(t, f, `infergate_kserve_upstream_requests_total{code="ok",endpoint="b",model="flaky"}`),
		"and its other series: registered endpoints come and go, their series must not pile up")
	assert.Equal(t, -1.0, metric(t, f, `infergate_kserve_upstream_request_duration_seconds_count{endpoint="b",model="flaky"}`))
	assert.Equal(t, 0.0, metric(t, f, `infergate_kserve_upstream_in_flight_requests{endpoint="a",model="flaky"}`))
}

// TestNoRetryAfterRelay: once a decoupled model's response reached the client, an UNAVAILABLE is
// the client's answer; the request is not run again elsewhere.
func TestNoRetryAfterRelay(t *testing.T) {
	half := func(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
		if err := echo(nil, req, send); err != nil {
			return err
		}
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("lost the GPU"))
	}
	a := startUpstream(t, &testModel{name: "gen", decoupled: true, exec: half})
	b := startUpstream(t, &testModel{name: "gen", decoupled: true, exec: echo})
	f := startFront(t, fast(slowChecks(ep("a", a.Addr, 10)), slowChecks(ep("b", b.Addr, 0))))
	f.waitModel(t, "gen")

	got, err := stream(context.Background(), t, f.client, testRequest("gen", 3))
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, []int32{3}, int32s(got[0].InferResponse.RawOutputContents[0]))
	assert.Equal(t, "lost the GPU", got[1].ErrorMessage)
	assert.Zero(t, b.Registry.Lookup("gen").Stats.Success.Count()+b.Registry.Lookup("gen").Stats.Fail.Count(), "b never saw the request")
}

// TestPriorityTiersAndRecovery: the higher tier serves while healthy, the lower one while it is
// down, and the higher one again once its health checks pass.
func TestPriorityTiersAndRecovery(t *testing.T) {
	a, b := startUpstream(t), startUpstream(t)
	f := startFront(t, fast(ep("a", a.Addr, 10), ep("b", b.Addr, 0)))
	ctx := context.Background()
	infer := func() {
		t.Helper()
		res, err := f.client.ModelInfer(ctx, simpleRequest("simple", ""))
		require.NoError(t, err)
		checkSimple(t, res)
	}
	for range 5 {
		infer()
	}
	assert.Equal(t, uint64(5), inferences(a.Registry, "simple"))
	assert.Zero(t, inferences(b.Registry, "simple"))

	addr := a.Addr
	require.NoError(t, a.Stop(5*time.Second))
	require.Eventually(t, func() bool { return !f.status("a").Healthy }, 10*time.Second, 10*time.Millisecond)
	for range 5 {
		infer()
	}
	assert.Equal(t, uint64(5), inferences(b.Registry, "simple"))
	assert.Contains(t, f.proxy.Models(), "simple", "a down endpoint's models stay: b serves them")

	a2 := restartAt(t, addr)
	require.Eventually(t, func() bool { return f.status("a").Healthy }, 10*time.Second, 10*time.Millisecond)
	for range 5 {
		infer()
	}
	assert.Equal(t, uint64(5), inferences(a2.Registry, "simple"), "a recovered and serves again")
	assert.Equal(t, uint64(5), inferences(b.Registry, "simple"))
}

// TestLeastOutstanding: inside a tier the endpoint with fewer requests running gets the next one;
// with none running, equal endpoints share the work.
func TestLeastOutstanding(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	gate := func(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return echo(ctx, req, send)
	}
	a := startUpstream(t, &testModel{name: "gate", exec: gate})
	b := startUpstream(t, &testModel{name: "gate", exec: gate})
	f := startFront(t, fast(ep("a", a.Addr, 0), ep("b", b.Addr, 0)))
	ctx := context.Background()
	f.waitModel(t, "gate")

	for range 10 {
		_, err := f.client.ModelInfer(ctx, simpleRequest("simple", ""))
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(5), inferences(a.Registry, "simple"), "ties rotate")
	assert.Equal(t, uint64(5), inferences(b.Registry, "simple"))

	// A request held on one endpoint: every following request goes to the other.
	done := make(chan error, 1)
	go func() {
		_, err := f.client.ModelInfer(ctx, testRequest("gate", 1))
		done <- err
	}()
	require.Eventually(t, func() bool { return f.status("a").Outstanding+f.status("b").Outstanding == 1 }, 10*time.Second, time.Millisecond)
	busy, idle := a, b
	if f.status("b").Outstanding == 1 {
		busy, idle = b, a
	}
	for range 6 {
		_, err := f.client.ModelInfer(ctx, simpleRequest("simple", ""))
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(11), inferences(idle.Registry, "simple"), "the idle endpoint got all six")
	assert.Equal(t, uint64(5), inferences(busy.Registry, "simple"), "the busy one none")
	once.Do(func() { close(release) })
	require.NoError(t, <-done)
}

// TestCancelReachesUpstream: a client that gives up cancels the upstream call, unary and streamed.
func TestCancelReachesUpstream(t *testing.T) {
	started, canceled := make(chan struct{}, 1), make(chan error, 1)
	hold := func(ctx context.Context, _ *engines.Request, _ func(*engines.Response) error) error {
		started <- struct{}{}
		<-ctx.Done()
		canceled <- ctx.Err()
		return ctx.Err()
	}
	up := startUpstream(t, &testModel{name: "hold", exec: hold})
	f := startFront(t, fast(ep("triton", up.Addr, 0)))
	f.waitModel(t, "hold")

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := f.client.ModelInfer(ctx, testRequest("hold", 1))
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never got the request")
	}
	cancel()
	assert.Equal(t, codes.Canceled, status.Code(<-errc))
	select {
	case err := <-canceled:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream call was not cancelled")
	}
	require.Eventually(t, func() bool { return f.status("triton").Outstanding == 0 }, 10*time.Second, time.Millisecond)

	// repeat_int32: the first response arrives, the second would take an hour; the client
	// cancels after the first and the upstream's execution ends (it counts a failure).
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	s, err := f.client.ModelStreamInfer(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Send(repeatRequest("r", []int32{1, 2}, 0, 3_600_000)))
	m, err := s.Recv()
	require.NoError(t, err)
	assert.Equal(t, []int32{1}, int32s(m.InferResponse.RawOutputContents[0]))
	cancel()
	require.Eventually(t, func() bool { return up.Registry.Lookup("repeat_int32").Stats.Fail.Count() == 1 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return f.status("triton").Outstanding == 0 }, 10*time.Second, time.Millisecond)
}

// TestSequencesStickToTheirEndpoint: every request of a sequence reaches the endpoint its START
// went to (the upstream holds the sequence), while sequences themselves spread over the tier.
func TestSequencesStickToTheirEndpoint(t *testing.T) {
	a, b := startUpstream(t), startUpstream(t)
	f := startFront(t, fast(ep("a", a.Addr, 0), ep("b", b.Addr, 0)))
	ctx := context.Background()
	seqReq := func(id uint64, v int32, start, end bool) *inference.ModelInferRequest {
		r := testRequest("simple_sequence", v)
		r.Inputs[0].Shape = []int64{1, 1}
		r.Parameters = map[string]*inference.InferParameter{"sequence_id": {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: int64(id)}}}
		if start {
			r.Parameters["sequence_start"] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}
		}
		if end {
			r.Parameters["sequence_end"] = &inference.InferParameter{ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}
		}
		return r
	}
	const seqs, steps = 6, 5
	for s := range uint64(seqs) {
		for i := range steps {
			res, err := f.client.ModelInfer(ctx, seqReq(1000+s, int32(10*i), i == 0, i == steps-1))
			require.NoError(t, err, "sequence %d step %d", s, i)
			want := int32(10 * i) // OUTPUT = INPUT + START
			if i == 0 {
				want++
			}
			assert.Equal(t, []int32{want}, int32s(res.RawOutputContents[0]))
		}
	}
	na, nb := inferences(a.Registry, "simple_sequence"), inferences(b.Registry, "simple_sequence")
	assert.Equal(t, uint64(seqs*steps), na+nb)
	assert.NotZero(t, na, "sequences spread over the tier")
	assert.NotZero(t, nb, "sequences spread over the tier")
	assert.Zero(t, na%steps, "whole sequences per endpoint")
}

// metric reads one sample from the front's /metrics, over HTTP; -1 when absent.
func metric(t *testing.T, f *front, sample string) float64 {
	t.Helper()
	res, err := http.Get(f.URL + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			x, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return x
		}
	}
	return -1
}

// TestBreakerSkipsFailingEndpoint: an endpoint whose model keeps failing with INTERNAL is cut off
// by the breaker after the configured failures; validation-like errors (the endpoint answered)
// are not failures.
func TestBreakerSkipsFailingEndpoint(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	flaky := func(ctx context.Context, r *engines.Request, send func(*engines.Response) error) error {
		if failing.Load() {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("GPU fell off the bus"))
		}
		return echo(ctx, r, send)
	}
	a := startUpstream(t, &testModel{name: "m", exec: flaky})
	b := startUpstream(t, &testModel{name: "m", exec: echo})
	br := breaker.NewLocal(breaker.Options{Settings: breaker.Settings{ConsecutiveFailures: 2, ErrorRate: -1, OpenTimeout: time.Hour}})
	opts := fast(slowChecks(ep("a", a.Addr, 10)), slowChecks(ep("b", b.Addr, 0)))
	opts.Breaker = br
	f := startFront(t, opts)
	f.waitModel(t, "m")
	ctx := context.Background()
	for range 2 {
		_, err := f.client.ModelInfer(ctx, testRequest("m", 1))
		assert.Equal(t, codes.Internal, status.Code(err), "an INTERNAL answer is the client's: not retried")
	}
	assert.Equal(t, breaker.Open, br.State("a"))
	for range 3 {
		res, err := f.client.ModelInfer(ctx, testRequest("m", 5))
		require.NoError(t, err, "a is cut off: b serves")
		assert.Equal(t, []int32{5}, int32s(res.RawOutputContents[0]))
	}
	assert.Equal(t, uint64(2), a.Registry.Lookup("m").Stats.Fail.Count(), "nothing more reached a")
	assert.Equal(t, uint64(3), inferences(b.Registry, "m"))
}
