package openai_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

func TestFailoverEndpointDownBeforeRequest(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(100)), openaitest.SlowChecks(b.Endpoint(50)))
	require.Equal(t, "a", e.servedBy(t, "llama"))
	a.Stop() // health checks will not notice for an hour: the request finds out
	assert.Equal(t, "b", e.servedBy(t, "llama"), "connection refused on a, retried on b")
	assert.Equal(t, "b", e.servedBy(t, "llama"), "a is out of rotation after the failure")
}

func TestFailoverOn503(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(100)), openaitest.SlowChecks(b.Endpoint(50)))
	a.FailWith(http.StatusServiceUnavailable)
	assert.Equal(t, "b", e.servedBy(t, "llama"))
	assert.EqualValues(t, 1, a.Requests())

	// When every endpoint answers 5xx, the last answer goes to the client unchanged.
	b.FailWith(http.StatusInternalServerError)
	res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	assert.Equal(t, http.StatusInternalServerError, res.StatusCode)
	assert.Equal(t, "b", res.Header.Get(openai.HeaderEndpoint))
	assert.Contains(t, body, "injected failure from b")
}

func TestPriorityTiersAndHealthRecovery(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	e := start(t, a.Endpoint(100), b.Endpoint(50))
	for range 5 {
		require.Equal(t, "a", e.servedBy(t, "llama"), "the lower tier is not used while the higher is healthy")
	}
	a.SetHealthy(false)
	require.Eventually(t, func() bool { return e.servedBy(t, "llama") == "b" }, 10*time.Second, 10*time.Millisecond)
	a.SetHealthy(true)
	require.Eventually(t, func() bool { return e.servedBy(t, "llama") == "a" }, 10*time.Second, 10*time.Millisecond,
		"a recovered endpoint is used again")

	// A stopped and restarted server recovers the same way.
	a.Stop()
	require.Eventually(t, func() bool { return e.servedBy(t, "llama") == "b" }, 10*time.Second, 10*time.Millisecond)
	a.Restart(t)
	require.Eventually(t, func() bool { return e.servedBy(t, "llama") == "a" }, 10*time.Second, 10*time.Millisecond)
}

func TestLeastOutstandingInsideATier(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(10)), openaitest.SlowChecks(b.Endpoint(10)))
	releaseA, releaseB := a.Hold(), b.Hold()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama")) })
		// Wait for this request to reach an upstream before sending the next, so each pick sees
		// the previous ones outstanding.
		select {
		case <-a.Started():
		case <-b.Started():
		case <-time.After(10 * time.Second):
			t.Fatal("request did not reach an upstream")
		}
	}
	assert.EqualValues(t, 2, a.InFlight(), "least-outstanding spreads held requests evenly")
	assert.EqualValues(t, 2, b.InFlight())
	releaseA()
	releaseB()
	wg.Wait()
}

func TestGatewayErrors(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"malformed", `{"model":"llama",`, 400, "invalid_json"},
		{"not an object", `["llama"]`, 400, "invalid_json"},
		{"model not a string", `{"model":7}`, 400, "invalid_json"},
		{"missing model", `{"messages":[]}`, 400, "missing_required_parameter"},
		{"unknown model", openaitest.ChatBody("gpt-5"), 404, "model_not_found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := e.Post(t, "/v1/chat/completions", tc.body)
			assert.Equal(t, tc.status, res.StatusCode, body)
			assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
			assert.Contains(t, body, `"code":"`+tc.code+`"`)
			assert.Contains(t, body, `"type":"invalid_request_error"`)
		})
	}
	res, body := e.Get(t, "/v1/nothing")
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Contains(t, body, `"code":"unknown_url"`)

	a.Stop() // still marked healthy: the request is what fails
	res, body = e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	assert.Equal(t, http.StatusBadGateway, res.StatusCode, body)
	assert.Contains(t, body, `"code":"upstream_unreachable"`)
	res, body = e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	assert.Equal(t, http.StatusServiceUnavailable, res.StatusCode, body)
	assert.Contains(t, body, `"code":"no_healthy_upstream"`)
	res, body = e.Get(t, "/health")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, body, `"status":"degraded"`)
}

// TestBodyForwardedUnchanged: the upstream receives the client's bytes exactly, vLLM's extra
// parameters and odd formatting included; an alias changes only the model's value.
func TestBodyForwardedUnchanged(t *testing.T) {
	a := openaitest.Start(t, "a", "meta-llama/Llama-3.1-8B-Instruct")
	epA := a.Endpoint(0)
	epA.Aliases = map[string]string{"llama": "meta-llama/Llama-3.1-8B-Instruct"}
	e := start(t, epA)
	body := `{ "messages" : [{"role":"user","content":"caf\u00e9 \"q\""}],
  "model":"meta-llama/Llama-3.1-8B-Instruct", "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
  "guided_json": {"type":"object","properties":{"r":{"type":"integer"}}},
  "chat_template_kwargs": {"enable_thinking": false}, "x_unknown": [1e3, null, true],
  "stream": false }`
	res, out := e.Post(t, "/v1/chat/completions", body)
	require.Equal(t, http.StatusOK, res.StatusCode, out)
	assert.Equal(t, body, string(a.LastBody()), "byte-identical")

	aliased := strings.Replace(body, `"meta-llama/Llama-3.1-8B-Instruct"`, `"llama"`, 1)
	res, out = e.Post(t, "/v1/chat/completions", aliased)
	require.Equal(t, http.StatusOK, res.StatusCode, out)
	assert.Equal(t, body, string(a.LastBody()), "only the model value was replaced")
}

func TestHeaders(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	t.Setenv("INFERGATE_TEST_KEY", "s3cret")
	epA := a.Endpoint(0)
	epA.Headers = map[string]string{"Authorization": "Bearer ${INFERGATE_TEST_KEY}", "X-Tenant": "t1"}
	e := start(t, epA)

	res, _ := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"), "Authorization", "Bearer client", "X-Custom", "kept")
	id := res.Header.Get(openai.HeaderRequestID)
	assert.Len(t, id, 32, "generated when absent")
	up := a.LastHeader()
	assert.Equal(t, id, up.Get(openai.HeaderRequestID), "and forwarded")
	assert.Equal(t, "127.0.0.1", up.Get("X-Forwarded-For"))
	assert.Equal(t, "Bearer s3cret", up.Get("Authorization"), "endpoint headers win, ${ENV} expanded")
	assert.Equal(t, "t1", up.Get("X-Tenant"))
	assert.Equal(t, "kept", up.Get("X-Custom"))
	assert.Equal(t, "a", res.Header.Get(openai.HeaderEndpoint))
	assert.Equal(t, "llama", res.Header.Get(openai.HeaderModel))
	assert.Equal(t, "vllm", res.Header.Get(openai.HeaderBackendType))
	took := res.Header.Get(openai.HeaderResponseTime)
	_, err := time.ParseDuration(took)
	assert.NoError(t, err)
	assert.Regexp(t, `^[0-9.]+(ns|us|ms|s|m[0-9.]+s)$`, took, "an ASCII Go duration")

	res, _ = e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"), "X-Request-Id", "mine-1", "X-Forwarded-For", "10.0.0.9")
	assert.Equal(t, "mine-1", res.Header.Get(openai.HeaderRequestID))
	assert.Equal(t, "mine-1", a.LastHeader().Get(openai.HeaderRequestID))
	assert.Equal(t, "10.0.0.9, 127.0.0.1", a.LastHeader().Get("X-Forwarded-For"))
}

// TestHopHeaders: connection-scoped headers and those the client's Connection header names never
// reach the upstream, whose request carries one Content-Length, the body's; Accept-Encoding is
// identity unless the client chose one; the query string goes along.
func TestHopHeaders(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, a.Endpoint(0))

	req, err := http.NewRequest(http.MethodPost, e.URL+"/v1/chat/completions?api-version=1", strings.NewReader(openaitest.ChatBody("llama")))
	require.NoError(t, err)
	for _, kv := range [][2]string{{"Connection", "X-Hop"}, {"X-Hop", "secret"}, {"Keep-Alive", "timeout=5"},
		{"Proxy-Authorization", "Basic x"}, {"X-Kept", "yes"}} {
		req.Header.Set(kv[0], kv[1])
	}
	// Go's default client would ask for gzip on its own.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	res, err := client.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	up := a.LastHeader()
	for _, k := range []string{"Connection", "X-Hop", "Keep-Alive", "Proxy-Authorization"} {
		assert.Empty(t, up.Values(k), k)
	}
	assert.Equal(t, "yes", up.Get("X-Kept"))
	assert.Equal(t, "identity", up.Get("Accept-Encoding"))
	assert.Equal(t, []string{strconv.Itoa(len(openaitest.ChatBody("llama")))}, up.Values("Content-Length"))
	assert.Equal(t, "api-version=1", a.LastQuery())

	res, out := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"), "Accept-Encoding", "br")
	require.Equal(t, http.StatusOK, res.StatusCode, out)
	assert.Equal(t, "br", a.LastHeader().Get("Accept-Encoding"))
	assert.Empty(t, a.LastQuery())
}

// TestClientDisconnectCancelsUpstream: a client going away mid-stream cancels the upstream request.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	a.SetStream(1000, 20*time.Millisecond)
	e := start(t, a.Endpoint(0))
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
	require.Eventually(t, func() bool { return a.Canceled() == 1 }, 10*time.Second, 5*time.Millisecond,
		"the upstream saw its request cancelled")
}

// TestStreamDrainsOnShutdown: a stream in flight when the gateway starts draining completes.
func TestStreamDrainsOnShutdown(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	a.SetStream(20, 10*time.Millisecond)
	e := start(t, a.Endpoint(0))
	res, err := http.Post(e.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama","stream":true}`))
	require.NoError(t, err)
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	_, err = r.ReadString('\n')
	require.NoError(t, err)
	stopped := make(chan error, 1)
	go func() { stopped <- e.srv.Stop(10 * time.Second) }()
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(rest), "data: [DONE]\n\n"), "the stream finished")
	assert.Equal(t, 20, strings.Count(string(rest), `"content":"tok`)+1)
	require.NoError(t, <-stopped, "drained cleanly")
}

func TestMetrics(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, a.Endpoint(0))
	e.servedBy(t, "llama")
	res, _ := e.Post(t, "/v1/chat/completions", `{"model":"llama","stream":true,"stream_options":{"include_usage":true}}`)
	require.Equal(t, http.StatusOK, res.StatusCode)
	e.Post(t, "/v1/chat/completions", openaitest.ChatBody("unknown"))
	_, m := e.Get(t, "/metrics")
	for _, want := range []string{
		`infergate_openai_requests_total{code="200",endpoint="a",model="llama"} 2`,
		`infergate_openai_requests_total{code="404",endpoint="",model=""} 1`,
		`infergate_openai_request_duration_seconds_count{endpoint="a",model="llama"} 2`,
		`infergate_openai_time_to_first_token_seconds_count{endpoint="a",model="llama"} 1`,
		`infergate_openai_in_flight_requests{endpoint="a",model="llama"} 0`,
		// Both requests report usage: the plain one in its body, the stream in its usage chunk.
		`infergate_openai_tokens_total{direction="in",endpoint="a",model="llama"} 14`,
		`infergate_openai_tokens_total{direction="out",endpoint="a",model="llama"} 8`,
		// 4 content chunks, the finish chunk, the usage chunk and [DONE] arrive in up to 7 reads.
		`infergate_openai_inter_token_latency_seconds_count{endpoint="a",model="llama"}`,
	} {
		assert.Contains(t, m, want)
	}
	require.Eventually(t, func() bool {
		_, m := e.Get(t, "/metrics")
		return strings.Contains(m, `infergate_openai_upstream_healthy{endpoint="a",type="vllm"} 1`)
	}, 5*time.Second, 50*time.Millisecond)
	res, body := e.Get(t, "/health")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, body, fmt.Sprintf(`{"name":"a","type":"vllm","priority":0,"healthy":true`))
}

// TestBreakerSkipsFailingEndpoint: with a circuit breaker, an endpoint answering 5xx is cut off
// after the configured failures (its requests failed over meanwhile), gets one probe after the
// open timeout and serves again once it succeeds; a 429 cools it down without a failure.
func TestBreakerSkipsFailingEndpoint(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	br := breaker.NewLocal(breaker.Options{Settings: breaker.Settings{ConsecutiveFailures: 2, ErrorRate: -1,
		OpenTimeout: 300 * time.Millisecond, Cooldown: time.Hour}})
	p, err := openai.New(openai.Options{Logger: quiet(), Breaker: br,
		Endpoints: []upstream.Endpoint{openaitest.SlowChecks(a.Endpoint(100)), openaitest.SlowChecks(b.Endpoint(50))}})
	require.NoError(t, err)
	p.Start(context.Background())
	defer p.Close()
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	e := &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}}

	a.FailWith(http.StatusInternalServerError)
	for range 4 {
		assert.Equal(t, "b", e.servedBy(t, "llama"), "a's 500s fail over to b")
	}
	assert.EqualValues(t, 2, a.Requests(), "after 2 failures the breaker keeps requests off a")
	assert.Equal(t, breaker.Open, br.State("a"))

	a.FailWith(0)
	require.Eventually(t, func() bool { return br.State("a") == breaker.HalfOpen }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, "a", e.servedBy(t, "llama"), "the half-open probe goes to a")
	assert.Equal(t, breaker.Closed, br.State("a"), "and its success closes the breaker")
	assert.Equal(t, "a", e.servedBy(t, "llama"))

	a.FailWith(http.StatusTooManyRequests)
	res, _ := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "a 4xx is the answer, not retried")
	before := a.Requests()
	assert.Equal(t, "b", e.servedBy(t, "llama"), "a cools down after its 429")
	assert.Equal(t, before, a.Requests())
	assert.Equal(t, breaker.Closed, br.State("a"), "a 429 is not a failure")
}

// TestStripHeaders: a client's credential headers never reach an upstream unless it forwards
// them (forward_client_auth), nor do headers the gateway consumed; the endpoint's configured
// credentials still do, and win.
func TestStripHeaders(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	c := openaitest.Start(t, "c", "llama")
	epB := openaitest.SlowChecks(b.Endpoint(0))
	epB.Headers = map[string]string{"Authorization": "Bearer upstream-secret"}
	epC := openaitest.SlowChecks(c.Endpoint(0))
	epC.ForwardClientAuth = true
	for _, tc := range []struct {
		up            *openaitest.Upstream
		ep            upstream.Endpoint
		strip         []string
		auth, cookie  string
		apiKey, token string
	}{
		{a, openaitest.SlowChecks(a.Endpoint(0)), nil, "", "", "", ""},
		{a, openaitest.SlowChecks(a.Endpoint(0)), []string{"Authorization"}, "", "", "", ""},
		{b, epB, nil, "Bearer upstream-secret", "", "", ""},
		{c, epC, nil, "Bearer client-key", "s=1", "k", "t"},
		{c, epC, []string{"Authorization"}, "", "s=1", "k", "t"},
	} {
		p, err := openai.New(openai.Options{Logger: quiet(), Endpoints: []upstream.Endpoint{tc.ep}, StripHeaders: tc.strip})
		require.NoError(t, err)
		p.Start(context.Background())
		srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
		e := &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}}
		res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"), "Authorization", "Bearer client-key", "Cookie", "s=1",
			"X-Api-Key", "k", "X-Auth-Token", "t", "X-Other", "kept")
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		h := tc.up.LastHeader()
		assert.Equal(t, tc.auth, h.Get("Authorization"))
		assert.Equal(t, tc.cookie, h.Get("Cookie"))
		assert.Equal(t, tc.apiKey, h.Get("X-Api-Key"))
		assert.Equal(t, tc.token, h.Get("X-Auth-Token"))
		assert.Equal(t, "kept", h.Get("X-Other"))
		p.Close()
	}
}

// TestKServeEndpointSkipped: kserve endpoints validate but are not served yet.
func TestKServeEndpointSkipped(t *testing.T) {
	p, err := openai.New(openai.Options{Logger: quiet(), Endpoints: []upstream.Endpoint{
		{Name: "triton", URL: "http://127.0.0.1:1", Type: "kserve"},
	}})
	require.NoError(t, err)
	p.Close()
}

// TestAnswerHeaders: the upstream's connection-scoped answer fields, those its Connection names,
// and its Date and Server never reach the client (the date and the server are the gateway's,
// as nginx's proxy_hide_header has it); its other fields do.
func TestAnswerHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"llama","object":"model"}]}`)
		case "/v1/chat/completions":
			h := w.Header()
			h.Set("Date", "Mon, 01 Jan 2001 00:00:00 GMT")
			h.Set("Server", "uvicorn")
			h.Set("Keep-Alive", "timeout=5")
			h.Set("Connection", "X-Up-Hop")
			h.Set("X-Up-Hop", "secret")
			h.Set("X-Up-Kept", "yes")
			h.Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
		}
	}))
	t.Cleanup(up.Close)
	e := start(t, upstream.Endpoint{Name: "up", URL: up.URL, Type: upstream.TypeVLLM,
		CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second})
	res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	for _, k := range []string{"Server", "Keep-Alive", "X-Up-Hop"} {
		assert.Empty(t, res.Header.Values(k), k)
	}
	assert.NotEqual(t, "Mon, 01 Jan 2001 00:00:00 GMT", res.Header.Get("Date"))
	assert.NotEmpty(t, res.Header.Get("Date"))
	assert.Equal(t, "yes", res.Header.Get("X-Up-Kept"))
	assert.Equal(t, "application/json", res.Header.Get("Content-Type"))
}
