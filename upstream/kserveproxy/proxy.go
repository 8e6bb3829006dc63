// Package kserveproxy serves the models of KServe v2 gRPC upstreams (Triton, another infergate, any
// inference.GRPCInferenceService) through infergate's own KServe surface. Each upstream is an
// upstream.Endpoint of type kserve: health-checked (gRPC ServerReady, or an HTTP health_check_url),
// its models discovered (RepositoryIndex, then ModelConfig per model) and registered in the
// gateway's engines.Registry as remote models whose config is the upstream's own, returned
// verbatim by ModelConfig. Requests are validated by the gateway, then forwarded to the highest
// healthy priority tier and, inside it, the endpoint with the fewest outstanding requests:
// ModelInfer for ordinary models, one ModelStreamInfer call per request for decoupled ones, with
// failover to the next endpoint on UNAVAILABLE until a response has been relayed.
//
// Choices a user may want to know about:
//   - Health is gRPC ServerReady unless health_check_url is set; then it is an HTTP GET of that
//     URL answering 2xx (Triton's /v2/health/ready on its HTTP port, say). model_url is unused.
//   - Each upstream model is served as version 1 and forwarded without a version, so the upstream
//     serves its default (latest) version.
//   - Configured headers become gRPC metadata on every call; the client's own metadata and
//     per-input tensor parameters are not forwarded. Reserved request parameters the gateway
//     consumed are set again from the request (sequence flags) or become the call's deadline
//     (timeout); custom parameters pass as they are.
//   - A sequence's requests all go to the endpoint its START went to.
//   - A model stays registered while any endpoint's last discovery lists it, healthy or not;
//     with none healthy its requests fail UNAVAILABLE. A name the registry already holds (a
//     built-in) is not taken over: an alias can serve the upstream's model under another name.
//   - An endpoint added with its models' configs (Add with TensorModelConfigs: a backend that
//     registered itself) is not discovered: it serves exactly those models, once its first health
//     check passes, and is routed, failed over and removed like any other endpoint.
//   - When endpoints offer one name with different configs, discovered or supplied alike, the
//     served config is that of the highest-priority endpoint offering it (a healthy one if any;
//     among equals, the first configured or added), and endpoints whose config differs from it in
//     tensors, batching, decoupling or sequence controls are not routed to (logged) until it goes.
package kserveproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// Options configures a Proxy.
type Options struct {
	// Endpoints are the configured upstreams; those whose Type is not kserve are ignored (the
	// OpenAI proxy serves them), so the whole upstreams list can be passed.
	Endpoints []upstream.Endpoint
	// Registry receives the upstreams' models. Required.
	Registry *engines.Registry
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// DiscoveryInterval is how often each healthy endpoint's models are listed again; default 30 s.
	DiscoveryInterval time.Duration
	// MaxMessageBytes limits one message to or from an upstream; default
	// engines.DefaultMaxMessageBytes, as the gateway's own.
	MaxMessageBytes int
	// DialOptions are added to every endpoint's gRPC client (custom TLS roots, a test dialer).
	DialOptions []grpc.DialOption
	// Breaker, when set, guards every endpoint: an open endpoint is skipped, and each request's
	// outcome is reported (UNAVAILABLE, DEADLINE_EXCEEDED, INTERNAL and UNKNOWN are failures;
	// RESOURCE_EXHAUSTED cools the endpoint down).
	Breaker breaker.Breaker
}

// Proxy is the pool of KServe upstreams. Create it with New, call Start, register Collectors on
// the gateway's metrics registry, and Close it after the gateway drained.
type Proxy struct {
	opts Options
	log  *slog.Logger
	reg  *engines.Registry
	m    *metrics
	// set holds the endpoints, configured and added, and drives their health checks.
	set *upstream.Set[*endpoint]
	// router picks each request's endpoint (least outstanding in the highest healthy tier) and
	// fails over; its breaker is Options.Breaker.
	router upstream.Router

	mu      sync.Mutex // guards models, skipped and closed; taken after the set's lock
	models  map[string]*model
	skipped map[string]bool // public names held by someone else, warned about once
	closed  bool
}

// New validates the kserve endpoints among opts.Endpoints and builds a proxy. It does no I/O;
// Start checks the endpoints and registers their models.
func New(opts Options) (*Proxy, error) {
	if opts.Registry == nil {
		return nil, errors.New("kserveproxy: Options.Registry is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DiscoveryInterval <= 0 {
		opts.DiscoveryInterval = 30 * time.Second
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = engines.DefaultMaxMessageBytes
	}
	p := &Proxy{opts: opts, log: opts.Logger, reg: opts.Registry, m: newMetrics(),
		router: upstream.Router{Breaker: opts.Breaker}, models: map[string]*model{}, skipped: map[string]bool{}}
	p.set = upstream.NewSet(upstream.SetHooks[*endpoint]{
		State:             func(e *endpoint) *upstream.State { return &e.State },
		Config:            func(e *endpoint) *upstream.Resolved { return &e.cfg },
		Context:           func(e *endpoint) context.Context { return e.ctx },
		DiscoveryInterval: opts.DiscoveryInterval,
		Check: func(ctx context.Context, e *endpoint, due bool) bool {
			up, changed := e.probe(ctx, due)
			return up && (changed || !e.Healthy())
		},
		Publish: func(up []*endpoint) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.publishLocked(up...) // one rebuild for all: a model's served config is settled at once
		},
		Gauge: func(e *endpoint, healthy bool) {
			v := 0.0
			if healthy {
				v = 1
			}
			p.m.healthy.WithLabelValues(e.cfg.Name).Set(v)
		},
	})
	var (
		eps  []*endpoint
		errs []error
		seen = map[string]bool{}
	)
	for _, ep := range opts.Endpoints {
		if ep.Type != upstream.TypeKServe {
			continue
		}
		if seen[ep.Name] {
			errs = append(errs, &upstream.FieldError{Endpoint: ep.Name, Field: "name", Err: errors.New("duplicate endpoint name")})
			continue
		}
		seen[ep.Name] = true
		e, err := p.newEndpoint(ep)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		eps = append(eps, e)
	}
	if err := errors.Join(errs...); err != nil {
		for _, e := range eps {
			e.close()
		}
		return nil, err
	}
	for _, e := range eps {
		_ = p.set.Add(e, nil) // names are unique: checked above
		p.m.healthy.WithLabelValues(e.cfg.Name).Set(0)
	}
	return p, nil
}

func (p *Proxy) endpoints() []*endpoint { return p.set.All() }

func (p *Proxy) newEndpoint(ep upstream.Endpoint) (*endpoint, error) {
	e, err := newEndpoint(ep, p.opts, p.log)
	if err != nil {
		return nil, err
	}
	e.ctx, e.stop = context.WithCancel(p.set.Context())
	return e, nil
}

// Add adds a kserve endpoint at run time: it is checked at once, then like the configured ones,
// and its models are registered as soon as it is healthy. Names are unique across configured and
// added endpoints.
//
// Without configs the endpoint's models are discovered like a configured endpoint's. With configs
// (a backend that registered itself with its models' descriptions) the endpoint serves exactly
// those models, each with the config engines.NewRemoteModel builds from its TensorModelConfig, and
// is never asked for its repository or configs, only for its health. Add fails, adding nothing,
// when a config cannot be served (engines.NewRemoteModel refuses it, or names a model another
// config names) or names a model the registry holds for something other than this proxy (a
// built-in: AlreadyExists). With configs, ep.Models and ep.SkipDiscovery must be unset.
func (p *Proxy) Add(ep upstream.Endpoint, configs ...*tensorv1.TensorModelConfig) error {
	if ep.Type != upstream.TypeKServe {
		return &upstream.FieldError{Endpoint: ep.Name, Field: "type", Err: fmt.Errorf("%q is not kserve", ep.Type)}
	}
	var supplied map[string]*upstreamModel
	if len(configs) > 0 {
		if len(ep.Models) > 0 || ep.SkipDiscovery {
			return &upstream.FieldError{Endpoint: ep.Name, Field: "models", Err: errors.New("must be empty when the models' configs are supplied")}
		}
		var err error
		if supplied, err = suppliedModels(configs); err != nil {
			return fmt.Errorf("kserveproxy: endpoint %q: %w", ep.Name, err)
		}
	}
	e, err := p.newEndpoint(ep)
	if err != nil {
		return err
	}
	e.supplied = supplied
	err = p.set.Add(e, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.closed {
			return errors.New("kserveproxy: Add after Close")
		}
		for name := range supplied {
			if held := p.reg.Lookup(name); held != nil && (p.models[name] == nil || p.models[name].entry != held) {
				return connect.NewError(connect.CodeAlreadyExists,
					fmt.Errorf("kserveproxy: endpoint %q: model '%s' is already served by the gateway, not by a KServe upstream", ep.Name, name))
			}
		}
		return nil
	})
	if err != nil {
		e.stop()
		e.close()
		return err
	}
	p.m.healthy.WithLabelValues(e.cfg.Name).Set(0)
	return nil
}

// Remove stops routing to the named endpoint and closes its connection once requests in flight
// on it finish; models only it served leave the registry, and its metric series are dropped. It
// reports whether the endpoint existed.
func (p *Proxy) Remove(name string) bool {
	return p.set.Remove(name, func(e *endpoint) {
		p.mu.Lock()
		defer p.mu.Unlock()
		e.SetHealthy(false) // requests that loaded the old routes pass it by
		p.rebuildLocked()
		e.stop()
		p.m.forget(e.cfg.Name) // added endpoints come and go (one per registration): their series must too
		p.router.Forget(e.cfg.Name)
		if p.closed {
			e.close()
		} else {
			p.set.Go(func() { e.closeWhenIdle(p.set.Context()) })
		}
	})
}

// Start checks every endpoint once (concurrently, bounded by their check timeouts) and registers
// the models of the healthy ones, so the first requests can be served; then it keeps checking in
// the background until Close or ctx ends.
func (p *Proxy) Start(ctx context.Context) { p.set.Start(ctx) }

// publishLocked marks the endpoints in up, whose checks passed, healthy and then rebuilds the
// routes with them, under the lock Status takes (Status sees both or neither): a model the
// rebuild registers is never ready while the endpoint that brings it is out of rotation. A
// recovery rebuilds even when no model changed: a model's served config is a healthy
// endpoint's where one offers it.
func (p *Proxy) publishLocked(up ...*endpoint) {
	// Not one removed, or of a closed proxy, while it was being checked.
	up = slices.DeleteFunc(up, func(e *endpoint) bool { return e.ctx.Err() != nil })
	// Healthy first: a client that sees the model ready (ModelReady) sends requests at once.
	for _, e := range up {
		if !e.SetHealthy(true) {
			e.log.Info("upstream healthy")
		}
	}
	p.rebuildLocked(up...)
}

// Close stops health checks, takes the proxy's models out of the registry and closes the
// upstream connections. Call it after the gateway drained: requests still running fail.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.set.Close()
	p.mu.Lock()
	for name, m := range p.models {
		p.unregister(name, m)
	}
	p.mu.Unlock()
	for _, e := range p.endpoints() {
		e.close()
	}
}

// Collectors are the proxy's Prometheus metrics, for the gateway's registry.
func (p *Proxy) Collectors() []prometheus.Collector { return p.m.collectors() }

// EndpointStatus is one endpoint's state, for /health-like listings.
type EndpointStatus struct {
	Name        string   `json:"name"`
	URL         string   `json:"url"`
	Priority    int      `json:"priority"`
	Healthy     bool     `json:"healthy"`
	Outstanding int64    `json:"outstanding"`
	Models      []string `json:"models"` // the public names it serves, sorted
	// Health is what its health checks found (for the console; not in this JSON).
	Health upstream.Health `json:"-"`
}

// Status lists the endpoints in configuration order.
func (p *Proxy) Status() []EndpointStatus {
	// Health is read under the lock too: an endpoint turns healthy under it, with its routes.
	p.mu.Lock()
	defer p.mu.Unlock()
	served := map[*endpoint][]string{}
	for name, m := range p.models {
		for _, r := range *m.routes.Load() {
			served[r.ep] = append(served[r.ep], name)
		}
	}
	out := []EndpointStatus{}
	for _, e := range p.endpoints() {
		names := served[e]
		sort.Strings(names)
		out = append(out, EndpointStatus{Name: e.cfg.Name, URL: e.cfg.URL, Priority: e.cfg.Priority,
			Healthy: e.Healthy(), Outstanding: e.Outstanding(), Models: append([]string{}, names...), Health: e.Health()})
	}
	return out
}

// Models lists the public names of the models the proxy has registered, sorted.
func (p *Proxy) Models() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.models))
	for name := range p.models {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
