// Package openaipool is the pool of OpenAI-compatible upstreams (vLLM, SGLang, llama.cpp, LM
// Studio, OpenAI, Ollama): the endpoints with their health checks, model discovery and vLLM
// metrics scrapes, the routing table (the highest healthy priority tier, the least outstanding
// endpoint, breakers, failover), and the metered exchange with an upstream (usage counted from
// the answer, latency, time to first token). It is not a surface: the OpenAI surface
// (surface/openai) serves OpenAI's API through each model's stages on top of it, Olla's routes
// (surface/olla) read its table, and the gateway's own stages reach it directly with Post.
package openaipool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Pool.
type Options struct {
	Endpoints []upstream.Endpoint
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// DiscoveryInterval is how often each healthy endpoint's model list is refreshed; default 30 s.
	DiscoveryInterval time.Duration
	// StripHeaders are client headers never passed upstream: those the gateway itself consumed,
	// such as Authorization when the guard checks API keys (an endpoint's configured headers are
	// still sent).
	StripHeaders []string
	// Breaker, when set, guards every endpoint: an open endpoint is skipped by routing, and each
	// request's outcome (connection errors, 5xx and a stream cut short are failures; a 429 cools
	// the endpoint down; a client that goes away or cancels is no outcome at all) is reported to
	// it. When every healthy endpoint of a model is cut off, the answer is 503
	// upstream_circuit_open with a Retry-After of the soonest breaker's wait.
	Breaker breaker.Breaker
	// UpstreamClient is what proxied requests to http:// upstreams go through: "fast" (the
	// default) is internal/h1client, the hand-written HTTP/1.1 client; "std" is net/http's
	// Transport, which https:// upstreams always use.
	UpstreamClient string
}

// Pool is the OpenAI-compatible upstream pool. It runs no stages: Post reaches the upstreams
// directly, and a surface (surface/openai's Proxy) runs each model's stages around Terminal.
// Create it with New, build the surfaces on it, call Start, and register Collectors on the
// gateway's metrics registry.
type Pool struct {
	opts  Options
	log   *slog.Logger
	strip []string // StripHeaders, canonical
	// set holds the endpoints, configured and added, and drives their health checks.
	set   *upstream.Set[*endpoint]
	table atomic.Pointer[table]
	m     *metrics
	// models counts each public model name's requests (ModelStats).
	models modelStats
	// router picks each request's endpoint (least outstanding in the highest healthy tier) and
	// fails over; its breaker is Options.Breaker.
	router upstream.Router
	// watchers are Watch's callbacks; copy-on-write under mu.
	watchers atomic.Pointer[[]func()]
	// terminal is the last Handler of every model's pipeline: u.forward, as one func value.
	terminal pipeline.Handler
	// rechain are the surfaces' builders of their per-model chains (OnRebuild): called under mu
	// with each rebuilt table's names, before the table is published.
	rechain []func(names []string)

	mu sync.Mutex // guards table rebuilds, watchers and rechain
}

// table maps each public model name to the endpoints serving it, highest priority first.
type table struct {
	routes map[string][]*route
	names  []string // public names, sorted, for /v1/models
}

// route is one (public model, endpoint) pair, with its metric children resolved once.
type route struct {
	ep       *endpoint
	public   string
	upstream string          // the name the endpoint knows the model by (differs for aliases)
	entry    json.RawMessage // the endpoint's /v1/models entry for upstream
	inflight prometheus.Gauge
	latency  prometheus.Observer
	ttft     prometheus.Observer
	itl      prometheus.Observer
	// Counter children resolved on first use, so a series appears only once it counts something.
	ok            lazyCounter // requests answered 200
	tokIn, tokOut lazyCounter
	stats         *statsCounter // the public model's, shared by its routes
}

// State is the route's endpoint's, for routing.
func (r *route) State() *upstream.State { return &r.ep.State }

// lazyCounter is one child of a CounterVec, looked up once instead of on every request.
type lazyCounter struct {
	p atomic.Pointer[prometheus.Counter]
}

func (l *lazyCounter) get(vec *prometheus.CounterVec, a, b, c string) prometheus.Counter {
	if p := l.p.Load(); p != nil {
		return *p
	}
	ctr := vec.WithLabelValues(a, b, c)
	l.p.Store(&ctr)
	return ctr
}

// New validates the endpoints and builds the pool. It does no I/O; Start begins health
// checks.
func New(opts Options) (*Pool, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DiscoveryInterval <= 0 {
		opts.DiscoveryInterval = 30 * time.Second
	}
	switch opts.UpstreamClient {
	case "":
		opts.UpstreamClient = "fast"
	case "fast", "std":
	default:
		return nil, fmt.Errorf("openai: UpstreamClient %q is not one of fast, std", opts.UpstreamClient)
	}
	cfgs, err := upstream.ResolveAll(opts.Endpoints)
	if err != nil {
		return nil, err
	}
	u := &Pool{opts: opts, log: opts.Logger, m: newMetrics(), router: upstream.Router{Breaker: opts.Breaker, Last: true}}
	u.terminal = u.forward
	u.watchers.Store(&[]func(){})
	for _, k := range opts.StripHeaders {
		u.strip = append(u.strip, http.CanonicalHeaderKey(k))
	}
	u.set = upstream.NewSet(upstream.SetHooks[*endpoint]{
		State:             func(e *endpoint) *upstream.State { return &e.State },
		Config:            func(e *endpoint) *upstream.Resolved { return &e.cfg },
		Context:           func(e *endpoint) context.Context { return e.ctx },
		DiscoveryInterval: opts.DiscoveryInterval,
		Check:             func(ctx context.Context, e *endpoint, due bool) bool { return e.probe(ctx, due) },
		Publish:           func([]*endpoint) { u.rebuild() },
		Gauge: func(e *endpoint, healthy bool) {
			v := 0.0
			if healthy {
				v = 1
			}
			u.m.healthy.WithLabelValues(e.cfg.Name, e.cfg.Type).Set(v)
		},
	})
	for _, c := range cfgs {
		if c.Type == upstream.TypeKServe {
			continue // served by the KServe surface, not through OpenAI's API
		}
		if err := u.set.Add(u.newEndpoint(c), nil); err != nil {
			return nil, err
		}
		u.m.healthy.WithLabelValues(c.Name, c.Type).Set(0)
	}
	u.table.Store(&table{routes: map[string][]*route{}})
	return u, nil
}

func (u *Pool) endpoints() []*endpoint { return u.set.All() }

// AddEndpoint adds an endpoint at run time (a backend that registered itself): it is checked at
// once, then like the configured ones, and its models become routable as soon as it is healthy.
// Names are unique across configured and added endpoints.
func (u *Pool) AddEndpoint(ep upstream.Endpoint) error {
	cfg, err := upstream.Resolve(ep)
	if err != nil {
		return err
	}
	if cfg.Type == upstream.TypeKServe {
		return &upstream.FieldError{Endpoint: ep.Name, Field: "type", Err: errors.New("kserve endpoints are served by the KServe surface")}
	}
	e := u.newEndpoint(cfg)
	if err := u.set.Add(e, nil); err != nil {
		e.stop()
		return err
	}
	return nil
}

// RemoveEndpoint stops routing to the named endpoint and stops its health checks; requests in
// flight on it finish. It reports whether the endpoint existed.
func (u *Pool) RemoveEndpoint(name string) bool {
	ok := u.set.Remove(name, func(e *endpoint) {
		e.stop()
		u.router.Forget(e.cfg.Name)
		e.client.CloseIdleConnections()
		e.rt.CloseIdleConnections()
		u.m.healthy.DeleteLabelValues(e.cfg.Name, e.cfg.Type)
		u.m.scrapes.DeletePartialMatch(prometheus.Labels{"endpoint": e.cfg.Name})
	})
	if ok {
		u.rebuild()
	}
	return ok
}

func (u *Pool) newEndpoint(cfg upstream.Resolved) *endpoint {
	e := newEndpoint(cfg, u.log, u.opts.UpstreamClient == "fast")
	e.ctx, e.stop = context.WithCancel(u.set.Context())
	e.scrapes = func(result string) { u.m.scrapes.WithLabelValues(cfg.Name, result).Inc() }
	return e
}

// ModelInfo describes one served model name.
type ModelInfo struct {
	Name string
	// Kind is the Kind of the endpoints serving it, when they all declare the same one; else empty.
	Kind string
}

// Models lists the model names the pool routes (whatever their endpoints' health), sorted.
func (u *Pool) Models() []ModelInfo {
	t := u.table.Load()
	out := make([]ModelInfo, 0, len(t.names))
	for _, name := range t.names {
		rs := t.routes[name]
		kind := rs[0].ep.cfg.Kind
		for _, r := range rs[1:] {
			if r.ep.cfg.Kind != kind {
				kind = ""
			}
		}
		out = append(out, ModelInfo{Name: name, Kind: kind})
	}
	return out
}

// Serves reports whether the pool routes model now (whatever its endpoints' health): whether
// Models lists it.
func (u *Pool) Serves(model string) bool {
	_, ok := u.table.Load().routes[model]
	return ok
}

// ModelEndpoints names the endpoints that route model now (none when the pool does not serve
// it), in the routing table's order.
func (u *Pool) ModelEndpoints(model string) []string {
	rs := u.table.Load().routes[model]
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ep.cfg.Name
	}
	return out
}

// Collectors are the pool's Prometheus metrics, for the gateway's registry: its endpoints' health
// and scrapes, and the requests routed through it (a Proxy's refusals included).
func (u *Pool) Collectors() []prometheus.Collector { return u.m.collectors() }

// Start checks every endpoint once (concurrently, bounded by their check timeouts) so the first
// requests can be routed, then keeps checking in the background until Close or ctx ends.
func (u *Pool) Start(ctx context.Context) { u.set.Start(ctx) }

// Close stops health checks and closes idle upstream connections. In-flight requests are not
// touched: the gateway's drain finishes them first.
func (u *Pool) Close() {
	u.set.Close()
	for _, e := range u.endpoints() {
		e.client.CloseIdleConnections()
		e.rt.CloseIdleConnections()
	}
}

// rebuild recomputes the routing table from every endpoint's last discovered models; the
// surfaces' chains for its names are built before it is published.
func (u *Pool) rebuild() {
	u.mu.Lock()
	old := u.table.Load()
	built := upstream.BuildTable(u.endpoints(),
		func(e *endpoint) (map[string]json.RawMessage, map[string]string) {
			if mp := e.models.Load(); mp != nil {
				return *mp, e.cfg.Aliases
			}
			return nil, nil
		},
		func(e *endpoint, public, served string, entry json.RawMessage) *route {
			return &route{
				ep: e, public: public, upstream: served, entry: entry,
				inflight: u.m.inflight.WithLabelValues(public, e.cfg.Name),
				latency:  u.m.latency.WithLabelValues(public, e.cfg.Name),
				ttft:     u.m.ttft.WithLabelValues(public, e.cfg.Name),
				itl:      u.m.itl.WithLabelValues(public, e.cfg.Name),
				stats:    u.models.of(public),
			}
		})
	t := &table{routes: built.Routes, names: built.Names}
	for _, f := range u.rechain {
		f(t.names)
	}
	u.table.Store(t)
	u.mu.Unlock()
	if !slices.Equal(old.names, t.names) {
		for _, f := range *u.watchers.Load() {
			f()
		}
	}
}

// OnRebuild calls f with the names of the table now and after every rebuild, before that table
// is published: how a surface keeps its per-model chains in step with the routing table.
func (u *Pool) OnRebuild(f func(names []string)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(u.table.Load().names)
	u.rechain = append(u.rechain, f)
}

// Watch calls f after every change of the set of served model names (an endpoint's discovery
// found other models, an endpoint was added or removed). f must not block.
func (u *Pool) Watch(f func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	ws := append(slices.Clone(*u.watchers.Load()), f)
	u.watchers.Store(&ws)
}

// Terminal is the last Handler of every model's pipeline: the metered exchange with the upstream
// the routing picks. Its errors are *pipeline.Error (no healthy endpoint, every one failing) or
// the context's.
func (u *Pool) Terminal() pipeline.Handler { return u.terminal }

// CountRejected counts a request a surface answered itself before routing (an unknown model, a
// stage's refusal) with the HTTP status it answered, under empty model and endpoint labels, so a
// client cannot mint label values.
func (u *Pool) CountRejected(status int) {
	u.m.requests.WithLabelValues("", "", codeLabel(status)).Inc()
}

// EndpointNames lists the endpoints' names, configured and added.
func (u *Pool) EndpointNames() []string {
	eps := u.endpoints()
	names := make([]string, len(eps))
	for i, e := range eps {
		names[i] = e.cfg.Name
	}
	return names
}
