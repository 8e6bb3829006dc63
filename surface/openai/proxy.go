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
//
// It is built in two steps, along the line between routing and the stages: NewUpstreams builds
// the pool (endpoints, health checks, discovery, the routing table, Post), which stages may use
// (the response cache's embeddings, vLLM's /tokenize); NewProxy builds the surface on it, with the
// stages each model's requests pass through. New does both at once.
package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"google.golang.org/grpc"
)

// Options configures New, which builds the Upstreams and the Proxy on them in one step: the
// fields of UpstreamOptions and of ProxyOptions, documented there.
type Options struct {
	// Upstreams' (UpstreamOptions).
	Endpoints         []upstream.Endpoint
	Logger            *slog.Logger
	DiscoveryInterval time.Duration
	StripHeaders      []string
	Breaker           breaker.Breaker
	UpstreamClient    string

	// The surface's (ProxyOptions).
	MaxBodyBytes int64
	Ready        func() bool
	Stages       func(model string) []pipeline.Interceptor
	Visible      func(ctx context.Context, model string) bool
	Tokens       func(ctx context.Context, path string, body []byte) (status int, answer []byte, err *pipeline.Error)
	OllaHeaders  bool
}

// ProxyOptions configures the surface NewProxy builds on Upstreams.
type ProxyOptions struct {
	// MaxBodyBytes limits a request body; default 64 MiB (multimodal requests carry base64 images).
	MaxBodyBytes int64
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
	// Tokens, when set, answers OpenAIService's Tokenize and Detokenize RPCs: given vLLM's path
	// (/tokenize or /detokenize) and the request as that endpoint's JSON body, it returns the HTTP
	// status and JSON answer, or the gateway's own error. The gateway sets it to the function
	// that serves those HTTP endpoints (prompt.Endpoints.Serve), so the two surfaces answer
	// alike. Unset, the RPCs are UNIMPLEMENTED.
	Tokens func(ctx context.Context, path string, body []byte) (status int, answer []byte, err *pipeline.Error)
	// OllaHeaders adds Olla's response headers (X-Olla-Request-ID, -Endpoint, -Model,
	// -Backend-Type, -Response-Time) beside the gateway's own X-Infergate-* ones.
	OllaHeaders bool
}

// Proxy is the OpenAI surface over an Upstreams pool: OpenAI's HTTP API, OpenAIService and Olla's
// routes, each request through its model's stages to the pool's routing. The pool's methods
// (Start, Close, Models, Post, AddEndpoint, ...) are the Proxy's too. Create it with NewProxy (or
// New, for both at once), call Start, mount it with Mount, and register Collectors on the
// gateway's metrics registry.
type Proxy struct {
	*Upstreams
	opts ProxyOptions
	// chains holds each served model's pipeline: its Stages around the pool's upstream exchange,
	// rebuilt with the pool's routing table (before the table is published).
	chains atomic.Pointer[map[string]pipeline.Handler]
	// affinity pins Olla's sticky sessions (X-Olla-Session-ID) to endpoints.
	affinity *affinity
}

// New validates the endpoints and builds the pool and the proxy on it: NewUpstreams, then
// NewProxy. It does no I/O; Start begins health checks.
func New(opts Options) (*Proxy, error) {
	u, err := NewUpstreams(UpstreamOptions{Endpoints: opts.Endpoints, Logger: opts.Logger, DiscoveryInterval: opts.DiscoveryInterval,
		StripHeaders: opts.StripHeaders, Breaker: opts.Breaker, UpstreamClient: opts.UpstreamClient})
	if err != nil {
		return nil, err
	}
	return NewProxy(u, ProxyOptions{MaxBodyBytes: opts.MaxBodyBytes, Ready: opts.Ready, Stages: opts.Stages,
		Visible: opts.Visible, Tokens: opts.Tokens, OllaHeaders: opts.OllaHeaders}), nil
}

// NewProxy builds the OpenAI surface on u: from then on, each model u routes has its chain of
// opts.Stages, rebuilt with u's routing table before u publishes it.
func NewProxy(u *Upstreams, opts ProxyOptions) *Proxy {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 20
	}
	p := &Proxy{Upstreams: u, opts: opts, affinity: newAffinity()}
	u.chain(p.rechain)
	return p
}

// rechain builds the pipeline of each model name: its Stages around the pool's terminal handler.
func (p *Proxy) rechain(names []string) {
	chains := make(map[string]pipeline.Handler, len(names))
	for _, name := range names {
		chains[name] = p.terminal
		if p.opts.Stages != nil {
			chains[name] = pipeline.Chain(p.terminal, p.opts.Stages(name)...)
		}
	}
	p.chains.Store(&chains)
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
