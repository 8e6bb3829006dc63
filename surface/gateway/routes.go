package gateway

import (
	"net/http"
	pathpkg "path"
	"strings"
	"sync"
	"sync/atomic"
)

// routeCache serves requests a ServeMux has already routed from a table of (host, method,
// path) to the handler and pattern the mux chose, learnt from the mux as it serves: its matching
// was about half a microsecond of the OpenAI proxy's CPU a request (BenchmarkHotPath's profile),
// and of a Connect RPC's under a subtree pattern, where a table lookup is tens of nanoseconds
// (BenchmarkRouteCache). Every other request goes to the mux as before.
//
// What the mux chooses depends on the host, the method and the path alone, so the table is
// right while the mux's patterns stay as they were (the gateway registers them all before it
// serves). Learnt are only a request the mux served with the handler its pattern names, the
// pattern matching the path as it is: no wildcard (the mux's path values are not kept), no
// redirect (a path to clean, a missing trailing slash: those handlers carry the first
// request's query), no escapes of the path's own, no CONNECT. And only cacheSize of them, with
// paths of at most maxCachedPath bytes: paths under a subtree pattern are the client's to
// choose, and past that the mux routes them.
type routeCache struct {
	mux   *http.ServeMux
	mu    sync.Mutex                               // serializes learning
	table atomic.Pointer[map[string][]cachedRoute] // by path, then host and method; copied on write
	size  atomic.Int64                             // the routes in table
}

// cacheSize and maxCachedPath bound what a routeCache learns: 1,024 routes of up to 256 bytes.
const (
	cacheSize     = 1024
	maxCachedPath = 256
)

type cachedRoute struct {
	host, method, pattern string
	h                     http.Handler
}

func newRouteCache(mux *http.ServeMux) *routeCache {
	r := &routeCache{mux: mux}
	r.table.Store(&map[string][]cachedRoute{})
	return r
}

func (c *routeCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A path with escapes of its own (RawPath) is matched by the mux on its escaped form,
	// where "%2F" splits no segment: the mux's alone.
	host, method, path, plain := r.Host, r.Method, r.URL.Path, r.URL.RawPath == ""
	if plain {
		for _, e := range (*c.table.Load())[path] {
			if e.method == method && e.host == host {
				r.Pattern = e.pattern // as the mux sets it
				e.h.ServeHTTP(w, r)
				return
			}
		}
	}
	c.mux.ServeHTTP(w, r) // sets r.Pattern to what matched
	if p := r.Pattern; plain && p != "" && method != http.MethodConnect && len(path) <= maxCachedPath &&
		len(host) <= maxCachedPath && c.size.Load() < cacheSize {
		c.learn(host, method, path, p, r)
	}
}

// learn adds the route the mux chose for r, which it served with pattern.
func (c *routeCache) learn(host, method, path, pattern string, r *http.Request) {
	// The pattern's path must match r's as it is, whole or as a subtree: otherwise the mux
	// redirected (its pattern is then that of the path it sent the client to).
	p := pattern
	if _, rest, ok := strings.Cut(p, " "); ok {
		p = rest
	}
	if strings.Contains(p, "{") || !(path == p || strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) ||
		cleanPath(path) != path {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.table.Load()
	for _, e := range old[path] {
		if e.method == method && e.host == host {
			return
		}
	}
	// The handler, asked of the mux anew: the one it served r with may have changed r.
	h, again := c.mux.Handler(r)
	if again != pattern || c.size.Load() >= cacheSize {
		return
	}
	next := make(map[string][]cachedRoute, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	// Copies: the request's strings are slices of its whole head, which they would keep.
	path = strings.Clone(path)
	e := cachedRoute{host: strings.Clone(host), method: strings.Clone(method), pattern: pattern, h: h}
	next[path] = append(old[path][:len(old[path]):len(old[path])], e)
	c.table.Store(&next)
	c.size.Add(1)
}

// cleanPath is the path ServeMux serves p at, as it computes it: a path it would redirect
// elsewhere is not p.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		return ""
	}
	np := pathpkg.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}
