package openai

import (
	"context"
	"net/http"

	"github.com/infergate/infergate/upstream/openaipool"
)

// What other surfaces built beside this one (Olla's routes in surface/olla) read and use: the
// pool's table as this surface's callers may see it, its health answer, and its forwarding.

// Routes returns the pool's routing table less the models the caller of ctx may not see
// (ProxyOptions.Visible), sorted by name.
func (p *Proxy) Routes(ctx context.Context) []openaipool.ModelRoutes {
	return p.Table(func(model string) bool { return p.visible(ctx, model) })
}

// Visible reports whether the caller of ctx may see the public model name.
func (p *Proxy) Visible(ctx context.Context, model string) bool { return p.visible(ctx, model) }

// WriteHealth writes /health's answer for the endpoints of type typ ("": all of them).
func (p *Proxy) WriteHealth(w http.ResponseWriter, typ string) { p.writeHealth(w, typ) }

// Forwarder is the handler that passes a POST to the upstreams as the OpenAI API's routes do,
// at the request's own path: the model's pipeline, routing, failover, the response streamed
// back. The Anthropic Messages API's native path and Olla's routes use it; a request whose
// context carries openaipool.WithEndpointType goes only to endpoints of that type.
func (p *Proxy) Forwarder() http.Handler { return http.HandlerFunc(p.proxy) }
