package engines

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
)

// Registry holds every model the gateway serves. It is safe for concurrent use; lookups take a
// read lock only.
type Registry struct {
	mu      sync.RWMutex
	entries map[string]*Entry
	order   []string // registration order, for stable listings
	admit   atomic.Pointer[Admission]
	visible atomic.Pointer[Visibility]
	sched   atomic.Pointer[SchedulerFactory]
	placer  atomic.Pointer[Placer]
}

// Placer puts models on GPUs: the CUDA engine (engines/cuda), in a binary built with it and on
// a machine with a GPU.
type Placer interface {
	// Place returns m serving under cfg, whose instance groups are KIND_GPU: the same model,
	// computed on the GPU. It refuses (UNIMPLEMENTED) a model it has no GPU version of.
	Place(m Model, cfg *inference.ModelConfig) (Model, error)
}

// GPUModel is a model that runs on a GPU itself (the CUDA engine's): registered, it is served as
// it is, without the Placer.
type GPUModel interface {
	Model
	// GPU is the ordinal of the GPU it runs on.
	GPU() int
}

// DeviceOrdinal reports the GPU the entry's model runs on when it takes tensors in GPU memory
// (Tensor.Device, Request.OutputBuffers): a GPUModel that no scheduler stands in front of (the
// dynamic batcher joins its requests' bytes on the host).
func (e *Entry) DeviceOrdinal() (int, bool) {
	g, ok := e.run.(GPUModel)
	if !ok || e.sched.Load() != nil {
		return 0, false
	}
	return g.GPU(), true
}

// place puts m on a GPU, serving under cfg.
func (r *Registry) place(m Model, cfg *inference.ModelConfig) (Model, error) {
	p := r.placer.Load()
	if p == nil {
		return nil, noGPUEngine(cfg.GetName())
	}
	return (*p).Place(m, cfg)
}

// noGPUEngine refuses a KIND_GPU instance group where there is no Placer.
func noGPUEngine(model string) error {
	return connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
		"failed to load '%s': its instance group has kind KIND_GPU, and this server has no GPU engine (a build with -tags cuda, on a machine whose CUDA driver sees a GPU)", model))
}

// SetPlacer makes p serve the KIND_GPU instance groups of models registered from now on and of
// config overrides (nil: they are refused, as on a machine without a GPU).
func (r *Registry) SetPlacer(p Placer) {
	if p == nil {
		r.placer.Store(nil)
	} else {
		r.placer.Store(&p)
	}
}

// SetScheduler makes f choose the scheduler (the dynamic batcher) of every entry registered or
// reconfigured from now on, and of every entry already registered (nil: every model runs its
// requests directly). Sequence and decoupled models never get one: their requests keep their
// order and their streams.
func (r *Registry) SetScheduler(f SchedulerFactory) {
	if f == nil {
		r.sched.Store(nil)
	} else {
		r.sched.Store(&f)
	}
	for _, e := range r.Entries() {
		r.schedule(e)
	}
}

// schedule sets e's scheduler from the registry's factory.
func (r *Registry) schedule(e *Entry) {
	f := r.sched.Load()
	if f == nil || e.seq != nil || e.Decoupled() {
		e.sched.Store(nil)
		return
	}
	if s := (*f)(e, e.run.Execute); s != nil {
		e.sched.Store(&s)
	} else {
		e.sched.Store(nil)
	}
}

// Visibility decides, from a request's context (the guard's API key), whether its caller may see
// a model at all: a model it may not see is, to that caller, a model that does not exist, so
// metadata, config, statistics, readiness, the repository index and inference answer for it
// exactly as for an unknown name, and a key cannot probe which models other tenants have.
type Visibility func(ctx context.Context, model string) bool

// SetVisibility makes the registry's listings and lookups for a caller see only what v allows
// (nil: every model).
func (r *Registry) SetVisibility(v Visibility) {
	if v == nil {
		r.visible.Store(nil)
		return
	}
	r.visible.Store(&v)
}

// Visible reports whether the caller of ctx may see model.
func (r *Registry) Visible(ctx context.Context, model string) bool {
	v := r.visible.Load()
	return v == nil || (*v)(ctx, model)
}

// ResolveFor is Resolve for the caller of ctx: a model it may not see is unknown to it.
func (r *Registry) ResolveFor(ctx context.Context, name, version string) (*Entry, error) {
	if !r.Visible(ctx, name) {
		return nil, UnknownModel(name)
	}
	return r.Resolve(name, version)
}

// EntriesFor is Entries, less the models the caller of ctx may not see.
func (r *Registry) EntriesFor(ctx context.Context) []*Entry {
	all := r.Entries()
	if r.visible.Load() == nil {
		return all
	}
	return slices.DeleteFunc(all, func(e *Entry) bool { return !r.Visible(ctx, e.Name()) })
}

// Admission decides whether a request may run on a model now: the guard's API key permissions,
// rate limits and load shedding. It returns the context the request runs with, and done, called
// once with the request's outcome (nil on success) after the model answered; or an error (a
// *connect.Error choosing the code) refusing the request.
type Admission func(ctx context.Context, e *Entry, r *Request) (context.Context, func(error), error)

// SetAdmission makes every request on every model pass a (nil: none).
func (r *Registry) SetAdmission(a Admission) {
	if a == nil {
		r.admit.Store(nil)
		return
	}
	r.admit.Store(&a)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{entries: make(map[string]*Entry)}
}

// Register adds m under the name in its config, ready to serve as version 1. A second model with
// the same name is an ALREADY_EXISTS error.
func (r *Registry) Register(m Model) (*Entry, error) {
	cfg := m.Config()
	if cfg.GetName() == "" {
		return nil, errors.New("engines: model config has no name")
	}
	e := newEntry(m, cfg)
	e.reg = r
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[cfg.GetName()]; ok {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("model '%s' is already registered", cfg.GetName()))
	}
	if _, placed := m.(GPUModel); onGPU(cfg) && !placed {
		run, err := r.place(m, cfg)
		if err != nil {
			return nil, err
		}
		e.run = run
	}
	r.schedule(e)
	r.entries[cfg.GetName()] = e
	r.order = append(r.order, cfg.GetName())
	return e, nil
}

// Remove takes the named model out of the registry, as if it had never been registered: it leaves
// RepositoryIndex and requests for it get NOT_FOUND. Requests already running finish. It reports
// whether the model was there.
func (r *Registry) Remove(name string) bool {
	r.mu.Lock()
	e, ok := r.entries[name]
	if ok {
		delete(r.entries, name)
		r.order = slices.DeleteFunc(r.order, func(n string) bool { return n == name })
	}
	r.mu.Unlock()
	if ok {
		e.ready.Store(false)
		if e.seq != nil {
			e.seq.reset()
		}
	}
	return ok
}

// Lookup returns the entry named name whatever its state, or nil.
func (r *Registry) Lookup(name string) *Entry {
	r.mu.RLock()
	e := r.entries[name]
	r.mu.RUnlock()
	return e
}

// Entries returns every entry in registration order.
func (r *Registry) Entries() []*Entry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Entry, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, r.entries[n])
	}
	return out
}

// AllReady reports whether every registered model is ready (Triton's strict readiness).
func (r *Registry) AllReady() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, e := range r.entries {
		if !e.Ready() {
			return false
		}
	}
	return true
}

// Resolve finds the model a request names, with Triton's errors: NOT_FOUND for an unknown model or
// version or a model with no ready version, UNAVAILABLE for a known version that is not ready,
// INVALID_ARGUMENT for a version string that is not a positive integer. An empty version means the
// latest ready one.
func (r *Registry) Resolve(name, version string) (*Entry, error) {
	e := r.Lookup(name)
	if e == nil {
		return nil, UnknownModel(name)
	}
	if version == "" {
		if !e.Ready() {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("Request for unknown model: '%s' has no available versions", name))
		}
		return e, nil
	}
	v, err := strconv.ParseInt(version, 10, 64)
	if err != nil || v <= 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("failed to get model version from specified version string '%s' (details: stoll), version should be an integral value > 0", version))
	}
	if v != e.version {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("Request for unknown model: '%s' version %d is not found", name, v))
	}
	if !e.Ready() {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("Request for unknown model: '%s' version %d is not at ready state", name, v))
	}
	return e, nil
}

// UnknownModel is Triton's NOT_FOUND error for a model name the server does not know.
func UnknownModel(name string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("Request for unknown model: '%s' is not found", name))
}

// UnknownLoad is Triton's error for loading a model its repository does not have.
func UnknownLoad(name string) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("failed to load '%s', failed to poll from model repository", name))
}

// UnknownUnload is Triton's error for unloading a model it does not have.
func UnknownUnload(name string) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("failed to unload '%s', no version is available", name))
}

// Load makes a registered model ready again. Models are registered in code, so loading a name that
// was never registered fails the way Triton fails for a model missing from its repository.
func (r *Registry) Load(name string) error {
	e := r.Lookup(name)
	if e == nil {
		return UnknownLoad(name)
	}
	if e.Overridden() {
		// As in Triton, a load without an override undoes the last one.
		return r.Reconfigure(name, nil)
	}
	e.ready.Store(true)
	return nil
}

// Unload marks a model unavailable; requests then fail until it is loaded again.
func (r *Registry) Unload(name string) error {
	e := r.Lookup(name)
	if e == nil {
		return UnknownUnload(name)
	}
	e.ready.Store(false)
	if e.seq != nil {
		e.seq.reset()
	}
	return nil
}

// Entry is one model in the registry: the model, its derived metadata, readiness and statistics.
type Entry struct {
	model    Model // the model as registered
	run      Model // what serves the entry's config: model, or its GPU placement
	cfg      *inference.ModelConfig
	version  int64
	versionS string
	meta     *inference.ModelMetadataResponse
	inputs   map[string]int // config input index by name
	outputs  map[string]int // config output index by name
	required int            // number of non-optional inputs
	ready    atomic.Bool
	seq      *sequencer
	sched    atomic.Pointer[Scheduler] // nil: requests run the model directly
	reg      *Registry
	Stats    Stats
}

func newEntry(m Model, cfg *inference.ModelConfig) *Entry {
	e := &Entry{
		model:    m,
		run:      m,
		cfg:      cfg,
		version:  1,
		versionS: "1",
		inputs:   make(map[string]int, len(cfg.GetInput())),
		outputs:  make(map[string]int, len(cfg.GetOutput())),
	}
	for i, in := range cfg.GetInput() {
		e.inputs[in.GetName()] = i
		if !in.GetOptional() {
			e.required++
		}
	}
	for i, out := range cfg.GetOutput() {
		e.outputs[out.GetName()] = i
	}
	e.meta = metadataOf(cfg, e.versionS)
	if sb := cfg.GetSequenceBatching(); sb != nil {
		e.seq = newSequencer(cfg.GetName(), sb, cfg.GetMaxBatchSize() > 0)
	}
	e.ready.Store(true)
	return e
}

// Name is the model's name.
func (e *Entry) Name() string { return e.cfg.GetName() }

// Version is the version the entry serves, as Triton prints it ("1").
func (e *Entry) Version() string { return e.versionS }

// Config is the model's Triton model configuration. Callers must not modify it.
func (e *Entry) Config() *inference.ModelConfig { return e.cfg }

// Metadata is the model's KServe metadata. Callers must not modify it.
func (e *Entry) Metadata() *inference.ModelMetadataResponse { return e.meta }

// Ready reports whether the model is loaded and serving.
func (e *Entry) Ready() bool { return e.ready.Load() }

// Decoupled reports whether the model may send zero or many responses per request.
func (e *Entry) Decoupled() bool { return e.cfg.GetModelTransactionPolicy().GetDecoupled() }

// RequestDecoupled reports whether r is answered as a decoupled model answers (zero or more
// responses, the last one final): always for a decoupled model, and for a RequestDecoupler when r
// asks for it.
func (e *Entry) RequestDecoupled(r *Request) bool {
	if e.Decoupled() {
		return true
	}
	d, ok := e.model.(RequestDecoupler)
	return ok && d.RequestDecoupled(r)
}

// OutputIndex returns the position of the named output in the config, or -1.
func (e *Entry) OutputIndex(name string) int {
	if i, ok := e.outputs[name]; ok {
		return i
	}
	return -1
}

// Execute runs a validated request: it passes the registry's Admission, sequence models get their
// control tensors, then the model runs.
func (e *Entry) Execute(ctx context.Context, req *Request, send func(*Response) error) (err error) {
	if e.reg != nil {
		if a := e.reg.admit.Load(); a != nil {
			var done func(error)
			if ctx, done, err = (*a)(ctx, e, req); err != nil {
				return err
			}
			defer func() { done(err) }()
		}
	}
	if e.seq != nil {
		if err := e.seq.admit(req, time.Now()); err != nil {
			return err
		}
	}
	if s := e.sched.Load(); s != nil {
		return (*s).Execute(ctx, req, send)
	}
	return e.run.Execute(ctx, req, send)
}

// Batched reports whether a scheduler (the dynamic batcher) stands in front of the model, as
// the registry's SchedulerFactory decided.
func (e *Entry) Batched() bool { return e.sched.Load() != nil }

// Remote reports whether the entry's model runs outside the gateway (a RemoteModel: a registered
// backend or an upstream server's model).
func (e *Entry) Remote() bool {
	_, ok := e.model.(*RemoteModel)
	return ok
}

func metadataOf(cfg *inference.ModelConfig, version string) *inference.ModelMetadataResponse {
	batch := cfg.GetMaxBatchSize() > 0
	shape := func(dims []int64) []int64 {
		if batch {
			return append([]int64{-1}, dims...)
		}
		return slices.Clone(dims)
	}
	platform := cfg.GetPlatform()
	if platform == "" {
		platform = cfg.GetBackend()
	}
	m := &inference.ModelMetadataResponse{Name: cfg.GetName(), Versions: []string{version}, Platform: platform}
	for _, in := range cfg.GetInput() {
		m.Inputs = append(m.Inputs, &inference.ModelMetadataResponse_TensorMetadata{
			Name: in.GetName(), Datatype: tensor.Name(in.GetDataType()), Shape: shape(in.GetDims()),
		})
	}
	for _, out := range cfg.GetOutput() {
		m.Outputs = append(m.Outputs, &inference.ModelMetadataResponse_TensorMetadata{
			Name: out.GetName(), Datatype: tensor.Name(out.GetDataType()), Shape: shape(out.GetDims()),
		})
	}
	return m
}
