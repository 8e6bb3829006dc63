package openaipool

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/vllmmetrics"
)

// The read-only view of the pool that the surfaces build on (the OpenAI surface's /v1/models and
// /health, Olla's routes): they answer from the pool's own routing table and endpoints, never
// from a copy of either.

// Endpoint is what a surface may read of one endpoint, as of the call.
type Endpoint struct {
	Name, Type string
	// URL is the endpoint's base URL without credentials or query: safe to show.
	URL         string
	Priority    int
	Healthy     bool
	Outstanding int64
	// Models counts the models its last discovery found.
	Models int
	// Aliases maps public model names to the names the endpoint serves them as.
	Aliases map[string]string
	// Stats counts the requests it served.
	Stats Stats
	// Health is what its health checks found.
	Health upstream.Health
	// VLLM is a vLLM endpoint's load and metrics page as its last health check scraped them;
	// nil when unknown (another type, not scraped yet, or the last scrape failed).
	VLLM *VLLMPage
}

// VLLMPage is one vLLM endpoint's scraped /metrics.
type VLLMPage struct {
	Load    vllmmetrics.Load
	Metrics *vllmmetrics.Metrics
}

// Route is one endpoint serving one public model name.
type Route struct {
	Endpoint, Type string
	Healthy        bool
	// Entry is the model's /v1/models entry as the endpoint reported it, or for an alias one
	// naming the alias (root: the served model).
	Entry json.RawMessage
}

// ModelRoutes is one public model name and the endpoints serving it, highest priority first.
type ModelRoutes struct {
	Name   string
	Routes []Route
}

// Endpoints returns every endpoint of the pool, in its order.
func (u *Pool) Endpoints() []Endpoint {
	eps := u.endpoints()
	out := make([]Endpoint, 0, len(eps))
	for _, e := range eps {
		n := 0
		if m := e.models.Load(); m != nil {
			n = len(*m)
		}
		shown := url.URL{Scheme: e.cfg.BaseURL.Scheme, Host: e.cfg.BaseURL.Host, Path: e.cfg.BaseURL.Path}
		v := Endpoint{Name: e.cfg.Name, Type: e.cfg.Type, URL: shown.String(), Priority: e.cfg.Priority, Healthy: e.Healthy(),
			Outstanding: e.Outstanding(), Models: n, Aliases: e.cfg.Aliases, Stats: e.stats.snapshot(), Health: e.Health()}
		if pg := e.vllm.Load(); pg != nil {
			v.VLLM = &VLLMPage{Load: pg.load, Metrics: pg.metrics}
		}
		out = append(out, v)
	}
	return out
}

// Table returns the routing table: every public model name, sorted, with its routes. keep, when
// set, picks the names to return (a surface's visibility rule), so the others cost nothing.
func (u *Pool) Table(keep func(model string) bool) []ModelRoutes {
	t := u.table.Load()
	out := make([]ModelRoutes, 0, len(t.names))
	for _, name := range t.names {
		if keep != nil && !keep(name) {
			continue
		}
		rs := t.routes[name]
		m := ModelRoutes{Name: name, Routes: make([]Route, len(rs))}
		for i, r := range rs {
			m.Routes[i] = Route{Endpoint: r.ep.cfg.Name, Type: r.ep.cfg.Type, Healthy: r.ep.Healthy(), Entry: entryJSON(r)}
		}
		out = append(out, m)
	}
	return out
}

// Get GETs path from the named endpoint, as the pool's health checks do (its headers, its
// client), reading at most limit bytes of the answer: for a surface that merges the endpoints'
// own lists.
func (u *Pool) Get(ctx context.Context, name, path string, limit int) (status int, body []byte, err error) {
	eps := u.endpoints()
	i := slices.IndexFunc(eps, func(e *endpoint) bool { return e.cfg.Name == name })
	if i < 0 {
		return 0, nil, fmt.Errorf("no endpoint %q", name)
	}
	e := eps[i]
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
	body, err = io.ReadAll(io.LimitReader(res.Body, int64(limit)+1))
	switch {
	case err != nil:
		return 0, nil, fmt.Errorf("%s: %w", e.cfg.Name, err)
	case len(body) > limit:
		return 0, nil, fmt.Errorf("%s: answer over %d bytes", e.cfg.Name, limit)
	}
	return res.StatusCode, body, nil
}

// endpointTypeKey carries a request's endpoint type scope in its context.
type endpointTypeKey struct{}

// WithEndpointType scopes the requests made under ctx to the endpoints of type typ (see Scope).
// Olla's provider routes (/olla/vllm/v1/...) are built on it.
func WithEndpointType(ctx context.Context, typ string) context.Context {
	return context.WithValue(ctx, endpointTypeKey{}, typ)
}

// Scope applies WithEndpointType's scope, if ctx has one, to a request for model: a model no
// endpoint of the type serves is a 404, and the routing considers only the type's endpoints.
func (u *Pool) Scope(ctx context.Context, model string) (context.Context, error) {
	typ, ok := ctx.Value(endpointTypeKey{}).(string)
	if !ok {
		return ctx, nil
	}
	routes := u.table.Load().routes[model]
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
