// Package olla serves Olla's routes (github.com/thushan/olla) beside the OpenAI surface, so that
// Olla's users keep their base URLs: /olla/{provider}/v1/... (one provider's endpoints, with that
// provider's native paths), /olla/proxy/v1/... (every endpoint, OpenAI's shape), Ollama's native
// API, the providers' health and vLLM's load, and /olla/models.
//
// It holds no routing table of its own: it reads the OpenAI surface's (openai.Proxy's Routes and
// Endpoints) and forwards through its Forwarder, so a provider-scoped request differs from its /v1
// twin only in the endpoints it may go to (openaipool.WithEndpointType). Olla's sticky sessions and
// X-Olla-* response headers apply on every route and live with the forwarding, in surface/openai.
package olla

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/infergate/infergate/upstream/vllmmetrics"
)

// providers maps Olla's provider names, aliases included, to infergate's endpoint types ("": any).
var providers = map[string]string{
	"vllm":              upstream.TypeVLLM,
	"sglang":            upstream.TypeSGLang,
	"llamacpp":          upstream.TypeLlamaCpp,
	"llama-cpp":         upstream.TypeLlamaCpp,
	"llama_cpp":         upstream.TypeLlamaCpp,
	"lm-studio":         upstream.TypeLMStudio,
	"lmstudio":          upstream.TypeLMStudio,
	"lm_studio":         upstream.TypeLMStudio,
	"openai":            "", // Olla's OpenAI prefix is inclusive: every endpoint speaks OpenAI's API
	"openai-compatible": "",
	"ollama":            upstream.TypeOllama,
}

// providerAny is Olla's universal route: every endpoint, OpenAI's shape.
const providerAny = "proxy"

// Mount serves Olla's routes under prefix (Olla's is /olla) on mux, from p's pool:
//
//   - {prefix}/{provider}/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models[/{model}]
//     for each provider (vllm, sglang, llamacpp, lm-studio, openai, ollama, with Olla's aliases),
//     routed only to endpoints of that type; {prefix}/proxy/v1/... routes to any;
//   - {prefix}/{provider}/health: that provider's endpoints, as /health reports them;
//   - {prefix}/ollama/api/...: Ollama's native API, passed to Ollama endpoints;
//   - {prefix}/models: every model with the providers and endpoints serving it.
//
// {prefix}/anthropic/ is not served here: the Anthropic Messages API mounts it.
func Mount(mux *http.ServeMux, prefix string, p *openai.Proxy) {
	o := &routes{p: p, forward: p.Forwarder()}
	scoped := func(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("provider")
			if id, ok := strings.CutPrefix(r.URL.Path, prefix+"/models/"); ok && name == "models" && r.Method == http.MethodGet {
				o.ollaModel(w, r, id) // /olla/models/{id}, where the id looks like a provider route's tail
				return
			}
			typ, ok := providers[strings.ToLower(name)]
			if !ok && name != providerAny {
				unknownProvider(name).Write(w)
				return
			}
			// The handlers below see the provider's own path, as its clients would send it to
			// the provider itself.
			rest := r.URL.Path[len(prefix)+1+len(name):]
			ctx := openai.WithOllaSticky(r.Context()) // keyed as Olla keys its sticky sessions
			if typ != "" {
				ctx = openaipool.WithEndpointType(ctx, typ)
			}
			r2 := r.WithContext(ctx)
			u := *r.URL
			u.Path, u.RawPath = rest, ""
			r2.URL = &u
			h(w, r2, typ)
		}
	}
	forward := scoped(func(w http.ResponseWriter, r *http.Request, _ string) { o.forward.ServeHTTP(w, r) })
	for _, path := range slices.Concat([]string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"}, openai.PoolingPaths, openai.AudioPaths) {
		mux.HandleFunc("POST "+prefix+"/{provider}"+path, forward)
	}
	mux.HandleFunc("GET "+prefix+"/{provider}/v1/models", scoped(o.listProviderModels))
	mux.HandleFunc("GET "+prefix+"/{provider}/v1/models/{model...}", scoped(func(w http.ResponseWriter, r *http.Request, typ string) {
		name := r.PathValue("model")
		for _, m := range p.Routes(r.Context()) {
			if e, ok := openai.HealthyEntry(m.Routes, typ); ok && m.Name == name {
				httpapi.WriteJSON(w, http.StatusOK, e)
				return
			}
		}
		pipeline.ModelNotFound(name).Write(w)
	}))
	mux.HandleFunc("GET "+prefix+"/{provider}/health", scoped(func(w http.ResponseWriter, r *http.Request, typ string) {
		if typ == upstream.TypeVLLM {
			o.vllmHealth(w)
			return
		}
		p.WriteHealth(w, typ)
	}))
	mux.HandleFunc("GET "+prefix+"/vllm/metrics", o.vllmMetrics)
	mux.HandleFunc(prefix+"/{provider}/api/", scoped(o.ollamaNative))
	// LM Studio's own model lists, answered from the table (for any other provider, its native API).
	for _, path := range []string{"/api/v0/models", "/api/v1/models"} {
		native := path == "/api/v0/models"
		mux.HandleFunc("GET "+prefix+"/{provider}"+path, scoped(func(w http.ResponseWriter, r *http.Request, typ string) {
			if typ != upstream.TypeLMStudio {
				o.ollamaNative(w, r, typ)
				return
			}
			if native {
				writeCompact(w, http.StatusOK, map[string]any{"object": "list", "data": lmstudioList(o.catalog(r, false, ""))})
				return
			}
			o.listProviderModels(w, r, typ)
		}))
	}
	mux.HandleFunc("GET "+prefix+"/models", o.ollaModels)
	mux.HandleFunc(prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, prefix+"/models/"); ok && r.Method == http.MethodGet {
			o.ollaModel(w, r, id) // /olla/models/{id}: any id, "" a 400
			return
		}
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

// routes are Olla's handlers over one OpenAI surface.
type routes struct {
	p       *openai.Proxy
	forward http.Handler
}

// listProviderModels is /v1/models of the endpoints of type typ ("": all).
func (o *routes) listProviderModels(w http.ResponseWriter, r *http.Request, typ string) {
	list := struct {
		Object string            `json:"object"`
		Data   []json.RawMessage `json:"data"`
	}{Object: "list", Data: []json.RawMessage{}}
	for _, m := range o.p.Routes(r.Context()) {
		if e, ok := openai.HealthyEntry(m.Routes, typ); ok {
			list.Data = append(list.Data, e)
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
func (o *routes) ollamaNative(w http.ResponseWriter, r *http.Request, typ string) {
	if typ != upstream.TypeOllama {
		pipeline.NotFound("", "unknown_url", fmt.Sprintf("Invalid URL (%s %s): the /api/ routes are Ollama's", r.Method, r.URL.Path)).Write(w)
		return
	}
	switch r.Method {
	case http.MethodPost:
		o.forward.ServeHTTP(w, r)
	case http.MethodGet, http.MethodHead:
		o.ollamaGet(w, r)
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
func (o *routes) ollamaGet(w http.ResponseWriter, r *http.Request) {
	var eps []openaipool.Endpoint
	for _, e := range o.p.Endpoints() {
		if e.Type == upstream.TypeOllama && e.Healthy {
			eps = append(eps, e)
		}
	}
	sort.SliceStable(eps, func(i, j int) bool { return eps[i].Priority > eps[j].Priority })
	merge := r.URL.Path == "/api/tags" || r.URL.Path == "/api/ps"
	if len(eps) == 0 {
		if merge { // as Olla answers: no Ollama endpoint lists no models
			writeCompact(w, http.StatusOK, map[string]any{"models": []any{}})
			return
		}
		pipeline.Unavailable("no_healthy_upstream", 0, "No healthy Ollama endpoint right now.").Write(w)
		return
	}
	type entry struct {
		Name  string `json:"name"`
		Model string `json:"model"`
	}
	var models []json.RawMessage
	seen := map[string]bool{}
	var lastErr error
	for _, e := range eps {
		status, body, err := o.p.Get(r.Context(), e.Name, r.URL.Path, maxOllamaList)
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
			lastErr = fmt.Errorf("%s: %s is not a model list: %w", e.Name, r.URL.Path, err)
			continue
		}
		for _, m := range list.Models {
			var id entry
			if json.Unmarshal(m, &id) != nil {
				continue
			}
			name := cmpOr(id.Name, id.Model)
			if name == "" || seen[name] || !o.p.Visible(r.Context(), publicName(e, name)) {
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
func publicName(e openaipool.Endpoint, name string) string {
	for public, served := range e.Aliases {
		if served == name {
			return public
		}
	}
	return name
}

// vllmHealth is /olla/vllm/health as Olla answers it, over the healthy vLLM endpoints whose
// /metrics their last health check read: requests running and waiting summed, the KV cache's
// usage averaged (vLLM's gpu_cache_usage_perc, now kv_cache_usage_perc: a fraction), the model
// loaded when any reports it; and each endpoint's own. 503 when no vLLM endpoint is healthy.
func (o *routes) vllmHealth(w http.ResponseWriter) {
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
	for _, e := range o.p.Endpoints() {
		if e.Type != upstream.TypeVLLM {
			continue
		}
		l := epLoad{Name: e.Name, Healthy: e.Healthy, Outstanding: e.Outstanding}
		if pg := e.VLLM; pg != nil && l.Healthy {
			u := pg.Load.KVCacheUsage
			l.ModelLoaded, l.KVCacheUsage, l.Running, l.Waiting, l.MetricsScraped = pg.Load.ModelLoaded, &u, pg.Load.Running, pg.Load.Waiting, true
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
func (o *routes) vllmMetrics(w http.ResponseWriter, _ *http.Request) {
	var pages []vllmmetrics.Page
	for _, e := range o.p.Endpoints() {
		if e.VLLM != nil && e.Type == upstream.TypeVLLM && e.Healthy {
			pages = append(pages, vllmmetrics.Page{Endpoint: e.Name, Metrics: e.VLLM.Metrics})
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_ = vllmmetrics.Expose(w, pages)
}
