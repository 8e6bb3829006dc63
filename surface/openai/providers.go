package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/vllmmetrics"
)

// Olla's routes: its clients are configured with base URLs such as /olla/vllm/v1 (one provider's
// endpoints, with that provider's native paths) or /olla/proxy/v1 (every endpoint, OpenAI's
// shape). MountOlla serves them from the same routing table as /v1, so a provider-scoped request
// differs from its /v1 twin only in the endpoints it may go to: a filter in its context, which
// Handle turns into a 404 for a model no endpoint of the provider serves, and into the routing's
// endpoint filter for the rest.

// providers maps Olla's provider names, aliases included, to infergate's endpoint types.
var providers = map[string]string{
	"vllm":              upstream.TypeVLLM,
	"sglang":            upstream.TypeSGLang,
	"llamacpp":          upstream.TypeLlamaCpp,
	"llama-cpp":         upstream.TypeLlamaCpp,
	"llama_cpp":         upstream.TypeLlamaCpp,
	"lm-studio":         upstream.TypeLMStudio,
	"lmstudio":          upstream.TypeLMStudio,
	"lm_studio":         upstream.TypeLMStudio,
	"openai":            upstream.TypeOpenAI,
	"openai-compatible": upstream.TypeOpenAI,
	"ollama":            upstream.TypeOllama,
}

// providerAny is Olla's universal route: every endpoint, OpenAI's shape.
const providerAny = "proxy"

// providerKey carries a provider-scoped request's endpoint type in its context.
type providerKey struct{}

// MountOlla serves Olla's routes under prefix (Olla's is /olla) on mux:
//
//   - {prefix}/{provider}/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models[/{model}]
//     for each provider (vllm, sglang, llamacpp, lm-studio, openai, ollama, with Olla's aliases),
//     routed only to endpoints of that type; {prefix}/proxy/v1/... routes to any;
//   - {prefix}/{provider}/health: that provider's endpoints, as /health reports them;
//   - {prefix}/ollama/api/...: Ollama's native API, passed to Ollama endpoints;
//   - {prefix}/models: every model with the providers and endpoints serving it.
//
// {prefix}/anthropic/ is not served here: the Anthropic Messages API mounts it.
func (p *Proxy) MountOlla(mux *http.ServeMux, prefix string) {
	scoped := func(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("provider")
			typ, ok := providers[strings.ToLower(name)]
			if !ok && name != providerAny {
				unknownProvider(name).Write(w)
				return
			}
			// The handlers below see the provider's own path, as its clients would send it to
			// the provider itself.
			rest := r.URL.Path[len(prefix)+1+len(name):]
			r2 := r
			if typ != "" {
				r2 = r.WithContext(context.WithValue(r.Context(), providerKey{}, typ))
			} else {
				r2 = new(http.Request)
				*r2 = *r
			}
			u := *r.URL
			u.Path, u.RawPath = rest, ""
			r2.URL = &u
			h(w, r2, typ)
		}
	}
	forward := scoped(func(w http.ResponseWriter, r *http.Request, _ string) { p.proxy(w, r) })
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		mux.HandleFunc("POST "+prefix+"/{provider}"+path, forward)
	}
	mux.HandleFunc("GET "+prefix+"/{provider}/v1/models", scoped(p.listProviderModels))
	mux.HandleFunc("GET "+prefix+"/{provider}/v1/models/{model...}", scoped(func(w http.ResponseWriter, r *http.Request, typ string) {
		name := r.PathValue("model")
		rt, ok := healthyOfType(p.table.Load().routes[name], typ)
		if !ok || !p.visible(r.Context(), name) {
			pipeline.ModelNotFound(name).Write(w)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, entryJSON(rt))
	}))
	mux.HandleFunc("GET "+prefix+"/{provider}/health", scoped(func(w http.ResponseWriter, r *http.Request, typ string) {
		if typ == upstream.TypeVLLM {
			p.vllmHealth(w)
			return
		}
		p.writeHealth(w, typ)
	}))
	mux.HandleFunc("GET "+prefix+"/vllm/metrics", p.vllmMetrics)
	mux.HandleFunc(prefix+"/{provider}/api/", scoped(p.ollamaNative))
	mux.HandleFunc("GET "+prefix+"/models", p.ollaModels)
	mux.HandleFunc(prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, prefix+"/"), "/")
		if _, ok := providers[strings.ToLower(name)]; !ok && name != providerAny {
			unknownProvider(name).Write(w)
			return
		}
		pipeline.NotFound("", "unknown_url", fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)).Write(w)
	})
}

// unknownProvider is the 404 of a provider prefix that names no provider.
func unknownProvider(name string) *pipeline.Error {
	known := slices.Sorted(maps.Keys(providers))
	return pipeline.NotFound("", "unknown_provider", fmt.Sprintf("Unknown provider `%s`: the provider-scoped routes are %s and %s (every provider).",
		name, strings.Join(known, ", "), providerAny))
}

// scopeToProvider applies a provider-scoped request's endpoint type: a model no endpoint of the
// type serves is not found, and the routing considers only the type's endpoints.
func (p *Proxy) scopeToProvider(ctx context.Context, model string) (context.Context, error) {
	typ, ok := ctx.Value(providerKey{}).(string)
	if !ok {
		return ctx, nil
	}
	routes := p.table.Load().routes[model]
	if !slices.ContainsFunc(routes, func(r *route) bool { return r.ep.cfg.Type == typ }) {
		return ctx, pipeline.NotFound("model", "model_not_found",
			fmt.Sprintf("The model `%s` is not served by any %s endpoint.", model, typ))
	}
	return upstream.WithFilter(ctx, func(endpoint string) bool {
		for _, r := range routes {
			if r.ep.cfg.Name == endpoint {
				return r.ep.cfg.Type == typ
			}
		}
		return false
	}), nil
}

// healthyOfType is healthyEntry among the endpoints of type typ ("": any).
func healthyOfType(rs []*route, typ string) (*route, bool) {
	for _, r := range rs {
		if r.ep.Healthy() && (typ == "" || r.ep.cfg.Type == typ) {
			return r, true
		}
	}
	return nil, false
}

func (p *Proxy) listProviderModels(w http.ResponseWriter, r *http.Request, typ string) {
	list := struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{Object: "list", Data: []json.RawMessage{}}
	t := p.table.Load()
	for _, name := range t.names {
		if !p.visible(r.Context(), name) {
			continue
		}
		if rt, ok := healthyOfType(t.routes[name], typ); ok {
			list.Data = append(list.Data, entryJSON(rt))
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, list)
}

// ollaModels lists every model a healthy endpoint serves, with the providers (endpoint types) and
// endpoints serving it: which base URL reaches it.
func (p *Proxy) ollaModels(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID        string   `json:"id"`
		Object    string   `json:"object"`
		Providers []string `json:"providers"`
		Endpoints []string `json:"endpoints"`
	}
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	t := p.table.Load()
	for _, name := range t.names {
		if !p.visible(r.Context(), name) {
			continue
		}
		m := model{ID: name, Object: "model"}
		for _, rt := range t.routes[name] {
			if !rt.ep.Healthy() {
				continue
			}
			m.Endpoints = append(m.Endpoints, rt.ep.cfg.Name)
			if !slices.Contains(m.Providers, rt.ep.cfg.Type) {
				m.Providers = append(m.Providers, rt.ep.cfg.Type)
			}
		}
		if len(m.Endpoints) > 0 {
			sort.Strings(m.Providers)
			list.Data = append(list.Data, m)
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, list)
}

// ollamaNative passes Ollama's own API to Ollama endpoints. Requests naming a model (chat,
// generate, embed, show, ...) go through the model's pipeline like any other: the guard's
// budgets, routing among the Ollama endpoints serving it, failover, breakers, metrics. Ollama
// streams newline-delimited JSON (and does by default), which passes chunk by chunk. GET
// /api/tags and /api/ps merge the healthy Ollama endpoints' lists; other GETs (/api/version) go
// to one of them.
func (p *Proxy) ollamaNative(w http.ResponseWriter, r *http.Request, typ string) {
	if typ != upstream.TypeOllama {
		pipeline.NotFound("", "unknown_url", fmt.Sprintf("Invalid URL (%s %s): the /api/ routes are Ollama's", r.Method, r.URL.Path)).Write(w)
		return
	}
	switch r.Method {
	case http.MethodPost:
		p.proxy(w, r)
	case http.MethodGet, http.MethodHead:
		p.ollamaGet(w, r)
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		(&pipeline.Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
			Message: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)}).Write(w)
	}
}

// maxOllamaList bounds one Ollama endpoint's answer to a GET read for merging.
const maxOllamaList = 8 << 20

// ollamaGet answers a GET of Ollama's API from the healthy Ollama endpoints: the model lists
// (/api/tags, /api/ps) merged (first endpoint wins for a name, in priority order, and only the
// models the caller may see), anything else from the first endpoint that answers.
func (p *Proxy) ollamaGet(w http.ResponseWriter, r *http.Request) {
	var eps []*endpoint
	for _, e := range p.endpoints() {
		if e.cfg.Type == upstream.TypeOllama && e.Healthy() {
			eps = append(eps, e)
		}
	}
	sort.SliceStable(eps, func(i, j int) bool { return eps[i].cfg.Priority > eps[j].cfg.Priority })
	if len(eps) == 0 {
		pipeline.Unavailable("no_healthy_upstream", 0, "No healthy Ollama endpoint right now.").Write(w)
		return
	}
	merge := r.URL.Path == "/api/tags" || r.URL.Path == "/api/ps"
	type entry struct {
		Name  string `json:"name"`
		Model string `json:"model"`
	}
	var models []json.RawMessage
	seen := map[string]bool{}
	var lastErr error
	for _, e := range eps {
		status, body, err := p.getFrom(r.Context(), e, r.URL.Path)
		if err != nil {
			lastErr = err
			continue
		}
		if !merge || status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write(body)
			return
		}
		var list struct {
			Models []json.RawMessage `json:"models"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			lastErr = fmt.Errorf("%s: %s is not a model list: %w", e.cfg.Name, r.URL.Path, err)
			continue
		}
		for _, m := range list.Models {
			var id entry
			if json.Unmarshal(m, &id) != nil {
				continue
			}
			name := cmpOr(id.Name, id.Model)
			if name == "" || seen[name] || !p.visible(r.Context(), p.publicName(e, name)) {
				continue
			}
			seen[name] = true
			models = append(models, m)
		}
	}
	if !merge || len(seen) == 0 && lastErr != nil {
		pipeline.ServerError(http.StatusBadGateway, "upstream_unreachable",
			fmt.Sprintf("No Ollama endpoint answered %s: %v", r.URL.Path, lastErr)).Write(w)
		return
	}
	if models == nil {
		models = []json.RawMessage{}
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string]any{"models": models})
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// publicName is the name clients use for the model endpoint e knows as name: its alias, if one
// maps to it.
func (p *Proxy) publicName(e *endpoint, name string) string {
	for public, served := range e.cfg.Aliases {
		if served == name {
			return public
		}
	}
	return name
}

// getFrom GETs path from endpoint e, reading at most maxOllamaList bytes of the answer.
func (p *Proxy) getFrom(ctx context.Context, e *endpoint, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.urlFor(path).String(), nil)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", e.cfg.Name, err)
	}
	e.setHeaders(req.Header)
	res, err := e.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %w", e.cfg.Name, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxOllamaList+1))
	switch {
	case err != nil:
		return 0, nil, fmt.Errorf("%s: %w", e.cfg.Name, err)
	case len(body) > maxOllamaList:
		return 0, nil, fmt.Errorf("%s: answer over %d bytes", e.cfg.Name, maxOllamaList)
	}
	return res.StatusCode, body, nil
}

// vllmHealth is /olla/vllm/health as Olla answers it, over the healthy vLLM endpoints whose
// /metrics their last health check read: requests running and waiting summed, the KV cache's
// usage averaged (vLLM's gpu_cache_usage_perc, now kv_cache_usage_perc: a fraction), the model
// loaded when any reports it; and each endpoint's own. 503 when no vLLM endpoint is healthy.
func (p *Proxy) vllmHealth(w http.ResponseWriter) {
	type epLoad struct {
		Name           string   `json:"name"`
		Healthy        bool     `json:"healthy"`
		ModelLoaded    bool     `json:"model_loaded"`
		KVCacheUsage   *float64 `json:"gpu_memory_usage"` // null: its metrics unknown
		Running        float64  `json:"num_requests_running"`
		Waiting        float64  `json:"num_requests_waiting"`
		Outstanding    int64    `json:"outstanding"`
		MetricsScraped bool     `json:"metrics_scraped"`
	}
	out := struct {
		Status      string   `json:"status"`
		ModelLoaded bool     `json:"model_loaded"`
		GPUMemory   float64  `json:"gpu_memory_usage"`
		Running     float64  `json:"num_requests_running"`
		Waiting     float64  `json:"num_requests_waiting"`
		Endpoints   []epLoad `json:"endpoints"`
	}{Status: "unhealthy", Endpoints: []epLoad{}}
	healthy, scraped := 0, 0
	for _, e := range p.endpoints() {
		if e.cfg.Type != upstream.TypeVLLM {
			continue
		}
		l := epLoad{Name: e.cfg.Name, Healthy: e.Healthy(), Outstanding: e.Outstanding()}
		if pg := e.vllm.Load(); pg != nil && l.Healthy {
			u := pg.load.KVCacheUsage
			l.ModelLoaded, l.KVCacheUsage, l.Running, l.Waiting, l.MetricsScraped = pg.load.ModelLoaded, &u, pg.load.Running, pg.load.Waiting, true
			out.ModelLoaded = out.ModelLoaded || l.ModelLoaded
			out.GPUMemory += u
			out.Running += l.Running
			out.Waiting += l.Waiting
			scraped++
		}
		if l.Healthy {
			healthy++
		}
		out.Endpoints = append(out.Endpoints, l)
	}
	if scraped > 0 {
		out.GPUMemory /= float64(scraped)
	}
	code := http.StatusServiceUnavailable
	if healthy > 0 {
		out.Status, code = "healthy", http.StatusOK
	}
	httpapi.WriteJSON(w, code, out)
}

// vllmMetrics is /olla/vllm/metrics: the vllm: series of every healthy vLLM endpoint's last
// scraped page, in Prometheus's text format, each sample labelled with its endpoint.
func (p *Proxy) vllmMetrics(w http.ResponseWriter, _ *http.Request) {
	var pages []vllmmetrics.Page
	for _, e := range p.endpoints() {
		if pg := e.vllm.Load(); pg != nil && e.cfg.Type == upstream.TypeVLLM && e.Healthy() {
			pages = append(pages, vllmmetrics.Page{Endpoint: e.cfg.Name, Metrics: pg.metrics})
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = vllmmetrics.Expose(w, pages)
}

// Forwarder is the handler that passes a POST to the upstreams as the OpenAI API's routes do,
// at the request's own path: the model's pipeline, routing, failover, the response streamed
// back. The Anthropic Messages API's native path uses it for /v1/messages.
func (p *Proxy) Forwarder() http.Handler { return http.HandlerFunc(p.proxy) }
