package openai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// startWith is start with the proxy's other options (a breaker, a logger).
func startWith(tb testing.TB, opts openai.Options) *env {
	tb.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	p, err := openai.New(opts)
	require.NoError(tb, err)
	p.Start(context.Background())
	tb.Cleanup(p.Close)
	srv := gatewaytest.Start(tb, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	srv.Gateway.Metrics().MustRegister(p.Collectors()...)
	return &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}}
}

// openAIError decodes an OpenAI error object, requiring every field of its shape.
func openAIError(t *testing.T, body string) (typ, code, msg string) {
	t.Helper()
	var e struct {
		Error map[string]any `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	for _, k := range []string{"message", "type", "param", "code"} {
		require.Contains(t, e.Error, k, body)
	}
	typ, _ = e.Error["type"].(string)
	code, _ = e.Error["code"].(string)
	msg, _ = e.Error["message"].(string)
	return typ, code, msg
}

// retryAfterSeconds reads a Retry-After in whole seconds, failing the test when it is not one.
func retryAfterSeconds(t *testing.T, v string) int {
	t.Helper()
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "Retry-After %q is not whole seconds", v)
	return n
}

// TestAllBreakersOpenAnswersCircuitOpen: once every endpoint serving a model has had its
// breaker opened by failures, the answer says so (503 upstream_circuit_open, naming the model)
// and says when to retry: when the soonest breaker lets a probe through. Every surface.
func TestAllBreakersOpenAnswersCircuitOpen(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	const openFor = 40 * time.Second
	br := breaker.NewLocal(breaker.Options{Settings: breaker.Settings{ConsecutiveFailures: 2, ErrorRate: -1, OpenTimeout: openFor}})
	e := startWith(t, openai.Options{Breaker: br, Endpoints: []upstream.Endpoint{openaitest.SlowChecks(a.Endpoint(100)), openaitest.SlowChecks(b.Endpoint(50))}})

	a.FailWith(http.StatusInternalServerError)
	b.FailWith(http.StatusInternalServerError)
	for range 2 {
		res, _ := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
		require.Equal(t, http.StatusInternalServerError, res.StatusCode, "a fails over to b, whose 500 is the answer")
	}
	require.Eventually(t, func() bool { return br.State("a") == breaker.Open && br.State("b") == breaker.Open },
		5*time.Second, 5*time.Millisecond)
	before := a.Requests() + b.Requests()

	res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, body)
	typ, code, msg := openAIError(t, body)
	assert.Equal(t, "server_error", typ)
	assert.Equal(t, "upstream_circuit_open", code)
	assert.Contains(t, msg, "`llama`", "the message names the model")
	secs := retryAfterSeconds(t, res.Header.Get("Retry-After"))
	assert.GreaterOrEqual(t, secs, 1)
	assert.LessOrEqual(t, secs, int(openFor/time.Second), "when the first breaker lets a probe through")
	assert.Equal(t, before, a.Requests()+b.Requests(), "nothing reached the upstreams")

	// The OpenAI SDK sees the same error object.
	c := e.sdk()
	_, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
		Model: "llama", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	var apiErr *oai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	assert.Equal(t, http.StatusServiceUnavailable, apiErr.StatusCode)
	assert.Equal(t, "upstream_circuit_open", apiErr.Code)
	assert.NotEmpty(t, apiErr.Response.Header.Get("Retry-After"))

	// gRPC and Connect: UNAVAILABLE with the same error object, and retry-after metadata (a
	// trailer for gRPC, a response header for Connect).
	for _, c := range rpcClients(t, e) {
		t.Run(c.name, func(t *testing.T) {
			var err error
			var ra string
			if c.g != nil {
				var trailer metadata.MD
				_, err = c.g.CreateChatCompletion(context.Background(), hi("llama"), grpc.Trailer(&trailer))
				if v := trailer.Get("retry-after"); len(v) > 0 {
					ra = v[0]
				}
			} else {
				_, err = c.c.CreateChatCompletion(context.Background(), hi("llama"))
				var ce *connect.Error
				require.True(t, errors.As(err, &ce), "%v", err)
				ra = ce.Meta().Get("Retry-After")
			}
			require.Equal(t, connect.CodeUnavailable.String(), codeOf(err).String(), "%v", err)
			d := detailOf(t, err)
			assert.Equal(t, "upstream_circuit_open", d.GetCode())
			assert.Equal(t, "server_error", d.GetType())
			n := retryAfterSeconds(t, ra)
			assert.GreaterOrEqual(t, n, 1)
			assert.LessOrEqual(t, n, int(openFor/time.Second))
		})
	}
}

// TestCoolingDownAnswersCircuitOpen: an endpoint cooling down after a 429 is cut off too; the
// answer's Retry-After is the cooldown's rest.
func TestCoolingDownAnswersCircuitOpen(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	br := breaker.NewLocal(breaker.Options{Settings: breaker.Settings{Cooldown: 7 * time.Second}})
	e := startWith(t, openai.Options{Breaker: br, Endpoints: []upstream.Endpoint{openaitest.SlowChecks(a.Endpoint(0))}})
	a.FailWith(http.StatusTooManyRequests)
	res, _ := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "the upstream's 429 is the answer")
	res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, body)
	_, code, _ := openAIError(t, body)
	assert.Equal(t, "upstream_circuit_open", code)
	assert.Equal(t, "7", res.Header.Get("Retry-After"), "the rest of a 7 s cooldown, rounded up")
}

// TestNoHealthyUpstreamHasRetryAfter: endpoints out of rotation for failing health checks (not
// for their breakers) answer no_healthy_upstream, with a Retry-After of the check interval.
func TestNoHealthyUpstreamHasRetryAfter(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	e := startWith(t, openai.Options{Breaker: breaker.NewLocal(breaker.Options{}),
		Endpoints: []upstream.Endpoint{a.Endpoint(0), b.Endpoint(0)}})
	e.servedBy(t, "llama") // the models are known
	a.SetHealthy(false)
	b.SetHealthy(false)
	require.Eventually(t, func() bool {
		res, _ := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
		return res.StatusCode == http.StatusServiceUnavailable
	}, 10*time.Second, 10*time.Millisecond)
	res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, body)
	typ, code, msg := openAIError(t, body)
	assert.Equal(t, "server_error", typ)
	assert.Equal(t, "no_healthy_upstream", code, "down for their health checks, not their breakers")
	assert.Contains(t, msg, "`llama`")
	assert.Equal(t, "1", res.Header.Get("Retry-After"), "the next health check (20 ms, rounded up)")
}

// requests499 is the proxy's count of requests for model that ended with the client gone.
func requests499(t *testing.T, e *env, model string) int {
	t.Helper()
	_, m := e.Get(t, "/metrics")
	re := regexp.MustCompile(`infergate_openai_requests_total\{code="499",endpoint="[^"]*",model="` + model + `"\} (\d+)`)
	n := 0
	for _, s := range re.FindAllStringSubmatch(m, -1) {
		v, err := strconv.Atoi(s[1])
		require.NoError(t, err)
		n += v
	}
	return n
}

// TestClientCancelIsNotAnUpstreamFailure: clients that disconnect or cancel, before the
// upstream answered or in the middle of a stream, over HTTP, gRPC and Connect, are never counted
// as failures of the upstream: with a breaker that opens on 3 consecutive failures, 10 and more
// of them leave it closed and the next request is served.
func TestClientCancelIsNotAnUpstreamFailure(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	br := breaker.NewLocal(breaker.Options{Settings: breaker.Settings{ConsecutiveFailures: 3, ErrorRate: -1, OpenTimeout: time.Hour}})
	e := startWith(t, openai.Options{Breaker: br, Endpoints: []upstream.Endpoint{openaitest.SlowChecks(a.Endpoint(0))}})
	canceled := 0
	// gone counts one more cancelled request, waits until the gateway has ended it (its
	// outcome reported to the breaker: the 499 is counted after it) and checks the breaker.
	gone := func(what string) {
		t.Helper()
		canceled++
		require.Eventually(t, func() bool { return requests499(t, e, "llama") == canceled }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, breaker.Closed, br.State("a"), "after %d cancelled requests, the last %s", canceled, what)
	}

	// HTTP clients that disconnect before the upstream answered.
	release := a.Hold()
	for range 4 {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/chat/completions", strings.NewReader(openaitest.ChatBody("llama")))
		require.NoError(t, err)
		drainStarted(a)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
		}()
		waitStarted(t, a)
		cancel()
		<-done
		// The upstream saw it cancelled before it is let go (it would answer it otherwise).
		require.Eventually(t, func() bool { return a.Canceled() == int64(canceled+1) }, 10*time.Second, 5*time.Millisecond)
		gone("an HTTP client gone before the upstream answered")
	}
	release()

	// HTTP clients that disconnect mid-stream.
	a.SetStream(1000, 20*time.Millisecond)
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"llama","stream":true}`))
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		line, err := bufio.NewReader(res.Body).ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(line, "data: "), line)
		cancel()
		res.Body.Close()
		gone("an HTTP client gone mid-stream")
	}

	// gRPC and Connect callers that cancel mid-stream and before the upstream answered.
	for _, c := range rpcClients(t, e) {
		ctx, cancel := context.WithCancel(context.Background())
		next := c.openChat(ctx, hi("llama"))
		_, err := next()
		require.NoError(t, err, c.name)
		cancel()
		gone(c.name + " cancelling mid-stream")

		release := a.Hold()
		ctx, cancel = context.WithCancel(context.Background())
		drainStarted(a)
		errc := make(chan error, 1)
		go func() {
			_, err := c.chat(ctx, hi("llama"))
			errc <- err
		}()
		waitStarted(t, a)
		before := a.Canceled()
		cancel()
		require.Equal(t, connect.CodeCanceled.String(), codeOf(<-errc).String(), c.name)
		require.Eventually(t, func() bool { return a.Canceled() > before }, 10*time.Second, 5*time.Millisecond)
		release()
		gone(c.name + " cancelling before the upstream answered")
	}
	require.GreaterOrEqual(t, canceled, 10)
	require.Eventually(t, func() bool { return a.InFlight() == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, breaker.Closed, br.State("a"), "%d cancelled requests are no upstream failures", canceled)
	a.SetStream(4, 0)
	assert.Equal(t, "a", e.servedBy(t, "llama"), "and the next request is served")

	// The control: the same breaker does open on 3 real failures, so the above could have.
	a.FailWith(http.StatusInternalServerError)
	for range 3 {
		res, _ := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
		require.Equal(t, http.StatusInternalServerError, res.StatusCode)
	}
	require.Eventually(t, func() bool { return br.State("a") == breaker.Open }, 5*time.Second, 5*time.Millisecond)
	res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode, body)
}

// drainStarted forgets the fake's signals of the POSTs it received so far.
func drainStarted(u *openaitest.Upstream) {
	for len(u.Started()) > 0 {
		<-u.Started()
	}
}

// waitStarted waits until a POST reached the fake's handler (call drainStarted before sending).
func waitStarted(t *testing.T, u *openaitest.Upstream) {
	t.Helper()
	select {
	case <-u.Started():
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the upstream")
	}
}

// TestMidResponseFailuresLogThrottled: an upstream that cuts every stream short is reported
// once per interval, not once per request.
func TestMidResponseFailuresLogThrottled(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	a.SetStream(10, 0)
	a.DieAfter(2)
	var logs logtest.Sink
	e := startWith(t, openai.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Endpoints: []upstream.Endpoint{openaitest.SlowChecks(a.Endpoint(0))}})
	const n = 8
	for range n {
		res, err := http.Post(e.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true}`))
		require.NoError(t, err)
		_, _ = bufio.NewReader(res.Body).WriteTo(&bytes.Buffer{})
		res.Body.Close()
	}
	require.Eventually(t, func() bool { return a.InFlight() == 0 }, 10*time.Second, 5*time.Millisecond)
	got := strings.Count(logs.String(), `msg="upstream failed mid-response"`)
	assert.GreaterOrEqual(t, got, 1, "the failure is reported")
	// One line per 10 s interval: 2 only on a machine slow enough to span two of them.
	assert.LessOrEqual(t, got, 2, "%d failed responses, %d lines:\n%s", n, got, logs.String())
}
