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
// It is built in two steps, along the line between routing and the stages: openaipool.New builds
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
	"slices"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
	"google.golang.org/grpc"
)

// Options configures New, which builds the pool and the Proxy on it in one step: the fields of
// openaipool.Options and of ProxyOptions, documented there.
type Options struct {
	// The pool's (openaipool.Options).
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

// ProxyOptions configures the surface NewProxy builds on a pool.
type ProxyOptions struct {
	// MaxBodyBytes limits a request body; default 64 MiB (multimodal requests carry base64 images).
	MaxBodyBytes int64
	// FormMemoryBytes is how much of a multipart form (the audio routes) is held in memory; the
	// rest waits in a temporary file in SpoolDir (default: os.TempDir(), $TMPDIR) until it is
	// sent. Default 1 MiB. MaxSpoolBytes caps what all forms being received or sent hold at
	// once, in memory and on disk; a form that would pass it is refused with a 503 and
	// Retry-After. Default 2 GiB.
	FormMemoryBytes int
	SpoolDir        string
	MaxSpoolBytes   int64
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

// Proxy is the OpenAI surface over an openaipool.Pool: OpenAI's HTTP API and OpenAIService, each
// request through its model's stages to the pool's routing. The pool's methods (Start, Close,
// Models, Post, AddEndpoint, ...) are the Proxy's too. Create it with NewProxy (or New, for both
// at once), call Start, mount it with Mount, and register Collectors on the gateway's metrics
// registry.
type Proxy struct {
	*openaipool.Pool
	opts ProxyOptions
	// chains holds each served model's pipeline: its Stages around the pool's upstream exchange,
	// rebuilt with the pool's routing table (before the table is published).
	chains atomic.Pointer[map[string]pipeline.Handler]
	// affinity pins Olla's sticky sessions (X-Olla-Session-ID) to endpoints.
	affinity *affinity
	// spoolBudget is MaxSpoolBytes, shared by the forms in flight.
	spoolBudget *httpapi.SpoolBudget
}

// New validates the endpoints and builds the pool and the proxy on it: NewUpstreams, then
// NewProxy. It does no I/O; Start begins health checks.
func New(opts Options) (*Proxy, error) {
	u, err := openaipool.New(openaipool.Options{Endpoints: opts.Endpoints, Logger: opts.Logger, DiscoveryInterval: opts.DiscoveryInterval,
		StripHeaders: opts.StripHeaders, Breaker: opts.Breaker, UpstreamClient: opts.UpstreamClient})
	if err != nil {
		return nil, err
	}
	return NewProxy(u, ProxyOptions{MaxBodyBytes: opts.MaxBodyBytes, Ready: opts.Ready, Stages: opts.Stages,
		Visible: opts.Visible, Tokens: opts.Tokens, OllaHeaders: opts.OllaHeaders}), nil
}

// NewProxy builds the OpenAI surface on u: from then on, each model u routes has its chain of
// opts.Stages, rebuilt with u's routing table before u publishes it.
func NewProxy(u *openaipool.Pool, opts ProxyOptions) *Proxy {
	if opts.FormMemoryBytes <= 0 {
		opts.FormMemoryBytes = 1 << 20
	}
	if opts.MaxSpoolBytes <= 0 {
		opts.MaxSpoolBytes = 2 << 30
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 20
	}
	p := &Proxy{Pool: u, opts: opts, affinity: newAffinity(), spoolBudget: httpapi.NewSpoolBudget(opts.MaxSpoolBytes)}
	u.OnRebuild(p.rechain)
	return p
}

// rechain builds the pipeline of each model name: its Stages around the pool's terminal handler.
func (p *Proxy) rechain(names []string) {
	chains := make(map[string]pipeline.Handler, len(names))
	terminal := p.Terminal()
	for _, name := range names {
		chains[name] = terminal
		if p.opts.Stages != nil {
			chains[name] = pipeline.Chain(terminal, p.opts.Stages(name)...)
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
	for _, path := range slices.Concat(PoolingPaths, AudioPaths) {
		mux.HandleFunc("POST "+path, p.proxy)
	}
	mux.HandleFunc("GET /health", p.health)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		pipeline.NotFound("", "unknown_url", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)).Write(w)
	})
}

// PoolingPaths are vLLM's routes for pooling models (rerankers, cross-encoders, classifiers, reward
// models) that the gateway forwards as it forwards completions: a JSON body naming the model,
// through the model's stages, routing, failover and metrics. Stages that rewrite prompts leave
// them alone (they act on chat and completion paths only).
var PoolingPaths = []string{"/v1/rerank", "/rerank", "/v2/rerank", "/v1/score", "/score", "/pooling", "/classify"}

// listModels answers with the union of the healthy endpoints' models, in OpenAI's list shape.
func (p *Proxy) listModels(w http.ResponseWriter, r *http.Request) {
	list := struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{Object: "list", Data: []json.RawMessage{}}
	for _, m := range p.Routes(r.Context()) {
		if e, ok := HealthyEntry(m.Routes, ""); ok {
			list.Data = append(list.Data, e)
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, list)
}

// HealthyEntry is the /v1/models entry of the first healthy route among routes of type typ ("":
// any): the model as a client of that route would list it.
func HealthyEntry(routes []openaipool.Route, typ string) (json.RawMessage, bool) {
	for _, r := range routes {
		if r.Healthy && (typ == "" || r.Type == typ) {
			return r.Entry, true
		}
	}
	return nil, false
}

// visible reports whether the caller of ctx may see model.
func (p *Proxy) visible(ctx context.Context, model string) bool {
	return p.opts.Visible == nil || p.opts.Visible(ctx, model)
}

func (p *Proxy) getModel(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("model")
	if p.visible(r.Context(), name) {
		for _, m := range p.Table(func(n string) bool { return n == name }) {
			if e, ok := HealthyEntry(m.Routes, ""); ok {
				httpapi.WriteJSON(w, http.StatusOK, e)
				return
			}
		}
	}
	pipeline.ModelNotFound(name).Write(w)
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
	eps := p.Endpoints()
	if typ != "" {
		eps = slices.DeleteFunc(eps, func(e openaipool.Endpoint) bool { return e.Type != typ })
	}
	for _, e := range eps {
		if e.Healthy {
			healthy++
		}
		out.Endpoints = append(out.Endpoints, epState{e.Name, e.Type, e.Priority, e.Healthy, e.Outstanding, e.Models})
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
