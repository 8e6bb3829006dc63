package gateway

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// routeCache serves requests a ServeMux has already routed from a table of (method, path) to
// the handler and pattern the mux chose, learnt from the mux as it serves: its matching was
// about half a microsecond of the OpenAI proxy's CPU a request (BenchmarkHotPath's profile),
// and of a Connect RPC's under a subtree pattern, where a table lookup is tens of nanoseconds
// (BenchmarkRouteCache). Every other request goes to the mux as before.
//
// What the mux chooses depends on the method, the host and the path alone; the table is
// right while the mux's patterns stay as they were and name no host, as the gateway's do once
// it serves (a routeCache must not be put in front of a mux with host patterns). Only routes
// whose pattern has no wildcard are learnt (the mux's path values are not kept), and only
// cacheSize of them: paths under a subtree pattern are the client's to choose, and past that
// the mux routes them.
type routeCache struct {
	mux   *http.ServeMux
	mu    sync.Mutex                               // serializes learning
	table atomic.Pointer[map[string][]cachedRoute] // by path; copied on write
	size  atomic.Int64                             // the routes in table
}

// cacheSize bounds the routes a routeCache learns.
const cacheSize = 1024

type cachedRoute struct {
	method, pattern string
	h               http.Handler
}

func newRouteCache(mux *http.ServeMux) *routeCache {
	r := &routeCache{mux: mux}
	r.table.Store(&map[string][]cachedRoute{})
	return r
}

func (c *routeCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A path with escapes of its own (RawPath) is matched by the mux on its escaped form,
	// where "%2F" splits no segment: the mux's alone.
	method, path, plain := r.Method, r.URL.Path, r.URL.RawPath == ""
	if plain {
		for _, e := range (*c.table.Load())[path] {
			if e.method == method {
				r.Pattern = e.pattern // as the mux sets it
				e.h.ServeHTTP(w, r)
				return
			}
		}
	}
	c.mux.ServeHTTP(w, r) // sets r.Pattern to what matched ("" for its own 404, 405, redirects)
	if p := r.Pattern; plain && p != "" && !strings.Contains(p, "{") && c.size.Load() < cacheSize {
		c.learn(method, path, p, r)
	}
}

// learn adds the route the mux chose for r, which it served with pattern.
func (c *routeCache) learn(method, path, pattern string, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.table.Load()
	for _, e := range old[path] {
		if e.method == method {
			return
		}
	}
	// The handler, asked of the mux anew: the one it served r with may have changed r. A
	// pattern that names a host, or that is not the one r was served with, is left alone.
	h, p := c.mux.Handler(r)
	if p != pattern || c.size.Load() >= cacheSize {
		return
	}
	if _, rest, ok := strings.Cut(p, " "); ok {
		p = rest
	}
	if !strings.HasPrefix(p, "/") {
		return
	}
	next := make(map[string][]cachedRoute, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	// Copies: the request's strings are slices of its whole head, which they would keep.
	path = strings.Clone(path)
	next[path] = append(old[path][:len(old[path]):len(old[path])], cachedRoute{method: strings.Clone(method), pattern: pattern, h: h})
	c.table.Store(&next)
	c.size.Add(1)
}
