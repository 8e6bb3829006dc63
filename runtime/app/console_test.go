package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/internal/vllmsim"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/batch/batchtest"
	"github.com/infergate/infergate/surface/console"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream/kserveproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Recognisable secrets: none of them may appear in anything the console serves.
const (
	leakUpstreamToken = "upstream-token-SECRET-41c7"
	leakOTLPPassword  = "otlppass-SECRET-93ab"
	leakURLQueryKey   = "querykey-SECRET-5d2e"
	leakPrompt        = "prompt-SECRET-a8f0 tell me everything"
	leakOTLPHeader    = "otlp-SECRET-77aa"
)

// consoleConfig is a gateway with API keys, an upstream (given credentials in its headers and
// health check's URL), a tracing exporter with credentials, a cached model and the batch API, for the console's tests.
func consoleConfig(t *testing.T, upURL, extra string) string {
	return fmt.Sprintf(`
upstreams:
  - name: up
    url: %s
    type: vllm
    check_interval: 100ms
    health_check_url: /health?key=%s
    headers: {Authorization: "Bearer %s"}
models:
  llama:
    cache: {}
    session: {}
auth:
  keys:
    - {name: user, sha256: %s, models: [simple, llama]}
    - {name: ops, sha256: %s, admin: true}
batch:
  dir: %s
  concurrency: 1
tracing:
  otlp_endpoint: "http://otel:%s@127.0.0.1:1/?token=x"
  headers: {x-api-key: %s}
%s`, upURL, leakURLQueryKey, leakUpstreamToken, guard.HashKey(secUserKey), guard.HashKey(secAdminKey), t.TempDir(), leakOTLPPassword, leakOTLPHeader, extra)
}

// consoleGet GETs a console path with the key (as a bearer token; as a Basic password with
// basic), returning the status and body.
func consoleGet(t *testing.T, addr, path, key string, basic bool) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	require.NoError(t, err)
	switch {
	case key != "" && basic:
		req.SetBasicAuth("admin", key)
	case key != "":
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func consoleState(t *testing.T, addr string) console.State {
	t.Helper()
	code, body := consoleGet(t, addr, "/console/api/state", secAdminKey, false)
	require.Equal(t, http.StatusOK, code, body)
	var s console.State
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	return s
}

func chatAs(t *testing.T, addr, key, content string) int {
	t.Helper()
	body := fmt.Sprintf(`{"model":"llama","temperature":0,"messages":[{"role":"user","content":%q}]}`, content)
	r := send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v1/chat/completions", []byte(body),
		"Authorization", "Bearer "+key, "Content-Type", "application/json")
	return r.status
}

// TestConsoleAPI: the console needs an admin key (401 without one, asking for Basic credentials,
// 403 with a user's), takes it as a bearer token or a Basic password, and its state shows the
// traffic: requests per key, the model's cache hits, the upstream and its models.
func TestConsoleAPI(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	addr := startInProcess(t, consoleConfig(t, up.URL, ""))

	code, _ := consoleGet(t, addr, "/console", "", false)
	assert.Equal(t, http.StatusUnauthorized, code)
	res, err := http.Get("http://" + addr + "/console/api/state")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.Contains(t, res.Header.Get("WWW-Authenticate"), "Basic", "a browser asks for the key")
	code, _ = consoleGet(t, addr, "/console/api/state", secUserKey, false)
	assert.Equal(t, http.StatusForbidden, code, "a user's key is not an admin's")
	code, page := consoleGet(t, addr, "/console", secAdminKey, true)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, "<title>infergate console</title>")
	code, js := consoleGet(t, addr, "/console/assets/console.js", secAdminKey, true)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, js, "/console/api/state")
	assert.NotContains(t, page+js, "https://", "no external asset")

	require.Equal(t, http.StatusOK, chatAs(t, addr, secUserKey, "hello"))
	require.Equal(t, http.StatusOK, chatAs(t, addr, secUserKey, "hello")) // answered from the cache
	status, body := sessionCall(t, addr, secUserKey, http.MethodPost, "/v1/sessions", `{"model":"llama"}`)
	require.Equal(t, http.StatusCreated, status, body)
	// A stream of 5 chunks 20 ms apart: its first token's time, and the gaps between its tokens.
	up.SetStream(5, 20*time.Millisecond)
	r := send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v1/chat/completions",
		[]byte(`{"model":"llama","stream":true,"messages":[{"role":"user","content":"stream"}]}`),
		"Authorization", "Bearer "+secUserKey, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, r.status, r.body)
	var s console.State
	require.Eventually(t, func() bool {
		s = consoleState(t, addr)
		return len(s.Keys) > 0 && len(s.LLMs) > 0 && s.LLMs[0].RequestsTotal == 3
	}, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, "test", s.ConfigPath)
	require.Len(t, s.LLMs, 1)
	llm := s.LLMs[0]
	assert.Equal(t, "llama", llm.Name)
	assert.EqualValues(t, 1, llm.CacheHits)
	require.NotNil(t, llm.CacheHitRate)
	assert.InDelta(t, 0.33, *llm.CacheHitRate, 1e-9)
	assert.Positive(t, llm.TTFTP50)
	assert.Positive(t, llm.ITLP50)
	assert.Positive(t, s.Overview.TTFTP50)
	require.NotNil(t, llm.CacheEntries)
	assert.InDelta(t, 1, *llm.CacheEntries, 0)
	require.NotNil(t, llm.CacheBytes)
	assert.Positive(t, *llm.CacheBytes)
	require.NotNil(t, llm.Sessions)
	assert.InDelta(t, 1, *llm.Sessions, 0, "the session opened above")
	assert.Equal(t, []string{"console meter", "tracing", "guard", "drop client disaggregation params", "sessions", "cache", "routing and forwarding"}, llm.Stages)
	keys := map[string]console.Key{}
	for _, k := range s.Keys {
		keys[k.Name] = k
	}
	assert.EqualValues(t, 4, keys["user"].Requests, "three chats and a session")
	assert.Positive(t, keys["user"].TokensOut)
	// The admin's key made the start-up checks (GET /v1/models/llama); its console polls are
	// not traffic.
	assert.Equal(t, keys["ops"].Requests, s.Overview.RequestsTotal-4)
	require.Len(t, s.Upstreams, 1)
	u := s.Upstreams[0]
	assert.True(t, u.Healthy)
	assert.Equal(t, []string{"llama"}, u.Models)
	assert.Equal(t, "closed", u.Breaker)
	assert.NotZero(t, u.NextCheck)
	assert.NotZero(t, s.Overview.LatencyP50)
	assert.Len(t, s.Overview.Series.T, console.WindowSeconds/10)
	assert.NotEmpty(t, s.Tensors, "the built-in models")
	assert.NotZero(t, s.MemoryBytes)
}

// TestConsoleNoLeaks: no console page or JSON answer holds an API key, a prompt or an upstream
// credential (configured in its headers and its health check's query), nor the tracing
// exporter's (its headers, its URL's user info), whatever happened before: a chat, a failing upstream (its
// error quoting the URL), a batch.
func TestConsoleNoLeaks(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	addr := startInProcess(t, consoleConfig(t, up.URL, ""))
	require.Equal(t, http.StatusOK, chatAs(t, addr, secUserKey, leakPrompt))
	fileID := batchtest.Upload(t, "http://"+addr, secUserKey,
		`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"llama","messages":[{"role":"user","content":"`+leakPrompt+`"}]}}`+"\n")
	r := send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v1/batches",
		[]byte(`{"input_file_id":"`+fileID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`),
		"Authorization", "Bearer "+secUserKey, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, r.status, r.body)
	up.Stop() // its health checks now fail, with errors that name its URL
	require.Eventually(t, func() bool {
		s := consoleState(t, addr)
		return len(s.Upstreams) == 1 && !s.Upstreams[0].Healthy && s.Upstreams[0].LastError != "" && len(s.Batches) == 1
	}, 10*time.Second, 20*time.Millisecond)

	secrets := []string{secUserKey, secAdminKey, guard.HashKey(secUserKey), guard.HashKey(secAdminKey),
		leakUpstreamToken, leakOTLPPassword, leakURLQueryKey, "prompt-SECRET", leakOTLPHeader}
	for _, path := range []string{"/console", "/console/assets/console.js", "/console/assets/console.css", "/console/api/state"} {
		code, body := consoleGet(t, addr, path, secAdminKey, true)
		require.Equal(t, http.StatusOK, code, path)
		for _, s := range secrets {
			assert.NotContains(t, body, s, "%s leaks a secret", path)
		}
	}
	s := consoleState(t, addr)
	assert.Contains(t, fmt.Sprint(s.Config), redactedValue, "the config is shown, redacted")
	t.Logf("last error shown: %s", s.Upstreams[0].LastError)
}

// TestConsoleListen: server.console_listen serves the console on its own address (behind the
// same keys), and the main listener no longer does; server.console: false turns it off.
func TestConsoleListen(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	ln := freeAddr(t)
	addr := startInProcess(t, consoleConfig(t, up.URL, "server: {console_listen: \""+ln+"\"}"))
	code, _ := consoleGet(t, addr, "/console/api/state", secAdminKey, false)
	assert.Equal(t, http.StatusNotFound, code, "not on the main listener")
	code, _ = consoleGet(t, ln, "/console/api/state", "", false)
	assert.Equal(t, http.StatusUnauthorized, code)
	code, body := consoleGet(t, ln, "/console/api/state", secAdminKey, false)
	assert.Equal(t, http.StatusOK, code, body)

	off := startInProcess(t, consoleConfig(t, up.URL, "server: {console: false}"))
	code, _ = consoleGet(t, off, "/console", secAdminKey, false)
	assert.Equal(t, http.StatusNotFound, code)
}

// TestRedactedConfig: the values that may be secrets are replaced, by their keys' names and in
// URLs, and the rest is shown as it is.
func TestRedactedConfig(t *testing.T) {
	cfg, err := ParseConfig("test", []byte(`
upstreams:
  - {name: a, url: "http://up:8000/v1", type: vllm, health_check_url: "/health?api_key=q-SECRET", headers: {Authorization: "Bearer h-SECRET"}}
tracing: {otlp_endpoint: "http://u:pw-SECRET@otel:4318/?k=q-SECRET"}
redis: {addr: "127.0.0.1:1", username: u-SECRET, password: p-SECRET}
auth:
  keys: [{name: ops, sha256: `+guard.HashKey("k-SECRET")+`, admin: true}]
models:
  llama: {max_model_len: 0, cache: {ttl: 1m}}
`))
	require.NoError(t, err)
	b, err := json.Marshal(redactedConfig(cfg))
	require.NoError(t, err)
	out := string(b)
	assert.NotContains(t, out, "SECRET")
	assert.NotContains(t, out, guard.HashKey("k-SECRET"))
	assert.Contains(t, out, `"url":"http://up:8000/v1"`)
	assert.Contains(t, out, `"name":"ops"`)
	assert.Contains(t, out, `"addr":"127.0.0.1:1"`)
	assert.Contains(t, out, `"llama"`)
}

// echoModel is a tensor model that answers its FP32 input as its output: served by another
// KServe server, it is what the gateway forwards to, as a KServe upstream's model or a registered
// backend's.
type echoModel struct{ cfg *inference.ModelConfig }

func newEchoModel(name string) *echoModel {
	return &echoModel{cfg: &inference.ModelConfig{Name: name, Platform: "echo", Backend: "echo",
		Input:  []*inference.ModelInput{{Name: "INPUT0", DataType: inference.DataType_TYPE_FP32, Dims: []int64{-1}}},
		Output: []*inference.ModelOutput{{Name: "OUTPUT0", DataType: inference.DataType_TYPE_FP32, Dims: []int64{-1}}}}}
}

func (m *echoModel) Config() *inference.ModelConfig { return m.cfg }

func (m *echoModel) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Inputs[0]
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: "OUTPUT0", Datatype: in.Datatype, Shape: in.Shape, Data: in.Data}}})
}

// TestConsoleTensorsAndBackends: a native gRPC inference shows in the overview (the gRPC
// interceptor) and in the tensor model's Triton statistics; a model switched to dynamic batching
// shows its batch sizes and its queue and compute times; every tensor model lists its stages in
// the order a KServe request goes through them, ending in the engine that answers (in process,
// a KServe upstream, a registered backend, the bridge to an LLM); a registered backend shows with
// its lease as a short hash, never the lease id, which lets its holder change or end it.
func TestConsoleTensorsAndBackends(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	triton := gatewaytest.Start(t, gateway.Config{}, newEchoModel("upstream_echo"), newEchoModel("registered_echo"))
	addr := serveYAML(t, fmt.Sprintf(`upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 100ms}
  - {name: triton, url: %s, type: kserve, check_interval: 100ms, models: [upstream_echo]}
`, up.URL, triton.URL), io.Discard)
	conn := dial(t, addr)
	kc := inference.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := make([]int32, 16)
	_, err := kc.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "simple",
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}},
		},
		RawInputContents: [][]byte{tensor.Bytes(in), tensor.Bytes(in)}})
	require.NoError(t, err)
	other := openaitest.Start(t, "registered", "mistral")
	reg, err := registryv1.NewRegistryServiceClient(conn).Register(ctx, &registryv1.RegisterRequest{
		Backend: &registryv1.Backend{ModelName: "mistral", ModelType: registryv1.ModelType_MODEL_TYPE_CHAT,
			ModelInput: registryv1.ModelInput_MODEL_INPUT_TEXT, Url: other.URL, BackendType: registryv1.BackendType_BACKEND_TYPE_VLLM},
		Ttl: durationpb.New(time.Minute)})
	require.NoError(t, err)
	tensorReg, err := registryv1.NewRegistryServiceClient(conn).Register(ctx, &registryv1.RegisterRequest{
		Backend: &registryv1.Backend{ModelName: "registered_echo", ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR,
			ModelInput: registryv1.ModelInput_MODEL_INPUT_TENSOR, Url: triton.URL, BackendType: registryv1.BackendType_BACKEND_TYPE_KSERVE,
			TensorModelConfig: &tensorv1.TensorModelConfig{Name: "registered_echo",
				Inputs:  []*tensorv1.TensorMetadata{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{-1}}},
				Outputs: []*tensorv1.TensorMetadata{{Name: "OUTPUT0", Datatype: "FP32", Shape: []int64{-1}}}}},
		Ttl: durationpb.New(time.Minute)})
	require.NoError(t, err)

	// simple_int8 switched to dynamic batching at load time: four concurrent requests wait in
	// its queue until they fill a batch of four, which runs as one execution.
	res, err := http.Post("http://"+addr+"/v2/repository/models/simple_int8/load", "application/json", strings.NewReader(
		`{"parameters":{"config":"{\"max_batch_size\":4,\"dynamic_batching\":{\"max_queue_delay_microseconds\":60000000}}"}}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			body := `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT8","data":[` + ints(16, i) + `]},{"name":"INPUT1","shape":[1,16],"datatype":"INT8","data":[` + ints(16, 1) + `]}]}`
			r := send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v2/models/simple_int8/infer", []byte(body))
			assert.Equal(t, http.StatusOK, r.status, r.body)
		})
	}
	wg.Wait()

	var s console.State
	var body []byte
	require.Eventually(t, func() bool {
		res, err := http.Get("http://" + addr + "/console/api/state") // keys off: the console is open
		require.NoError(t, err)
		body, _ = io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		s = console.State{}
		require.NoError(t, json.Unmarshal(body, &s))
		names := map[string]bool{}
		for _, m := range s.Tensors {
			names[m.Name] = true
		}
		return len(s.Backends) == 2 && names["upstream_echo"] && names["registered_echo"] && names["llama"]
	}, 10*time.Second, 20*time.Millisecond, "the KServe upstream's, the registered backend's and the bridge's models")
	assert.NotContains(t, string(body), reg.GetLeaseId())
	assert.NotContains(t, string(body), tensorReg.GetLeaseId())
	var mistral console.Backend
	for _, b := range s.Backends {
		if b.Model == "mistral" {
			mistral = b
		}
	}
	assert.Equal(t, "vllm", mistral.Type)
	assert.Len(t, mistral.Lease, 8)
	names := []string{}
	for _, u := range s.Upstreams {
		names = append(names, u.Name)
	}
	assert.Contains(t, names, "registry:"+mistral.Lease, "its endpoint, named by the same hash")
	tensors := map[string]console.Tensor{}
	for _, m := range s.Tensors {
		tensors[m.Name] = m
	}
	simple := tensors["simple"]
	assert.EqualValues(t, 1, simple.Inferences)
	assert.EqualValues(t, 1, simple.Success)

	batched := tensors["simple_int8"]
	assert.EqualValues(t, 4, batched.Inferences)
	assert.EqualValues(t, 1, batched.Executions, "one batch")
	assert.Equal(t, []console.BatchSize{{Size: 4, Count: 1}}, batched.Batches)
	assert.Positive(t, batched.QueueAvg, "the first three waited for the fourth")
	assert.Positive(t, batched.ComputeAvg)

	// The stages, in the order a KServe request meets them.
	front := []string{"tracing", "validation", "guard"}
	for model, engine := range map[string][]string{
		"simple":          {"in-process model (CPU)"},
		"simple_int8":     {"dynamic batcher", "in-process model (CPU)"},
		"simple_sequence": {"sequence batcher", "in-process model (CPU)"},
		"upstream_echo":   {"routing and forwarding (KServe upstream)"},
		"registered_echo": {"routing and forwarding (registered backend)"},
		"llama":           {"OpenAI bridge (then the LLM's stages)"},
	} {
		assert.Equal(t, append(slices.Clone(front), engine...), tensors[model].Stages, model)
	}
	assert.GreaterOrEqual(t, s.Overview.RequestsTotal, int64(7), "the gRPC inference, the registrations, the load and the batch")
	assert.Empty(t, s.Keys, "keys are off")
}

// TestConsolePrefixHitRate: a model routed on its prompts' prefixes (routing: cache_aware) shows
// the share of their blocks the chosen endpoint had been sent before: none for a first prompt,
// all of it for the same prompt again.
func TestConsolePrefixHitRate(t *testing.T) {
	a, b := openaitest.Start(t, "a", "llama"), openaitest.Start(t, "b", "llama")
	addr := startInProcess(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: a, url: %s, type: vllm}
  - {name: b, url: %s, type: vllm}
models:
  llama: {routing: cache_aware}
`, a.URL, b.URL))
	prompt := strings.Repeat("The same long system prompt, sent twice. ", 20)
	body := fmt.Sprintf(`{"model":"llama","messages":[{"role":"user","content":%q}]}`, prompt)
	for range 2 {
		r := send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v1/chat/completions", []byte(body), "Content-Type", "application/json")
		require.Equal(t, http.StatusOK, r.status, r.body)
	}
	res, err := http.Get("http://" + addr + "/console/api/state") // keys off: the console is open
	require.NoError(t, err)
	defer res.Body.Close()
	var s console.State
	require.NoError(t, json.NewDecoder(res.Body).Decode(&s))
	require.Len(t, s.LLMs, 1)
	require.NotNil(t, s.LLMs[0].PrefixHitRate, "a cache_aware model has a prefix hit rate")
	assert.InDelta(t, 0.5, *s.LLMs[0].PrefixHitRate, 1e-9, "the first prompt's blocks were new, the second's all sent before")
}

// TestConsoleKeysOffWarning: with API keys off, the start-up warning says the console is open to
// anyone too (on this port, or on server.console_listen's), and says nothing of it when the
// console is off.
func TestConsoleKeysOffWarning(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	upstreams := fmt.Sprintf("upstreams:\n  - {name: up, url: %s, type: vllm}\n", up.URL)
	ln := freeAddr(t)
	for _, c := range []struct {
		server string
		want   string
	}{
		{"", "and open the operator console (/console)"},
		{`server: {console_listen: "` + ln + `"}`, "and anyone who can reach " + ln + " may open the operator console"},
		{"server: {console: false}", ""},
	} {
		logs := &logtest.Sink{}
		serveYAML(t, upstreams+c.server+"\n", logs)
		var warning string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "API keys are OFF") {
				warning = line
			}
		}
		require.NotEmpty(t, warning, "%q: the keys-off warning", c.server)
		if c.want != "" {
			assert.Contains(t, warning, c.want, c.server)
		} else {
			assert.NotContains(t, warning, "console", c.server)
		}
	}
}

// vllmWithLoad is a fake vLLM serving models (openaitest's) whose /metrics reports the given
// load for each of them, as a busy vLLM's does.
func vllmWithLoad(t *testing.T, name string, running, waiting, kvCache float64, models ...string) string {
	t.Helper()
	up := openaitest.Start(t, name, models...)
	target, err := url.Parse(up.URL)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/", httputil.NewSingleHostReverseProxy(target))
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		for _, m := range models {
			fmt.Fprintf(w, "vllm:num_requests_running{model_name=%q} %g\nvllm:num_requests_waiting{model_name=%q} %g\nvllm:kv_cache_usage_perc{model_name=%q} %g\n",
				m, running, m, waiting, m, kvCache)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestConsoleFigures: the figures the console reads from the gateway's parts, end to end: a vLLM
// endpoint's running and waiting requests and KV-cache usage as its /metrics reported them; an
// upstream whose failures opened its circuit breaker, with the time until it admits a request
// again; a request refused for the model's context length; the share of a disaggregated model's
// requests that took the prefill-then-decode path.
func TestConsoleFigures(t *testing.T) {
	loaded := vllmWithLoad(t, "loaded", 3, 5, 0.42, "qwen")
	flaky := openaitest.Start(t, "flaky", "flaky-model")
	flaky.FailWith(http.StatusInternalServerError)
	fabric := vllmsim.NewFabric()
	prefill := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RolePrefill, Fabric: fabric})
	decode := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RoleDecode, Fabric: fabric})
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
breaker: {consecutive_failures: 2, open_timeout: 1m}
upstreams:
  - {name: loaded, url: %s, type: vllm, check_interval: 100ms}
  - {name: flaky, url: %s, type: vllm, check_interval: 1h}
  - {name: p1, url: %s, type: vllm, check_interval: 1h}
  - {name: d1, url: %s, type: vllm, check_interval: 1h}
models:
  qwen: {tokenizer: %s, max_model_len: 64}
  m:
    disaggregation: {prefill: [p1], decode: [d1], min_prompt_tokens: 64}
`, loaded, flaky.URL, prefill.URL, decode.URL, qwenTokenizer(t)), "m")
	chat := func(model, content string) secResponse {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":%q}]}`, model, content)
		return send(t, http.DefaultClient, http.MethodPost, "http://"+addr+"/v1/chat/completions", []byte(body), "Content-Type", "application/json")
	}
	long := strings.Repeat("A long prompt that is worth prefilling elsewhere. ", 20)

	r := chat("qwen", long)
	require.Equal(t, http.StatusBadRequest, r.status, r.body)
	require.Contains(t, r.body, "context_length_exceeded")
	require.Equal(t, http.StatusOK, chat("qwen", "hi").status, "one that fits")
	for range 2 {
		assert.Equal(t, http.StatusInternalServerError, chat("flaky-model", "hi").status)
	}
	require.Equal(t, http.StatusOK, chat("m", long).status, "prefilled on p1, decoded on d1")
	require.Equal(t, http.StatusOK, chat("m", "hi").status, "too short to prefill elsewhere: decoded on d1 alone")

	var s console.State
	ups := map[string]console.Upstream{}
	llms := map[string]console.LLM{}
	require.Eventually(t, func() bool {
		res, err := http.Get("http://" + addr + "/console/api/state") // keys off: the console is open
		require.NoError(t, err)
		defer res.Body.Close()
		s = console.State{}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&s))
		for _, u := range s.Upstreams {
			ups[u.Name] = u
		}
		for _, m := range s.LLMs {
			llms[m.Name] = m
		}
		return ups["loaded"].VLLM != nil && ups["flaky"].Breaker == "open"
	}, 10*time.Second, 20*time.Millisecond, "the load scraped, the breaker open")

	assert.Equal(t, &console.VLLM{Running: 3, Waiting: 5, KVCacheUsage: 42}, ups["loaded"].VLLM, "KV-cache usage in percent")
	flakyRow := ups["flaky"]
	assert.Greater(t, flakyRow.BreakerWait, 50.0, "open for a minute from the second failure")
	assert.LessOrEqual(t, flakyRow.BreakerWait, 60.0)
	assert.EqualValues(t, 2, flakyRow.Failed)
	assert.Equal(t, "closed", ups["loaded"].Breaker)

	qwen := llms["qwen"]
	assert.EqualValues(t, 1, qwen.ContextRefused)
	assert.EqualValues(t, 2, qwen.RequestsTotal, "the refused request and the one that fit")
	assert.Zero(t, qwen.Errors, "a refusal for the context length is the client's")
	assert.EqualValues(t, 2, llms["flaky-model"].Errors)
	require.NotNil(t, llms["m"].Disaggregated, "a disaggregated model's rate")
	assert.InDelta(t, 0.5, *llms["m"].Disaggregated, 1e-9, "one of its two requests took two legs")
	assert.Nil(t, llms["qwen"].Disaggregated, "an aggregated model has none")
}

// gpuEcho is an echoModel that runs on a GPU of its own (an engines.GPUModel): it registers
// without a GPU engine, as the CUDA engine's models do.
type gpuEcho struct {
	*echoModel
	gpu int
}

func (m *gpuEcho) GPU() int { return m.gpu }

// TestConsoleTensorStageNames: the stages the console names for what the end-to-end tests cannot start
// here: a model on a GPU, server.dynamic_batching off, and a remote model's dynamic batching,
// which only server.dynamic_batching_remote turns on.
func TestConsoleTensorStageNames(t *testing.T) {
	reg := engines.NewRegistry()
	gpu := &gpuEcho{echoModel: newEchoModel("on_gpu"), gpu: 1}
	gpu.cfg.MaxBatchSize = 4
	gpu.cfg.SchedulingChoice = &inference.ModelConfig_DynamicBatching{DynamicBatching: &inference.ModelDynamicBatching{}}
	gpu.cfg.InstanceGroup = []*inference.ModelInstanceGroup{{Kind: inference.ModelInstanceGroup_KIND_GPU, Count: 1, Gpus: []int32{1}}}
	onGPU, err := reg.Register(gpu)
	require.NoError(t, err)
	// A backend's model with the same batching, described by its Triton config.
	rcfg := proto.Clone(gpu.cfg).(*inference.ModelConfig)
	rcfg.Name, rcfg.InstanceGroup = "remote_batched", nil
	remoteCfg, err := proto.Marshal(rcfg)
	require.NoError(t, err)
	remote, err := reg.RegisterRemote(&tensorv1.TensorModelConfig{TritonModelConfig: remoteCfg},
		func(context.Context, *engines.Request, func(*engines.Response) error) error { return nil })
	require.NoError(t, err)
	kp, err := kserveproxy.New(kserveproxy.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	off := false
	front := []string{"tracing", "validation", "guard"}
	for _, c := range []struct {
		name   string
		server serverConfig
		entry  *engines.Entry
		want   []string
	}{
		{"GPU", serverConfig{}, onGPU, append(slices.Clone(front), "dynamic batcher", "in-process model (GPU 1)")},
		{"GPU, batching off", serverConfig{DynamicBatching: &off}, onGPU, append(slices.Clone(front), "in-process model (GPU 1)")},
		{"remote", serverConfig{}, remote, append(slices.Clone(front), "routing and forwarding")},
		{"remote, batched", serverConfig{DynamicBatchingRemote: true}, remote, append(slices.Clone(front), "dynamic batcher", "routing and forwarding")},
	} {
		dynamicBatching(reg, c.server) // as Build sets it
		assert.Equal(t, c.want, tensorStageNames(kp)(c.entry), c.name)
	}
}
