package registry

import (
	"context"
	"log/slog"
	"sync"
	"time"

	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/upstream"
)

// OpenAIEndpoints is where chat, completions and embeddings registrations go: *openai.Proxy.
type OpenAIEndpoints interface {
	AddEndpoint(upstream.Endpoint) error
	RemoveEndpoint(name string) bool
}

// TensorBackends is where tensor registrations go: KServeTensors.
// Add and Remove are called from one goroutine, once per lease each (an updated lease is removed,
// then added again).
type TensorBackends interface {
	Add(TensorBackend) error
	Remove(leaseID string)
}

// TensorBackend is one registered tensor model.
type TensorBackend struct {
	// LeaseID is unique per registration; several leases may register the same model.
	LeaseID string
	// Model is the KServe model name.
	Model string
	// URL is the backend's KServe gRPC server: http:// (cleartext HTTP/2) or https:// (TLS).
	URL string
	// Priority: higher is preferred.
	Priority int
	// Config describes the model; its name is Model.
	Config *tensorv1.TensorModelConfig
}

// ApplierOptions configures an Applier. A nil target leaves its registrations unserved (logged).
type ApplierOptions struct {
	OpenAI  OpenAIEndpoints
	Tensors TensorBackends
	// CheckInterval and CheckTimeout are the health checks of the OpenAI endpoints it adds; zero
	// means openai's defaults. The lease already says the backend is alive; the checks catch a
	// backend that is alive but not serving.
	CheckInterval, CheckTimeout time.Duration
	Logger                      *slog.Logger
}

// Applier serves what a Store's watch reports: each registration becomes an OpenAI endpoint
// named EndpointName(lease) serving exactly its model with its kind (so /v1/models lists it), or
// a tensor backend; each removal takes it away.
type Applier struct {
	opts    ApplierOptions
	mu      sync.Mutex
	applied map[string]registryv1.ModelType // lease -> what was added for it
}

// NewApplier returns an Applier; feed it with Run, or pass Apply to Store.Watch.
func NewApplier(opts ApplierOptions) *Applier {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Applier{opts: opts, applied: map[string]registryv1.ModelType{}}
}

// Run applies store's registrations until ctx ends; it returns ctx's error.
func (a *Applier) Run(ctx context.Context, store Store) error {
	return store.Watch(ctx, a.Apply)
}

// EndpointName is the name of the OpenAI endpoint a lease's registration becomes (in metrics,
// logs and the response header naming the endpoint).
func EndpointName(leaseID string) string { return "registry:" + leaseID }

// Apply applies one event.
func (a *Applier) Apply(ev Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch ev.Type {
	case Added, Updated:
		a.remove(ev.LeaseID)
		a.add(ev.LeaseID, ev.Backend)
	case Removed:
		a.remove(ev.LeaseID)
	}
}

func (a *Applier) add(id string, b *registryv1.Backend) {
	log := a.opts.Logger.With("lease", id, "model", b.GetModelName(), "url", b.GetUrl())
	typ := b.GetModelType()
	if typ == registryv1.ModelType_MODEL_TYPE_TENSOR {
		if a.opts.Tensors == nil {
			log.Warn("registry: tensor backend registered, but this gateway serves no registered tensor models")
			return
		}
		err := a.opts.Tensors.Add(TensorBackend{LeaseID: id, Model: b.GetModelName(), URL: b.GetUrl(),
			Priority: int(b.GetPriority()), Config: tensorConfig(b)})
		if err != nil {
			log.Warn("registry: cannot serve registered tensor model", "err", err)
			return
		}
		a.applied[id] = typ
		log.Info("registry: serving registered tensor model")
		return
	}
	if a.opts.OpenAI == nil {
		log.Warn("registry: OpenAI backend registered, but this gateway has no OpenAI proxy")
		return
	}
	ep := upstream.Endpoint{
		Name:          EndpointName(id),
		URL:           b.GetUrl(),
		Type:          backendName(b.GetBackendType()),
		Priority:      int(b.GetPriority()),
		CheckInterval: a.opts.CheckInterval,
		CheckTimeout:  a.opts.CheckTimeout,
		Models:        []string{b.GetModelName()},
		SkipDiscovery: true,
		Kind:          typeName(typ),
	}
	if err := a.opts.OpenAI.AddEndpoint(ep); err != nil {
		log.Warn("registry: cannot serve registered model", "err", err)
		return
	}
	a.applied[id] = typ
	log.Info("registry: serving registered model", "endpoint", ep.Name, "kind", ep.Kind)
}

func (a *Applier) remove(id string) {
	typ, ok := a.applied[id]
	if !ok {
		return
	}
	delete(a.applied, id)
	if typ == registryv1.ModelType_MODEL_TYPE_TENSOR {
		a.opts.Tensors.Remove(id)
	} else {
		a.opts.OpenAI.RemoveEndpoint(EndpointName(id))
	}
	a.opts.Logger.Info("registry: stopped serving registered model", "lease", id)
}
