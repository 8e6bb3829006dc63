package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRouteCache: the table answers as the mux would, before and after it has learnt a route:
// the same handler and Pattern for an exact route and for a path under a subtree pattern, the
// mux's 405 for another method, its 404 for a path that only decodes to a route, its wildcards'
// values (such routes are left to it), its redirects with each request's own query, a host's
// own pattern; and it learns no more than cacheSize routes, none with a long path.
func TestRouteCache(t *testing.T) {
	mux := http.NewServeMux()
	hits := map[string]int{}
	handle := func(pattern string) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			hits[pattern]++
			_, _ = w.Write([]byte(r.Pattern + "|" + r.PathValue("model")))
		})
	}
	handle("POST /v1/chat/completions")
	handle("GET /v1/models/{model...}")
	handle("/inference.GRPCInferenceService/")
	handle("/v2/")
	c := newRouteCache(mux)
	serve := func(method, target string) (int, string) {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(method, target, nil))
		return w.Code, w.Body.String()
	}
	for range 3 { // the first time through the mux, then from the table
		code, body := serve(http.MethodPost, "/v1/chat/completions")
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "POST /v1/chat/completions|", body)
		code, body = serve(http.MethodPost, "/inference.GRPCInferenceService/ModelInfer")
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "/inference.GRPCInferenceService/|", body)
	}
	assert.Equal(t, 3, hits["POST /v1/chat/completions"])
	assert.Equal(t, 3, hits["/inference.GRPCInferenceService/"])
	assert.EqualValues(t, 2, c.size.Load(), "both routes are learnt")

	code, _ := serve(http.MethodGet, "/v1/chat/completions")
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	code, _ = serve(http.MethodPost, "/v1%2Fchat/completions")
	assert.Equal(t, http.StatusNotFound, code, "an escaped slash splits no segment for the mux")
	for range 2 {
		code, body := serve(http.MethodGet, "/v1/models/org/llama")
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "GET /v1/models/{model...}|org/llama", body)
	}
	assert.EqualValues(t, 2, c.size.Load(), "a route with wildcards is not learnt, nor the mux's own answers")

	// The mux's redirects are its own every time: each carries its request's query.
	handle("/olla/")
	for _, q := range []string{"key=first", "x=2"} {
		for _, target := range []string{"/olla", "/v2//models", "/v2/./models"} {
			w := httptest.NewRecorder()
			c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target+"?"+q, nil))
			assert.Equal(t, http.StatusTemporaryRedirect, w.Code, target)
			assert.Contains(t, w.Header().Get("Location"), "?"+q, target)
		}
	}
	// A host's own pattern is the mux's to choose, whatever another host's request taught.
	handle("a.example/v2/only-a")
	for _, host := range []string{"b.example", "b.example", "a.example"} {
		r := httptest.NewRequest(http.MethodGet, "/v2/only-a", nil)
		r.Host = host
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		want := "/v2/|"
		if host == "a.example" {
			want = "a.example/v2/only-a|"
		}
		assert.Equal(t, want, w.Body.String(), host)
	}
	size := c.size.Load()
	serve(http.MethodGet, "/v2/"+strings.Repeat("x", maxCachedPath))
	assert.Equal(t, size, c.size.Load(), "a long path is not learnt")

	for i := range cacheSize + 10 { // paths under a subtree: the client's to choose
		code, body := serve(http.MethodGet, fmt.Sprintf("/v2/models/m%d", i))
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "/v2/|", body)
	}
	assert.EqualValues(t, cacheSize, c.size.Load())
	assert.Len(t, *c.table.Load(), cacheSize)
	assert.Equal(t, 3, hits["POST /v1/chat/completions"])
}

// BenchmarkRouteCache: a request through the table against the same request through the mux
// alone, for an exact route (the OpenAI proxy's) and for a Connect RPC under a subtree pattern,
// on a mux holding the gateway's kinds of patterns. It reports each arm's ns per request and
// the table's over the mux's (x-mux).
func BenchmarkRouteCache(b *testing.B) {
	mux := http.NewServeMux()
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, p := range []string{"/inference.GRPCInferenceService/", "/grpc.health.v1.Health/", "GET /metrics", "/v2", "/v2/",
		"GET /v1/models", "GET /v1/models/{model...}", "POST /v1/chat/completions", "POST /v1/completions",
		"POST /v1/embeddings", "GET /health", "/v1/", "POST /v1/messages", "POST /v1/responses"} {
		mux.Handle(p, nop)
	}
	c := newRouteCache(mux)
	w := httptest.NewRecorder()
	for _, tc := range []struct{ name, method, path string }{
		{"chat", http.MethodPost, "/v1/chat/completions"},
		{"connect", http.MethodPost, "/inference.GRPCInferenceService/ModelInfer"},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		c.ServeHTTP(w, r) // learnt
		b.Run(tc.name, func(b *testing.B) {
			var ns [2]float64
			for i, h := range []http.Handler{mux, c} {
				start := time.Now()
				for range b.N {
					h.ServeHTTP(w, r)
				}
				ns[i] = float64(time.Since(start).Nanoseconds()) / float64(b.N)
			}
			b.ReportMetric(ns[0], "mux-ns/op")
			b.ReportMetric(ns[1], "table-ns/op")
			b.ReportMetric(ns[1]/ns[0], "x-mux")
		})
	}
}
