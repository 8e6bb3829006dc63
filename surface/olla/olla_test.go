package olla_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/olla"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// startOlla is a gateway with the OpenAI surface and Olla's routes (its status routes too).
func startOlla(tb testing.TB, opts openai.Options, eps ...upstream.Endpoint) *env {
	tb.Helper()
	return startWith(tb, opts, olla.Info{}, eps...)
}

// startWith is startOlla with the status routes' Info.
func startWith(tb testing.TB, opts openai.Options, info olla.Info, eps ...upstream.Endpoint) *env {
	tb.Helper()
	opts.Endpoints, opts.Logger = eps, quiet()
	p, err := openai.New(opts)
	require.NoError(tb, err)
	p.Start(context.Background())
	tb.Cleanup(p.Close)
	srv := gatewaytest.Start(tb, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){
		p.Mount, func(mux *http.ServeMux, _ grpc.ServiceRegistrar) {
			olla.Mount(mux, "/olla", p)
			olla.MountStatus(mux, p, info)
		}}})
	return &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}}
}

// fakeOllama is an Ollama server as far as the gateway sees it: / answers "Ollama is running",
// /v1/models and /api/tags list its models, /api/chat streams newline-delimited JSON unless the
// request says stream: false (the second line only once release is closed, when set), and
// /v1/chat/completions answers OpenAI's shape.
type fakeOllama struct {
	name, url string
	models    []string
	release   chan struct{}
	chats     atomic.Int64
}

func startOllama(t *testing.T, name string, models ...string) *fakeOllama {
	t.Helper()
	f := &fakeOllama{name: name, models: models}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "Ollama is running") })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		var data []map[string]any
		for _, m := range f.models {
			data = append(data, map[string]any{"id": m, "object": "model", "created": 1, "owned_by": "library"})
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
	})
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, _ *http.Request) {
		var ms []map[string]any
		for _, m := range f.models {
			ms = append(ms, map[string]any{"name": m, "model": m, "size": 1, "from": f.name})
		}
		json.NewEncoder(w).Encode(map[string]any{"models": ms})
	})
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"version":"0.12.0"}`)
	})
	mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, r *http.Request) {
		f.chats.Add(1)
		var req struct {
			Model  string `json:"model"`
			Stream *bool  `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
			return
		}
		if req.Stream != nil && !*req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"model":%q,"message":{"role":"assistant","content":"Hi from %s"},"done":true}`, req.Model, f.name)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		fmt.Fprintf(w, `{"model":%q,"message":{"role":"assistant","content":"Hi"},"done":false}`+"\n", req.Model)
		w.(http.Flusher).Flush()
		if f.release != nil {
			select {
			case <-f.release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, `{"model":%q,"message":{"role":"assistant","content":" from %s"},"done":true,"eval_count":2}`+"\n", req.Model, f.name)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi from %s"},"finish_reason":"stop"}]}`, f.name)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	f.url = "http://" + ln.Addr().String()
	return f
}

func (f *fakeOllama) endpoint() upstream.Endpoint {
	return upstream.Endpoint{Name: f.name, URL: f.url, Type: upstream.TypeOllama, CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second}
}

func typed(e upstream.Endpoint, typ string) upstream.Endpoint {
	e.Type = typ
	return e
}

// waitModels waits until /v1/models lists n models.
func (e *env) waitModels(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, body := e.Get(t, "/v1/models")
		var list struct{ Data []json.RawMessage }
		return json.Unmarshal([]byte(body), &list) == nil && len(list.Data) == n
	}, 10*time.Second, 10*time.Millisecond)
}

// Each provider prefix reaches only its endpoints, with the provider's own paths; /olla/proxy
// reaches any; a model no endpoint of the provider serves is not found there.
func TestOllaProviderRoutes(t *testing.T) {
	t.Parallel()
	v := openaitest.Start(t, "v", "llama")
	l := openaitest.Start(t, "l", "llama")
	o := startOllama(t, "o", "llama", "qwen")
	e := startOlla(t, openai.Options{OllaHeaders: true}, v.Endpoint(0), typed(l.Endpoint(0), upstream.TypeLMStudio), o.endpoint())
	e.waitModels(t, 2)

	for _, tc := range []struct{ path, want string }{
		{"/olla/vllm/v1/chat/completions", "v"},
		{"/olla/lm-studio/v1/chat/completions", "l"},
		{"/olla/lmstudio/v1/chat/completions", "l"}, // Olla's alias
		{"/olla/ollama/v1/chat/completions", "o"},
	} {
		for range 3 {
			res, body := e.Post(t, tc.path, openaitest.ChatBody("llama"))
			require.Equal(t, http.StatusOK, res.StatusCode, body)
			assert.Equal(t, tc.want, res.Header.Get(openai.HeaderEndpoint), tc.path)
			assert.Equal(t, tc.want, res.Header.Get("X-Olla-Endpoint"), "Olla's headers, when asked for")
			assert.Equal(t, "llama", res.Header.Get("X-Olla-Model"), "the request's model, lower case")
			assert.NotEmpty(t, res.Header.Get("X-Olla-Request-ID"))
			assert.Equal(t, res.Header.Get(openai.HeaderBackendType), res.Header.Get("X-Olla-Backend-Type"))
		}
	}
	res, body := e.Post(t, "/olla/vllm/v1/chat/completions", openaitest.ChatBody("qwen"))
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Contains(t, body, `"code":"model_not_found"`)
	assert.Contains(t, body, "not served by any vllm endpoint")
	res, body = e.Post(t, "/olla/proxy/v1/chat/completions", openaitest.ChatBody("qwen"))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Equal(t, "o", res.Header.Get(openai.HeaderEndpoint))

	_, body = e.Get(t, "/olla/vllm/v1/models")
	assert.Contains(t, body, `"id":"llama"`)
	assert.NotContains(t, body, "qwen")
	_, body = e.Get(t, "/olla/proxy/v1/models")
	assert.Contains(t, body, `"id":"qwen"`)
	res, _ = e.Get(t, "/olla/vllm/v1/models/qwen")
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	res, _ = e.Get(t, "/olla/ollama/v1/models/qwen")
	assert.Equal(t, http.StatusOK, res.StatusCode)

	res, body = e.Get(t, "/olla/triton/v1/models")
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Contains(t, body, `"code":"unknown_provider"`)
	assert.Contains(t, body, "vllm")
	res, body = e.Get(t, "/olla/vllm/v1/nothing")
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Contains(t, body, `"code":"unknown_url"`)

	_, body = e.Get(t, "/olla/models")
	var models struct {
		Data []struct {
			ID        string
			Providers []string
			Endpoints []string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &models), body)
	require.Len(t, models.Data, 2)
	assert.Equal(t, "llama", models.Data[0].ID)
	assert.Equal(t, []string{"lm-studio", "ollama", "vllm"}, models.Data[0].Providers)
	assert.ElementsMatch(t, []string{"v", "l", "o"}, models.Data[0].Endpoints)

	_, body = e.Get(t, "/olla/vllm/health")
	assert.Contains(t, body, `"name":"v"`)
	assert.NotContains(t, body, `"name":"o"`)
}

// Ollama's native API passes through to Ollama endpoints: NDJSON streams chunk by chunk (Ollama
// streams unless told not to), model lists merged across endpoints.
func TestOllaOllamaNative(t *testing.T) {
	t.Parallel()
	o1 := startOllama(t, "o1", "llama", "qwen")
	o2 := startOllama(t, "o2", "qwen", "phi")
	v := openaitest.Start(t, "v", "llama")
	e := startOlla(t, openai.Options{}, o1.endpoint(), o2.endpoint(), v.Endpoint(0))
	e.waitModels(t, 3)

	res, body := e.Post(t, "/olla/ollama/api/chat", `{"model":"phi","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Equal(t, "o2", res.Header.Get(openai.HeaderEndpoint))
	assert.Contains(t, body, "Hi from o2")

	// The first line arrives while the upstream holds the second back: no buffering.
	o2.release = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/olla/ollama/api/chat",
		strings.NewReader(`{"model":"phi","messages":[{"role":"user","content":"hi"}]}`))
	sres, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer sres.Body.Close()
	assert.Equal(t, "application/x-ndjson", sres.Header.Get("Content-Type"))
	rd := bufio.NewReader(sres.Body)
	line, err := rd.ReadString('\n')
	require.NoError(t, err, "the first line, before the upstream sends the second")
	assert.Contains(t, line, `"done":false`)
	close(o2.release)
	line, err = rd.ReadString('\n')
	require.NoError(t, err)
	assert.Contains(t, line, `"done":true`)

	res, body = e.Post(t, "/olla/ollama/api/chat", `{"model":"missing","messages":[]}`)
	assert.Equal(t, http.StatusNotFound, res.StatusCode, body)
	res, body = e.Post(t, "/olla/vllm/api/chat", `{"model":"llama","messages":[]}`)
	assert.Equal(t, http.StatusNotFound, res.StatusCode, "the /api/ routes are Ollama's: %s", body)
	assert.EqualValues(t, 0, o1.chats.Load()+v.Requests(), "nothing went to another endpoint")

	_, body = e.Get(t, "/olla/ollama/api/tags")
	var tags struct{ Models []struct{ Name, From string } }
	require.NoError(t, json.Unmarshal([]byte(body), &tags), body)
	var names []string
	for _, m := range tags.Models {
		names = append(names, m.Name)
	}
	assert.ElementsMatch(t, []string{"llama", "qwen", "phi"}, names, "both endpoints' lists, each model once")
	res, body = e.Get(t, "/olla/ollama/api/version")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.JSONEq(t, `{"version":"0.12.0"}`, body)
}

// Health checks read vLLM endpoints' /metrics: /olla/vllm/health sums their queues as Olla
// answers, /olla/vllm/metrics re-exposes their vllm: series per endpoint, and the routing sends
// a request to the endpoint whose server reports the shorter queue when the gateway's own
// requests outstanding tie (here: a held request another client sent to a directly).
func TestOllaVLLMLoad(t *testing.T) {
	t.Parallel()
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	e := startOlla(t, openai.Options{}, a.Endpoint(0), b.Endpoint(0))
	e.waitModels(t, 1)

	release := a.Hold()
	defer release()
	go func() {
		res, err := http.Post(a.URL+"/v1/chat/completions", "application/json", strings.NewReader(openaitest.ChatBody("llama")))
		if err == nil {
			res.Body.Close()
		}
	}()
	<-a.Started()
	var health struct {
		Status      string
		ModelLoaded bool    `json:"model_loaded"`
		Running     float64 `json:"num_requests_running"`
		Waiting     float64 `json:"num_requests_waiting"`
		Endpoints   []struct {
			Name    string
			Running float64 `json:"num_requests_running"`
		}
	}
	require.Eventually(t, func() bool {
		_, body := e.Get(t, "/olla/vllm/health")
		return json.Unmarshal([]byte(body), &health) == nil && health.Running == 1
	}, 10*time.Second, 10*time.Millisecond, "a's health check scraped its queue")
	assert.Equal(t, "healthy", health.Status)
	assert.True(t, health.ModelLoaded)
	assert.Len(t, health.Endpoints, 2)
	for range 6 {
		// a holds every request: one routed there fails at the deadline instead of hanging.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/chat/completions", strings.NewReader(openaitest.ChatBody("llama")))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "routed to a, whose server reports the longer queue")
		res.Body.Close()
		cancel()
		assert.Equal(t, "b", res.Header.Get(openai.HeaderEndpoint), "the same outstanding here: the shorter reported queue")
	}

	res, body := e.Get(t, "/olla/vllm/metrics")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, body, `vllm:num_requests_running{endpoint="a"} 1`)
	// b's value is whatever its last scrape saw: 1 when it landed while b served one of the six.
	assert.Contains(t, body, `vllm:num_requests_running{endpoint="b"} `)
}

// Olla's sticky sessions: requests with one X-Olla-Session-ID stick to the endpoint that served
// the first, whatever the load elsewhere, and move when it leaves rotation.
func TestOllaStickySession(t *testing.T) {
	t.Parallel()
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	e := startOlla(t, openai.Options{}, openaitest.SlowChecks(a.Endpoint(0)), openaitest.SlowChecks(b.Endpoint(0)))
	e.waitModels(t, 1)
	first := map[string]string{}
	for _, s := range []string{"s1", "s2", "s3", "s4"} {
		res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"), openai.HeaderOllaSession, s)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		assert.Equal(t, "miss", res.Header.Get(openai.HeaderOllaSticky))
		first[s] = res.Header.Get(openai.HeaderEndpoint)
	}
	assert.Len(t, map[string]bool{first["s1"]: true, first["s2"]: true, first["s3"]: true, first["s4"]: true}, 2, "new sessions spread")
	for range 3 {
		for s, want := range first {
			res, _ := e.Post(t, "/olla/vllm/v1/chat/completions", openaitest.ChatBody("llama"), openai.HeaderOllaSession, s)
			assert.Equal(t, want, res.Header.Get(openai.HeaderEndpoint), s)
			assert.Equal(t, "hit", res.Header.Get(openai.HeaderOllaSticky))
		}
	}
	a.Stop() // the next request to a fails over to b, and the session moves there
	for s, was := range first {
		if was != "a" {
			continue
		}
		res, _ := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"), openai.HeaderOllaSession, s)
		assert.Equal(t, "b", res.Header.Get(openai.HeaderEndpoint))
		assert.Equal(t, "repin", res.Header.Get(openai.HeaderOllaSticky))
	}
	res, _ := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	assert.Empty(t, res.Header.Get(openai.HeaderOllaSticky), "no session, no stickiness")
}

// On Olla's routes a request with no session id sticks as Olla's do: by its prompt's first 512
// bytes (conversations that start alike pin together), else by its credentials; the key's source
// is named, and a session id echoed.
func TestOllaStickyKeying(t *testing.T) {
	t.Parallel()
	a := openaitest.Start(t, "a", "llama", "qwen")
	b := openaitest.Start(t, "b", "llama", "qwen")
	e := startOlla(t, openai.Options{}, openaitest.SlowChecks(a.Endpoint(0)), openaitest.SlowChecks(b.Endpoint(0)))
	e.waitModels(t, 2)
	long := strings.Repeat("You are a helpful assistant. ", 30) // over 512 bytes: the tail differs
	conv := func(q string) string {
		return `{"model":"llama","messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"` + q + `"}]}`
	}
	res, body := e.Post(t, "/olla/proxy/v1/chat/completions", conv("first"))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Equal(t, "miss", res.Header.Get(openai.HeaderOllaSticky))
	assert.Equal(t, "prefix_hash", res.Header.Get(openai.HeaderOllaStickySource))
	pinned := res.Header.Get(openai.HeaderEndpoint)
	for _, q := range []string{"second", "third", "fourth"} {
		res, _ := e.Post(t, "/olla/proxy/v1/chat/completions", conv(q))
		assert.Equal(t, "hit", res.Header.Get(openai.HeaderOllaSticky), q)
		assert.Equal(t, pinned, res.Header.Get(openai.HeaderEndpoint), "one system prompt, one endpoint")
	}
	other := strings.Replace(conv("first"), `"llama"`, `"qwen"`, 1)
	res, _ = e.Post(t, "/olla/proxy/v1/chat/completions", other)
	assert.Equal(t, "miss", res.Header.Get(openai.HeaderOllaSticky), "pins are per model")

	res, _ = e.Post(t, "/olla/openai/v1/chat/completions", openaitest.ChatBody("llama"), openai.HeaderOllaSession, "sess-1")
	assert.Equal(t, "session_header", res.Header.Get(openai.HeaderOllaStickySource))
	assert.Equal(t, "sess-1", res.Header.Get("X-Olla-Session-Id"), "echoed")

	empty := `{"model":"llama","messages":[]}`
	res, _ = e.Post(t, "/olla/proxy/v1/chat/completions", empty, "Authorization", "Bearer k1")
	assert.Equal(t, "auth_header", res.Header.Get(openai.HeaderOllaStickySource))
	res, _ = e.Post(t, "/olla/proxy/v1/chat/completions", empty)
	assert.Equal(t, "disabled", res.Header.Get(openai.HeaderOllaSticky), "no key to stick by")
	assert.Empty(t, res.Header.Get(openai.HeaderOllaStickySource))

	res, _ = e.Post(t, "/v1/chat/completions", conv("first"))
	assert.Empty(t, res.Header.Get(openai.HeaderOllaSticky), "infergate's own routes stick only on a session id")
}

// BenchmarkOllaRoute: a chat completion through Olla's provider-scoped route against the same
// through /v1, alternating on one client (the baseline in the same process); ratio is the
// route's time over /v1's (goal: 1, the same cost).
func BenchmarkOllaRoute(b *testing.B) {
	up := openaitest.Start(b, "bench", "llama")
	e := startOlla(b, openai.Options{}, openaitest.SlowChecks(up.Endpoint(0)))
	client := openaitest.BenchClient()
	defer client.CloseIdleConnections()
	var buf bytes.Buffer
	// ChatOnce posts to its base URL + /v1/chat/completions: /olla/vllm is the route's base.
	send := func(base string) time.Duration {
		s := time.Now()
		openaitest.ChatOnce(b, client, e.URL+base, benchChat, &buf)
		return time.Since(s)
	}
	for range 100 {
		send("")
		send("/olla/vllm")
	}
	var v1, olla time.Duration
	for b.Loop() {
		v1 += send("")
		olla += send("/olla/vllm")
	}
	b.ReportMetric(float64(v1.Microseconds())/float64(b.N), "v1-us/op")
	b.ReportMetric(float64(olla.Microseconds())/float64(b.N), "olla-us/op")
	b.ReportMetric(float64(olla)/float64(v1), "ratio")
}
