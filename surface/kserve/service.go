// Package kserve serves the KServe v2 / Triton inference.GRPCInferenceService over gRPC, gRPC-Web
// and Connect (one connect-go handler speaks all three), backed by an engines.Registry.
package kserve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/inflate"
	"github.com/infergate/infergate/surface/kserve/shm"
	"google.golang.org/protobuf/encoding/protojson"
)

// Extensions lists the Triton protocol extensions every service implements, as ServerMetadata
// reports them; a service with system shared memory on adds "system_shared_memory" (and
// "cuda_shared_memory" with WithCUDASharedMemory), one with a Tracer "trace", one with a log
// level "logging".
var Extensions = []string{"model_configuration", "model_repository", "statistics", "sequence", "parameters", "binary_tensor_data", "classification"}

// Service implements inference.GRPCInferenceService on a model registry.
type Service struct {
	reg      *engines.Registry
	name     string
	version  string
	maxBytes int
	draining atomic.Bool
	codec    *tensorCodec // the native gRPC transport's codec
	frames   *framePool   // and its buffer pool
	inflater *inflate.Inflater
	shm      *shm.Manager // nil: the system shared memory extension is off
	shmOwner func(context.Context) string
	shmOff   bool
	shmMax   int
	shmCUDA  shm.OpenCUDA // nil: CUDA shared memory answers as a GPU-less Triton
	exts     []string
	tracer   *tracing.Tracer // nil: the trace extension is off, and requests get no spans
	logs     *tracing.Logs   // nil: the logging extension is off
}

// Option configures a Service.
type Option func(*Service)

// WithServerName sets the name ServerMetadata reports (default "triton", which Triton's example
// clients check for).
func WithServerName(name string) Option { return func(s *Service) { s.name = name } }

// WithServerVersion sets the version ServerMetadata reports.
func WithServerVersion(v string) Option { return func(s *Service) { s.version = v } }

// WithMaxMessageBytes sets the largest request and response message accepted or sent.
func WithMaxMessageBytes(n int) Option { return func(s *Service) { s.maxBytes = n } }

// WithInflater sets the bounds compressed REST bodies inflate within (default: inflate's
// defaults, with a budget of the service's own).
func WithInflater(in *inflate.Inflater) Option { return func(s *Service) { s.inflater = in } }

// WithCUDASharedMemory serves Triton's CUDA shared memory extension, opening clients' CUDA IPC
// handles with open (the GPU engine's): regions live in the system shared memory extension's
// manager (its owners, cap and lifetime; see package shm), so the extension needs that one on.
// Without it (or with open nil) CudaSharedMemoryRegister answers UNIMPLEMENTED and Status and
// Unregister as a GPU-less Triton.
func WithCUDASharedMemory(open shm.OpenCUDA) Option { return func(s *Service) { s.shmCUDA = open } }

// NewService returns a service for the models in reg.
func NewService(reg *engines.Registry, opts ...Option) *Service {
	s := &Service{reg: reg, name: "triton", version: "dev", maxBytes: engines.DefaultMaxMessageBytes, codec: newTensorCodec(), frames: newFramePool()}
	for _, o := range opts {
		o(s)
	}
	if s.inflater == nil {
		s.inflater = inflate.New(inflate.Config{})
	}
	s.exts = slices.Clone(Extensions)
	if !s.shmOff && shm.Supported() {
		var opts []shm.Option
		if s.shmOwner != nil {
			// Callers are told apart (API keys): their objects must be too, or one could
			// register another's object under its own region name and read or overwrite it.
			opts = append(opts, shm.ExclusiveObjects())
		}
		if s.shmCUDA != nil {
			opts = append(opts, shm.WithCUDA(s.shmCUDA))
		}
		s.shm = shm.New(s.shmMax, opts...)
		s.exts = append(s.exts, extSystemSharedMemory)
		if s.shm.CUDA() {
			s.exts = append(s.exts, extCUDASharedMemory)
		}
	}
	if s.tracer != nil {
		s.exts = append(s.exts, extTrace)
	}
	if s.logs != nil {
		s.exts = append(s.exts, extLogging)
	}
	return s
}

// Handler returns the service's HTTP path prefix and handler, serving gRPC, gRPC-Web and Connect,
// gzip and deflate included (deflate bounded by the service's Inflater).
func (s *Service) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	opts = append([]connect.HandlerOption{
		connect.WithReadMaxBytes(s.maxBytes),
		connect.WithSendMaxBytes(s.maxBytes),
		s.inflater.ConnectCompression(),
	}, opts...)
	if s.tracer != nil {
		opts = append(opts, connect.WithInterceptors(s.tracer.Connect()))
	}
	return inferenceconnect.NewGRPCInferenceServiceHandler(s, opts...)
}

// Drain marks the server not ready, so health checks and load balancers stop sending new work
// while in-flight requests finish.
func (s *Service) Drain() { s.draining.Store(true) }

// Ready reports whether the server accepts new work.
func (s *Service) Ready() bool { return !s.draining.Load() }

func (s *Service) ServerLive(context.Context, *inference.ServerLiveRequest) (*inference.ServerLiveResponse, error) {
	return &inference.ServerLiveResponse{Live: true}, nil
}

func (s *Service) ServerReady(context.Context, *inference.ServerReadyRequest) (*inference.ServerReadyResponse, error) {
	return &inference.ServerReadyResponse{Ready: s.Ready()}, nil
}

func (s *Service) ServerMetadata(context.Context, *inference.ServerMetadataRequest) (*inference.ServerMetadataResponse, error) {
	return &inference.ServerMetadataResponse{Name: s.name, Version: s.version, Extensions: s.exts}, nil
}

// ModelReady answers false, not an error, for unknown or unloaded models, as released Triton does.
func (s *Service) ModelReady(ctx context.Context, req *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	_, err := s.reg.ResolveFor(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		if c := connect.CodeOf(err); c == connect.CodeNotFound || c == connect.CodeUnavailable {
			return &inference.ModelReadyResponse{Ready: false}, nil
		}
		return nil, err
	}
	return &inference.ModelReadyResponse{Ready: true}, nil
}

func (s *Service) ModelMetadata(ctx context.Context, req *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	e, err := s.reg.ResolveFor(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return e.Metadata(), nil
}

func (s *Service) ModelConfig(ctx context.Context, req *inference.ModelConfigRequest) (*inference.ModelConfigResponse, error) {
	e, err := s.reg.ResolveFor(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &inference.ModelConfigResponse{Config: e.Config()}, nil
}

func (s *Service) ModelStatistics(ctx context.Context, req *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	if req.GetName() == "" {
		resp := &inference.ModelStatisticsResponse{}
		for _, e := range s.reg.EntriesFor(ctx) {
			if e.Ready() {
				resp.ModelStats = append(resp.ModelStats, e.StatisticsProto())
			}
		}
		return resp, nil
	}
	e, err := s.reg.ResolveFor(ctx, req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	return &inference.ModelStatisticsResponse{ModelStats: []*inference.ModelStatistics{e.StatisticsProto()}}, nil
}

func (s *Service) RepositoryIndex(ctx context.Context, req *inference.RepositoryIndexRequest) (*inference.RepositoryIndexResponse, error) {
	resp := &inference.RepositoryIndexResponse{}
	for _, e := range s.reg.EntriesFor(ctx) {
		idx := &inference.RepositoryIndexResponse_ModelIndex{Name: e.Name(), Version: e.Version(), State: "READY"}
		if !e.Ready() {
			if req.GetReady() {
				continue
			}
			idx.State, idx.Reason = "UNAVAILABLE", "unloaded"
		}
		resp.Models = append(resp.Models, idx)
	}
	return resp, nil
}

// RepositoryModelLoad and RepositoryModelUnload change a model for every caller: the guard lets
// only keys with the control permission reach them, and a model the key may not see is, to it, a
// name missing from the repository.
func (s *Service) RepositoryModelLoad(ctx context.Context, req *inference.RepositoryModelLoadRequest) (*inference.RepositoryModelLoadResponse, error) {
	if !s.reg.Visible(ctx, req.GetModelName()) {
		return nil, engines.UnknownLoad(req.GetModelName())
	}
	if len(req.GetParameters()) == 0 {
		if err := s.reg.Load(req.GetModelName()); err != nil {
			return nil, err
		}
		return &inference.RepositoryModelLoadResponse{}, nil
	}
	if err := s.loadOverride(req.GetModelName(), req.GetParameters()); err != nil {
		return nil, err
	}
	return &inference.RepositoryModelLoadResponse{}, nil
}

// loadOverride loads a model with load parameters: a "config" override (a JSON ModelConfig, as
// Triton's clients send it) for a built-in model, within what engines.Entry.OverrideConfig can
// honour. Model files ("file:" parameters) have nowhere to go in infergate, and registered and
// remote models keep the config their backend gave; each refusal says so with Triton's codes.
func (s *Service) loadOverride(name string, params map[string]*inference.ModelRepositoryParameter) error {
	var config string
	hasConfig := false
	var file string
	for _, k := range slices.Sorted(maps.Keys(params)) {
		p := params[k]
		switch {
		case k == "config":
			v, ok := p.GetParameterChoice().(*inference.ModelRepositoryParameter_StringParam)
			if !ok {
				return invalid("invalid value type for load parameter 'config', expected string_param.")
			}
			config, hasConfig = v.StringParam, true
		case strings.HasPrefix(k, "file:"):
			switch p.GetParameterChoice().(type) {
			case *inference.ModelRepositoryParameter_BytesParam, *inference.ModelRepositoryParameter_StringParam: // REST sends base64 text
			default:
				return invalid("invalid value type for load parameter '%s', expected bytes_param.", k)
			}
			if file == "" {
				file = k
			}
		default:
			return invalid("unrecognized load parameter '%s'.", k)
		}
	}
	e := s.reg.Lookup(name)
	if e == nil {
		return engines.UnknownLoad(name)
	}
	if file != "" {
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
			"failed to load '%s': model file overrides ('%s') are not supported: infergate's models have no model files to replace", name, file))
	}
	if !hasConfig {
		return s.reg.Load(name)
	}
	var override inference.ModelConfig
	if err := protojson.Unmarshal([]byte(config), &override); err != nil {
		// Triton's client sees "failed to load 'm', failed to poll from model repository" (its
		// example model-control clients check for "failed to load") and its log the reason.
		return invalid("failed to load '%s', failed to poll from model repository: Invalid config override: %v", name, err)
	}
	if e.Remote() || e.Config().GetPlatform() != builtin.Platform {
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
			"failed to load '%s': config overrides apply to infergate's built-in models only; this model's config comes from its backend, which must change it", name))
	}
	cfg, err := e.OverrideConfig(&override)
	if err != nil {
		return err
	}
	return s.reg.Reconfigure(name, cfg)
}

func (s *Service) RepositoryModelUnload(ctx context.Context, req *inference.RepositoryModelUnloadRequest) (*inference.RepositoryModelUnloadResponse, error) {
	if !s.reg.Visible(ctx, req.GetModelName()) {
		return nil, engines.UnknownUnload(req.GetModelName())
	}
	if err := s.reg.Unload(req.GetModelName()); err != nil {
		return nil, err
	}
	return &inference.RepositoryModelUnloadResponse{}, nil
}

func unimplemented(extension string) error {
	return connect.NewError(connect.CodeUnimplemented,
		fmt.Errorf("infergate does not implement the %s extension; ServerMetadata lists the extensions it does", extension))
}

// ModelInfer runs one request on a non-decoupled model.
func (s *Service) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	start := time.Now()
	e, err := s.resolveUnary(ctx, req.GetModelName(), req.GetModelVersion(), errDecoupledRPC)
	if err != nil {
		return nil, err
	}
	return inferUnary(ctx, e, req, s.shmScope(ctx), start)
}

// Triton refuses decoupled models on its one-response endpoints, in words that differ by protocol.
const (
	errDecoupledRPC  = "ModelInfer RPC doesn't support models with decoupled transaction policy"
	errDecoupledHTTP = "HTTP end point doesn't support models with decoupled transaction policy"
)

// errStreamingUnary refuses, on a one-response endpoint, a request that asks a model which decides
// per request (engines.RequestDecoupler) to stream: Dynamo's words for an LLM asked to stream
// through ModelInfer.
const errStreamingUnary = "Streaming is not supported for this endpoint"

// resolveUnary finds the model a one-request-one-response call names and refuses a decoupled one
// (UNIMPLEMENTED) with the protocol's message.
func (s *Service) resolveUnary(ctx context.Context, name, version, decoupledMsg string) (*engines.Entry, error) {
	e, err := s.reg.ResolveFor(ctx, name, version)
	if err != nil {
		return nil, err
	}
	if e.Decoupled() {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New(decoupledMsg))
	}
	return e, nil
}

// inferUnary decodes, validates and runs req on e: the path gRPC ModelInfer and the REST infer
// endpoint share, so the same bad request fails with the same message on both and both count in
// the model's statistics. A request that asks to stream is INVALID_ARGUMENT here.
func inferUnary(ctx context.Context, e *engines.Entry, req *inference.ModelInferRequest, sm shmScope, start time.Time) (*inference.ModelInferResponse, error) {
	r, opts, err := prepare(e, req, sm)
	defer opts.releaseShm()
	if err == nil && e.RequestDecoupled(r) {
		err = invalid(errStreamingUnary)
	}
	if err != nil {
		e.Stats.RecordFailure(start, time.Now())
		return nil, err
	}
	return inferOnce(ctx, e, r, opts, start)
}

// inferOnce runs a prepared request on a non-decoupled model and encodes its response, accounting
// the request in the model's statistics either way.
func inferOnce(ctx context.Context, e *engines.Entry, r *engines.Request, opts callOptions, start time.Time) (*inference.ModelInferResponse, error) {
	timing := engines.Timing{Start: start}
	inferStart := time.Now()
	timing.Input = inferStart.Sub(start)
	res, err := executeOnce(ctx, e, r, opts)
	var out *inference.ModelInferResponse
	if err == nil {
		outStart := time.Now()
		// A batched request's wait in the scheduler's queue is queue time, not compute, as Triton
		// reports it.
		timing.Queued, timing.Batched = r.Queued, r.Batched
		timing.Infer = outStart.Sub(inferStart) - r.Queued
		out, err = encode(e, r, res, opts)
		timing.Output = time.Since(outStart)
	}
	end := time.Now()
	if err != nil {
		e.Stats.RecordFailure(start, end)
		return nil, err
	}
	e.Stats.RecordSuccess(batchSize(e, r), timing, end)
	return out, nil
}

// prepare decodes and validates a request for e, with shared memory tensors in sm's regions (zero:
// the extension is off). On success the caller releases opts' regions when the response is
// written; on failure none are held.
func prepare(e *engines.Entry, req *inference.ModelInferRequest, sm shmScope) (*engines.Request, callOptions, error) {
	r, opts, err := decode(e, req, sm)
	if err != nil {
		opts.releaseShm()
		return nil, opts, err
	}
	if err := e.Validate(r); err != nil {
		opts.releaseShm()
		return nil, opts, err
	}
	return r, opts, nil
}

// execute runs r on e under the request's timeout, mapping errors to gRPC statuses.
func execute(ctx context.Context, e *engines.Entry, r *engines.Request, opts callOptions, send func(*engines.Response) error) error {
	if opts.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, opts.timeout, errTimeout)
		defer cancel()
	}
	err := e.Execute(ctx, r, send)
	if err == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), errTimeout) {
		return connect.NewError(connect.CodeUnavailable, errTimeout)
	}
	return asStatus(err)
}

var errTimeout = errors.New("Request timeout expired")

// executeOnce runs a request on a non-decoupled model, which must send exactly one response.
func executeOnce(ctx context.Context, e *engines.Entry, r *engines.Request, opts callOptions) (*engines.Response, error) {
	var res *engines.Response
	err := execute(ctx, e, r, opts, func(x *engines.Response) error {
		if res != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("model '%s' sent more than one response", e.Name()))
		}
		res = x
		return nil
	})
	if err == nil && res == nil {
		err = connect.NewError(connect.CodeInternal, fmt.Errorf("model '%s' sent no response", e.Name()))
	}
	return res, err
}

// batchSize is the number of inferences a request carries: its batch dimension for batching
// models, else one.
func batchSize(e *engines.Entry, r *engines.Request) int {
	if e.Config().GetMaxBatchSize() > 0 && len(r.Inputs) > 0 && len(r.Inputs[0].Shape) > 0 {
		return int(r.Inputs[0].Shape[0])
	}
	return 1
}
