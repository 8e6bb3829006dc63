// Package openai serves OpenAI's HTTP API (/v1/models, /v1/chat/completions, /v1/completions,
// /v1/embeddings, /health) on the gateway's port by proxying to OpenAI-compatible upstreams (vLLM,
// OpenAI, Ollama) listed in config: health-checked, model-discovered, routed to the highest healthy
// priority tier and the least-loaded endpoint inside it, with failover before the first byte.
//
// The hot path reads only "model" and "stream" from a request body (scan.go) and forwards the body
// and every response byte unchanged; streams are flushed chunk by chunk as they arrive.
//
// The same API is served as infergate.openai.v1.OpenAIService to gRPC, gRPC-Web and Connect
// clients (service.go): requests become OpenAI JSON bodies and go through the same routing.
package openai

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

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Options configures a Proxy.
type Options struct {
	Endpoints []upstream.Endpoint
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes limits a request body; default 64 MiB (multimodal requests carry base64 images).
	MaxBodyBytes int64
	// DiscoveryInterval is how often each healthy endpoint's model list is refreshed; default 30 s.
	DiscoveryInterval time.Duration
	// Ready, when set, makes /health report 503 once it returns false (the gateway draining).
	Ready func() bool
	// Stages, when set, returns the interceptors a model's requests pass through before the
	// upstream exchange, outermost first (the guard's admission first). It is asked once per
	// model name, whenever the routing table is rebuilt, so it must be cheap and not block.
	// A refusal by pipeline.Admit is counted and answered like the proxy's own errors.
	Stages func(model string) []pipeline.Interceptor
	// Visible, when set, decides which models a caller may see (the guard's API key model
	// lists): /v1/models and ListModels list only those, and any other is, to that caller, a
	// model that does not exist.
	Visible func(ctx context.Context, model string) bool
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
	// Tokens, when set, answers OpenAIService's Tokenize and Detokenize RPCs: given vLLM's path
	// (/tokenize or /detokenize) and the request as that endpoint's JSON body, it returns the HTTP
	// status and JSON answer, or the gateway's own error. The gateway sets it to the function
	// that serves those HTTP endpoints (prompt.Endpoints.Serve), so the two surfaces answer
	// alike. Unset, the RPCs are UNIMPLEMENTED.
	Tokens func(ctx context.Context, path string, body []byte) (status int, answer []byte, err *pipeline.Error)
	// UpstreamClient is what proxied requests to http:// upstreams go through: "fast" (the
	// default) is internal/h1client, the hand-written HTTP/1.1 client; "std" is net/http's
	// Transport, which https:// upstreams always use.
	UpstreamClient string
	// OllaHeaders adds Olla's response headers (X-Olla-Request-ID, -Endpoint, -Model,
	// -Backend-Type, -Response-Time) beside the gateway's own X-Infergate-* ones.
	OllaHeaders bool
}

// Proxy is the OpenAI surface. Create it with New, call Start, mount it with Mount, and register
// Collectors on the gateway's metrics registry.
type Proxy struct {
	opts  Options
	log   *slog.Logger
	strip []string // StripHeaders, canonical
	// set holds the endpoints, configured and added, and drives their health checks.
	set   *upstream.Set[*endpoint]
	table atomic.Pointer[table]
	m     *metrics
	// router picks each request's endpoint (least outstanding in the highest healthy tier) and
	// fails over; its breaker is Options.Breaker.
	router upstream.Router
	// watchers are Watch's callbacks; copy-on-write under mu.
	watchers atomic.Pointer[[]func()]
	// terminal is the last Handler of every model's pipeline: p.forward, as one func value.
	terminal pipeline.Handler
	// affinity pins Olla's sticky sessions (X-Olla-Session-ID) to endpoints.
	affinity *affinity

	mu sync.Mutex // guards table rebuilds and watchers
}

// table maps each public model name to the endpoints serving it, highest priority first.
type table struct {
	routes map[string][]*route
	// chains holds each public name's pipeline: its Stages around the upstream exchange, built
	// once per rebuild.
	chains map[string]pipeline.Handler
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

// New validates the endpoints and builds a proxy. It does no I/O; Start begins health checks.
func New(opts Options) (*Proxy, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 20
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
	p := &Proxy{opts: opts, log: opts.Logger, m: newMetrics(), router: upstream.Router{Breaker: opts.Breaker, Last: true}}
	p.terminal = p.forward
	p.affinity = newAffinity()
	p.watchers.Store(&[]func(){})
	for _, k := range opts.StripHeaders {
		p.strip = append(p.strip, http.CanonicalHeaderKey(k))
	}
	p.set = upstream.NewSet(upstream.SetHooks[*endpoint]{
		State:             func(e *endpoint) *upstream.State { return &e.State },
		Config:            func(e *endpoint) *upstream.Resolved { return &e.cfg },
		Context:           func(e *endpoint) context.Context { return e.ctx },
		DiscoveryInterval: opts.DiscoveryInterval,
		Check:             func(ctx context.Context, e *endpoint, due bool) bool { return e.probe(ctx, due) },
		Publish:           func([]*endpoint) { p.rebuild() },
		Gauge: func(e *endpoint, healthy bool) {
			v := 0.0
			if healthy {
				v = 1
			}
			p.m.healthy.WithLabelValues(e.cfg.Name, e.cfg.Type).Set(v)
		},
	})
	for _, c := range cfgs {
		if c.Type == upstream.TypeKServe {
			continue // served by the KServe surface, not through OpenAI's API
		}
		if err := p.set.Add(p.newEndpoint(c), nil); err != nil {
			return nil, err
		}
		p.m.healthy.WithLabelValues(c.Name, c.Type).Set(0)
	}
	p.table.Store(&table{routes: map[string][]*route{}, chains: map[string]pipeline.Handler{}})
	return p, nil
}

func (p *Proxy) endpoints() []*endpoint { return p.set.All() }

// AddEndpoint adds an endpoint at run time (a backend that registered itself): it is checked at
// once, then like the configured ones, and its models become routable as soon as it is healthy.
// Names are unique across configured and added endpoints.
func (p *Proxy) AddEndpoint(ep upstream.Endpoint) error {
	cfg, err := upstream.Resolve(ep)
	if err != nil {
		return err
	}
	if cfg.Type == upstream.TypeKServe {
		return &upstream.FieldError{Endpoint: ep.Name, Field: "type", Err: errors.New("kserve endpoints are served by the KServe surface")}
	}
	e := p.newEndpoint(cfg)
	if err := p.set.Add(e, nil); err != nil {
		e.stop()
		return err
	}
	return nil
}

// RemoveEndpoint stops routing to the named endpoint and stops its health checks; requests in
// flight on it finish. It reports whether the endpoint existed.
func (p *Proxy) RemoveEndpoint(name string) bool {
	ok := p.set.Remove(name, func(e *endpoint) {
		e.stop()
		p.router.Forget(e.cfg.Name)
		e.client.CloseIdleConnections()
		e.rt.CloseIdleConnections()
		p.m.healthy.DeleteLabelValues(e.cfg.Name, e.cfg.Type)
		p.m.scrapes.DeletePartialMatch(prometheus.Labels{"endpoint": e.cfg.Name})
	})
	if ok {
		p.rebuild()
	}
	return ok
}

func (p *Proxy) newEndpoint(cfg upstream.Resolved) *endpoint {
	e := newEndpoint(cfg, p.log, p.opts.UpstreamClient == "fast")
	e.ctx, e.stop = context.WithCancel(p.set.Context())
	e.scrapes = func(result string) { p.m.scrapes.WithLabelValues(cfg.Name, result).Inc() }
	return e
}

// ModelInfo describes one served model name.
type ModelInfo struct {
	Name string
	// Kind is the Kind of the endpoints serving it, when they all declare the same one; else empty.
	Kind string
}

// Models lists the model names the proxy routes (whatever their endpoints' health), sorted.
func (p *Proxy) Models() []ModelInfo {
	t := p.table.Load()
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

// Collectors are the proxy's Prometheus metrics, for the gateway's registry.
func (p *Proxy) Collectors() []prometheus.Collector { return p.m.collectors() }

// Start checks every endpoint once (concurrently, bounded by their check timeouts) so the first
// requests can be routed, then keeps checking in the background until Close or ctx ends.
func (p *Proxy) Start(ctx context.Context) { p.set.Start(ctx) }

// Close stops health checks and closes idle upstream connections. In-flight requests are not
// touched: the gateway's drain finishes them first.
func (p *Proxy) Close() {
	p.set.Close()
	for _, e := range p.endpoints() {
		e.client.CloseIdleConnections()
		e.rt.CloseIdleConnections()
	}
}

// rebuild recomputes the routing table from every endpoint's last discovered models.
func (p *Proxy) rebuild() {
	p.mu.Lock()
	old := p.table.Load()
	built := upstream.BuildTable(p.endpoints(),
		func(e *endpoint) (map[string]json.RawMessage, map[string]string) {
			if mp := e.models.Load(); mp != nil {
				return *mp, e.cfg.Aliases
			}
			return nil, nil
		},
		func(e *endpoint, public, served string, entry json.RawMessage) *route {
			return &route{
				ep: e, public: public, upstream: served, entry: entry,
				inflight: p.m.inflight.WithLabelValues(public, e.cfg.Name),
				latency:  p.m.latency.WithLabelValues(public, e.cfg.Name),
				ttft:     p.m.ttft.WithLabelValues(public, e.cfg.Name),
				itl:      p.m.itl.WithLabelValues(public, e.cfg.Name),
			}
		})
	t := &table{routes: built.Routes, names: built.Names, chains: make(map[string]pipeline.Handler, len(built.Names))}
	for _, name := range t.names {
		t.chains[name] = p.terminal
		if p.opts.Stages != nil {
			t.chains[name] = pipeline.Chain(p.terminal, p.opts.Stages(name)...)
		}
	}
	p.table.Store(t)
	p.mu.Unlock()
	if !slices.Equal(old.names, t.names) {
		for _, f := range *p.watchers.Load() {
			f()
		}
	}
}

// Watch calls f after every change of the set of served model names (an endpoint's discovery
// found other models, an endpoint was added or removed). f must not block.
func (p *Proxy) Watch(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ws := append(slices.Clone(*p.watchers.Load()), f)
	p.watchers.Store(&ws)
}

// Mount registers the OpenAI routes and the OpenAIService Connect handler (Connect, gRPC-Web) on
// mux, and the OpenAIService gRPC server on grpcSrv; its signature fits gateway.Config.Services.
func (p *Proxy) Mount(mux *http.ServeMux, grpcSrv grpc.ServiceRegistrar) {
	(&service{p: p}).mount(mux, grpcSrv)
	mux.HandleFunc("GET /v1/models", p.listModels)
	mux.HandleFunc("GET /v1/models/{model...}", p.getModel)
	mux.HandleFunc("POST /v1/chat/completions", p.proxy)
	mux.HandleFunc("POST /v1/completions", p.proxy)
	mux.HandleFunc("POST /v1/embeddings", p.proxy)
	mux.HandleFunc("GET /health", p.health)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		pipeline.NotFound("", "unknown_url", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)).Write(w)
	})
}

// healthyEntry returns the /v1/models entry of the first healthy endpoint serving a public name.
func healthyEntry(rs []*route) (*route, bool) {
	for _, r := range rs {
		if r.ep.Healthy() {
			return r, true
		}
	}
	return nil, false
}

type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root,omitempty"`
}

// entryJSON is the model's entry as the endpoint reported it, or, for an alias, a fresh one
// naming the alias (with root pointing at the served model).
func entryJSON(r *route) json.RawMessage {
	if r.public == r.upstream {
		return r.entry
	}
	var e struct {
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	_ = json.Unmarshal(r.entry, &e)
	b, _ := json.Marshal(modelEntry{ID: r.public, Object: "model", Created: e.Created, OwnedBy: e.OwnedBy, Root: r.upstream})
	return b
}

// healthyRoutes returns, for each model name a healthy endpoint serves, the route whose entry
// lists it, sorted by name, less those the caller of ctx may not see.
func (p *Proxy) healthyRoutes(ctx context.Context) []*route {
	t := p.table.Load()
	var out []*route
	for _, name := range t.names {
		if !p.visible(ctx, name) {
			continue
		}
		if rt, ok := healthyEntry(t.routes[name]); ok {
			out = append(out, rt)
		}
	}
	return out
}

// listModels answers with the union of the healthy endpoints' models, in OpenAI's list shape.
func (p *Proxy) listModels(w http.ResponseWriter, r *http.Request) {
	list := struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{Object: "list", Data: []json.RawMessage{}}
	for _, rt := range p.healthyRoutes(r.Context()) {
		list.Data = append(list.Data, entryJSON(rt))
	}
	httpapi.WriteJSON(w, http.StatusOK, list)
}

// visible reports whether the caller of ctx may see model.
func (p *Proxy) visible(ctx context.Context, model string) bool {
	return p.opts.Visible == nil || p.opts.Visible(ctx, model)
}

func (p *Proxy) getModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	rt, ok := healthyEntry(p.table.Load().routes[name])
	if !ok || !p.visible(r.Context(), name) {
		pipeline.ModelNotFound(name).Write(w)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, entryJSON(rt))
}

// health reports the gateway's state and each endpoint's. It is 200 while the gateway accepts
// work, whatever the upstreams' state (a load balancer should not pull a gateway because a
// backend is down), and 503 while draining.
func (p *Proxy) health(w http.ResponseWriter, _ *http.Request) { p.writeHealth(w, "") }

// writeHealth is /health of the endpoints of type typ ("": all).
func (p *Proxy) writeHealth(w http.ResponseWriter, typ string) {
	type epState struct {
		Name        string `json:"name"`
		Type        string `json:"type"`
		Priority    int    `json:"priority"`
		Healthy     bool   `json:"healthy"`
		Outstanding int64  `json:"outstanding"`
		Models      int    `json:"models"`
	}
	out := struct {
		Status    string    `json:"status"`
		Endpoints []epState `json:"endpoints"`
	}{Status: "ok", Endpoints: []epState{}}
	healthy := 0
	eps := p.endpoints()
	if typ != "" {
		// A filtered copy: eps is the Set's own slice.
		var only []*endpoint
		for _, e := range eps {
			if e.cfg.Type == typ {
				only = append(only, e)
			}
		}
		eps = only
	}
	for _, e := range eps {
		n := 0
		if m := e.models.Load(); m != nil {
			n = len(*m)
		}
		h := e.Healthy()
		if h {
			healthy++
		}
		out.Endpoints = append(out.Endpoints, epState{e.cfg.Name, e.cfg.Type, e.cfg.Priority, h, e.Outstanding(), n})
	}
	code := http.StatusOK
	switch {
	case p.opts.Ready != nil && !p.opts.Ready():
		out.Status, code = "draining", http.StatusServiceUnavailable
	case len(eps) > 0 && healthy == 0:
		out.Status = "degraded"
	}
	httpapi.WriteJSON(w, code, out)
}

// EndpointNames lists the endpoints' names, configured and added.
func (p *Proxy) EndpointNames() []string {
	eps := p.endpoints()
	names := make([]string, len(eps))
	for i, e := range eps {
		names[i] = e.cfg.Name
	}
	return names
}
