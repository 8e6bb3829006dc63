package gateway

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// exactRoutes serves a ServeMux's exact routes ("POST /v1/chat/completions": a method and a
// path, no wildcard, no host) from a table, learnt from the mux the first time each is served:
// ServeMux's matching was about half a microsecond of the OpenAI proxy's CPU a request (its
// profile in BenchmarkHotPath), a table lookup is tens of nanoseconds. Every other request goes
// to the mux as before, at the cost of comparing two strings.
//
// A request the table serves is the one the mux would give the same handler: an exact pattern
// for a method and a path is the most specific match for them, but for a pattern naming a host,
// which the gateway's mux does not have (an exactRoutes must not be put in front of one that
// does).
type exactRoutes struct {
	mux   *http.ServeMux
	mu    sync.Mutex                            // serializes learning
	table atomic.Pointer[map[string]exactRoute] // by path; copied on write
}

type exactRoute struct {
	method, pattern string
	h               http.Handler
}

func newExactRoutes(mux *http.ServeMux) *exactRoutes {
	r := &exactRoutes{mux: mux}
	r.table.Store(&map[string]exactRoute{})
	return r
}

func (x *exactRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A path with escapes of its own (RawPath) is matched by the mux on its escaped form,
	// where "%2F" does not split segments: the mux's alone.
	method, path, plain := r.Method, r.URL.Path, r.URL.RawPath == ""
	if e, ok := (*x.table.Load())[path]; ok && plain && e.method == method {
		r.Pattern = e.pattern // as the mux sets it
		e.h.ServeHTTP(w, r)
		return
	}
	x.mux.ServeHTTP(w, r) // sets r.Pattern to what matched
	if p := r.Pattern; plain && len(p) == len(method)+1+len(path) && p[:len(method)] == method &&
		p[len(method)] == ' ' && p[len(method)+1:] == path {
		x.learn(method, path, p, r)
	}
}

// learn adds an exact route the mux matched r to (a route is learnt once: the table holds at
// most one entry a registered pattern).
func (x *exactRoutes) learn(method, path, pattern string, r *http.Request) {
	x.mu.Lock()
	defer x.mu.Unlock()
	old := *x.table.Load()
	if _, ok := old[path]; ok {
		return // the path's other method stays with the mux
	}
	h, p := x.mux.Handler(r)
	if p != pattern {
		return
	}
	next := make(map[string]exactRoute, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[path] = exactRoute{method: method, pattern: pattern, h: h}
	x.table.Store(&next)
}
