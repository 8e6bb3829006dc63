package respcache_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/infergate/infergate/stage/respcache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failingStore is a store whose flushes fail, as a Redis that does not answer.
type failingStore struct{ respcache.Store }

func (failingStore) Flush(context.Context) (int, error) { return 0, errors.New("redis: i/o timeout") }

// TestAdminHandler: DELETE /admin/cache empties the named model's cache (every model's without
// ?model=, in name order) and says how many entries went; a model without a cache is 404, a
// store that fails is 503 with Retry-After.
func TestAdminHandler(t *testing.T) {
	ctx := context.Background()
	newCache := func(model string, entries int) *respcache.Cache {
		st := respcache.NewMemory(respcache.MemoryOptions{})
		for i := range entries {
			require.NoError(t, st.Put(ctx, respcache.Entry{Key: model + string(rune('a'+i)), Response: []byte(`{}`)}))
		}
		c, err := respcache.New(respcache.Options{Model: model, Store: st})
		require.NoError(t, err)
		return c
	}
	flush := func(h http.Handler, query string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodDelete, "/admin/cache"+query, nil))
		return w
	}

	h := respcache.AdminHandler(map[string]*respcache.Cache{"b": newCache("b", 2), "a": newCache("a", 1), "c": newCache("c", 3)})
	w := flush(h, "?model=c")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
	assert.JSONEq(t, `{"object":"list","data":[{"model":"c","flushed":3}]}`, w.Body.String())
	w = flush(h, "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `{"object":"list","data":[{"model":"a","flushed":1},{"model":"b","flushed":2},{"model":"c","flushed":0}]}`+"\n", w.Body.String())

	w = flush(h, "?model=nope")
	assert.Equal(t, http.StatusNotFound, w.Code)
	assert.JSONEq(t, `{"error":{"message":"The model `+"`nope`"+` has no response cache.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`, w.Body.String())

	w = flush(respcache.AdminHandler(map[string]*respcache.Cache{}), "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.JSONEq(t, `{"object":"list","data":[]}`, w.Body.String(), "no caches: an empty list")

	broken, err := respcache.New(respcache.Options{Model: "r", Store: failingStore{respcache.NewMemory(respcache.MemoryOptions{})}})
	require.NoError(t, err)
	w = flush(respcache.AdminHandler(map[string]*respcache.Cache{"r": broken}), "?model=r")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, "2", w.Header().Get("Retry-After"))
	assert.Contains(t, w.Body.String(), `"code":"cache_unavailable"`)
	assert.Contains(t, w.Body.String(), "Flushing the response cache of `r` failed: respcache: flushing model r: redis: i/o timeout; retry in a few seconds.")
}
