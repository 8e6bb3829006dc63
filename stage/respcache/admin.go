package respcache

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
)

// adminRetryAfter is the Retry-After of a flush refused because its store did not answer: as for
// the batch state, a Redis outage rarely ends sooner, and retrying sooner only adds load.
const adminRetryAfter = 2 * time.Second

// AdminHandler is DELETE /admin/cache over caches, each model's response cache by its name: it
// empties the cache of the model named by ?model= (every model's without it, in name order) and
// answers how many entries went, {"object":"list","data":[{"model","flushed"}]}. A model without
// a cache is 404 model_not_found; a flush that fails is 503 cache_unavailable with Retry-After.
// Every Redis call of a flush is bounded (2 s each), so a Redis that is down or hangs is a 503
// within seconds, never a request held until the client gives up. Mount it where only admins
// reach it (the gateway's API keys make /admin/ admin-only).
func AdminHandler(caches map[string]*Cache) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		names := slices.Sorted(maps.Keys(caches))
		if m := r.URL.Query().Get("model"); m != "" {
			if caches[m] == nil {
				pipeline.NotFound("model", "model_not_found", fmt.Sprintf("The model `%s` has no response cache.", m)).Write(w)
				return
			}
			names = []string{m}
		}
		type flushed struct {
			Model   string `json:"model"`
			Flushed int    `json:"flushed"`
		}
		out := struct {
			Object string    `json:"object"`
			Data   []flushed `json:"data"`
		}{Object: "list", Data: []flushed{}}
		for _, n := range names {
			k, err := caches[n].Flush(r.Context())
			if err != nil {
				pipeline.Unavailable("cache_unavailable", adminRetryAfter, fmt.Sprintf(
					"Flushing the response cache of `%s` failed: %v; retry in a few seconds.", n, err)).Write(w)
				return
			}
			out.Data = append(out.Data, flushed{Model: n, Flushed: k})
		}
		httpapi.WriteJSON(w, http.StatusOK, out)
	})
}
