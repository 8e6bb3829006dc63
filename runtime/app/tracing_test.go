package app

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tracing.*: spans of OpenAI and KServe requests reach the OTLP collector with the client's trace
// id, the upstream gets a traceparent of that trace (a child span's), TraceSetting turns it off at
// run time, and LogSettings changes the log level the gateway logs at.
func TestTracingAndLogSettings(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var exported []byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			exported = append(exported, b...)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(collector.Close)
	up := openaitest.Start(t, "up", "m")
	addr, lv, stop := startYAML(t, fmt.Sprintf(`
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
tracing: {otlp_endpoint: %s, level: [TIMESTAMPS], rate: 1}
`, up.URL, collector.URL), io.Discard)
	addr = "http://" + addr

	post := func(path, body, traceparent string) string {
		t.Helper()
		req, err := http.NewRequest("POST", addr+path, strings.NewReader(body))
		require.NoError(t, err)
		if traceparent != "" {
			req.Header.Set("Traceparent", traceparent)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, b)
		return string(b)
	}
	const chatTrace, inferTrace, offTrace = "4bf92f3577b34da6a3ce929d0e0e4736", "5cf92f3577b34da6a3ce929d0e0e4737", "6df92f3577b34da6a3ce929d0e0e4738"
	parent := func(trace string) string { return "00-" + trace + "-00f067aa0ba902b7-01" }
	require.Eventually(t, func() bool {
		res, err := http.Get(addr + "/v1/models")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return strings.Contains(string(b), `"m"`)
	}, 10*time.Second, 10*time.Millisecond)

	post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, parent(chatTrace))
	got := up.LastHeader().Get("Traceparent")
	assert.True(t, strings.HasPrefix(got, "00-"+chatTrace+"-"), "the upstream continues the client's trace: %q", got)
	assert.NotEqual(t, parent(chatTrace), got, "as the gateway's upstream span, not the client's span")
	post("/v2/models/simple/infer", `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[`+ints(16, 1)+`]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[`+ints(16, 1)+`]}]}`, parent(inferTrace))

	// Trace level OFF at run time: the client's traceparent passes on untouched, no span made.
	assert.Contains(t, post("/v2/trace/setting", `{"trace_level":["OFF"]}`, ""), `"trace_level":["OFF"]`)
	post("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"again"}]}`, parent(offTrace))
	assert.Equal(t, parent(offTrace), up.LastHeader().Get("Traceparent"))

	// Log settings: verbose level 1 logs debug lines from now on.
	assert.Contains(t, post("/v2/logging", `{"log_verbose_level":1}`, ""), `"log_verbose_level":1`)
	assert.Equal(t, slog.LevelDebug, lv.Level())

	stop() // flushes the spans to the collector
	mu.Lock()
	defer mu.Unlock()
	for name, trace := range map[string]string{"chat": chatTrace, "infer": inferTrace} {
		id, _ := hex.DecodeString(trace)
		assert.True(t, bytes.Contains(exported, id), "the %s request's spans reached the collector", name)
	}
	id, _ := hex.DecodeString(offTrace)
	assert.False(t, bytes.Contains(exported, id), "no span once tracing is off")
}

// Dynamic batching is on by default: a built-in model switched to batching at load time (a
// config override) runs concurrent requests as one batch; server.dynamic_batching: false runs
// them one by one.
func TestDynamicBatching(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		addr := "http://" + serveYAML(t, fmt.Sprintf("server: {dynamic_batching: %v}\n", on), io.Discard)
		res, err := http.Post(addr+"/v2/repository/models/simple/load", "application/json", strings.NewReader(
			`{"parameters":{"config":"{\"max_batch_size\":4,\"dynamic_batching\":{\"max_queue_delay_microseconds\":60000000}}"}}`))
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, string(b))
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				body := `{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[` + ints(16, i) + `]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[` + ints(16, 1) + `]}]}`
				res, err := http.Post(addr+"/v2/models/simple/infer", "application/json", strings.NewReader(body))
				if assert.NoError(t, err) {
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					assert.Contains(t, string(b), `"data":[`+ints(16, i+1)+`]`, "request %d gets its own sums", i)
				}
			})
		}
		wg.Wait()
		res, err = http.Get(addr + "/v2/models/simple/stats")
		require.NoError(t, err)
		b, _ = io.ReadAll(res.Body)
		res.Body.Close()
		if on {
			assert.Contains(t, string(b), `"execution_count":1`, "four requests, one batch: %s", b)
			assert.Contains(t, string(b), `"batch_size":4`)
		} else {
			assert.Contains(t, string(b), `"execution_count":4`, "one by one: %s", b)
		}
	}
}

// ints is n copies of v, comma-separated.
func ints(n, v int) string {
	return strings.TrimSuffix(strings.Repeat(fmt.Sprint(v)+",", n), ",")
}
