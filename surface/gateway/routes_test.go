package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestExactRoutes: the table answers as the mux would, before and after it has learnt a route:
// the same handler and Pattern, the mux's 405 for another method, its 404 for a path that only
// decodes to the route, its wildcards' values, and the mux's own answers for the rest.
func TestExactRoutes(t *testing.T) {
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
	handle("/v2/")
	x := newExactRoutes(mux)
	serve := func(method, target string) (int, string) {
		w := httptest.NewRecorder()
		x.ServeHTTP(w, httptest.NewRequest(method, target, nil))
		return w.Code, w.Body.String()
	}
	for range 3 { // the first time through the mux, then from the table
		code, body := serve(http.MethodPost, "/v1/chat/completions")
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "POST /v1/chat/completions|", body)
	}
	assert.Equal(t, 3, hits["POST /v1/chat/completions"])
	assert.Len(t, *x.table.Load(), 1, "the exact route is learnt")

	code, _ := serve(http.MethodGet, "/v1/chat/completions")
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	code, _ = serve(http.MethodPost, "/v1%2Fchat/completions")
	assert.Equal(t, http.StatusNotFound, code, "an escaped slash splits no segment for the mux")
	code, body := serve(http.MethodGet, "/v1/models/org/llama")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "GET /v1/models/{model...}|org/llama", body)
	code, body = serve(http.MethodGet, "/v2/health/live")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "/v2/|", body)
	assert.Len(t, *x.table.Load(), 1, "only exact routes are learnt")
	assert.Equal(t, 3, hits["POST /v1/chat/completions"])
}
