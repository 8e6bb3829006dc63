package kserveproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/infergate/infergate/upstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// endpoint is one upstream at run time: its gRPC connection, health and discovered models.
type endpoint struct {
	upstream.State
	cfg     upstream.Resolved
	conn    *grpc.ClientConn
	client  inference.GRPCInferenceServiceClient
	md      metadata.MD  // the configured headers, on every call; nil when none
	streamM metadata.MD  // md plus triton_grpc_error, for ModelStreamInfer
	httpc   *http.Client // for an HTTP health_check_url; nil means gRPC ServerReady
	allowed map[string]bool
	log     *slog.Logger

	// models is the last successful discovery: upstream model name -> its config.
	models atomic.Pointer[map[string]*upstreamModel]
	// supplied, when set, is the endpoint's fixed model set, given to Add instead of discovered.
	supplied map[string]*upstreamModel
	ctx      context.Context // ends when the endpoint is removed or the proxy closes
	stop     context.CancelFunc
}

// upstreamModel is one model as an endpoint describes it.
type upstreamModel struct {
	cfg *inference.ModelConfig
	raw []byte // cfg, deterministically serialized: a changed config is a changed byte string
	// iface is the part of cfg requests depend on (tensors, batching, decoupling, sequence
	// controls), serialized: endpoints whose iface differs cannot serve the same public model.
	iface []byte
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// newEndpoint resolves ep and builds its client. grpc.NewClient does not connect: the first
// health check does.
func newEndpoint(ep upstream.Endpoint, opts Options, log *slog.Logger) (*endpoint, error) {
	cfg, err := upstream.Resolve(ep)
	if err != nil {
		return nil, err
	}
	bad := func(field, format string, args ...any) error {
		return &upstream.FieldError{Endpoint: ep.Name, Field: field, Err: fmt.Errorf(format, args...)}
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, bad("url", "%v", err)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, bad("url", "%q has a path; a kserve endpoint is a gRPC server: scheme, host and port only", cfg.URL)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	target := net.JoinHostPort(u.Hostname(), port)
	e := &endpoint{cfg: cfg, log: log.With("endpoint", cfg.Name)}
	e.Init(&e.cfg, e.log)
	for name, value := range cfg.Headers {
		key := strings.ToLower(name)
		switch {
		case strings.HasPrefix(key, "grpc-"), key == "content-type", key == "te", key == "user-agent", key == engines.GRPCErrorHeader:
			return nil, bad("headers", "%q is set by the gRPC client itself", name)
		case strings.IndexFunc(key, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
		}) >= 0:
			return nil, bad("headers", "%q is not a valid gRPC metadata key (letters, digits, - _ .)", name)
		case !strings.HasSuffix(key, "-bin") && strings.IndexFunc(value, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0:
			return nil, bad("headers."+name, "a gRPC metadata value must be printable ASCII (or the key end in -bin)")
		}
		if e.md == nil {
			e.md = metadata.MD{}
		}
		e.md.Append(key, value)
	}
	e.streamM = e.md.Copy()
	e.streamM.Set(engines.GRPCErrorHeader, "true")
	if cfg.HealthCheckURL != "" {
		e.httpc = &http.Client{Timeout: cfg.CheckTimeout, Transport: &http.Transport{Proxy: nil, ForceAttemptHTTP2: true}}
	}
	if len(cfg.Models) > 0 {
		e.allowed = make(map[string]bool, len(cfg.Models))
		for _, m := range cfg.Models {
			e.allowed[m] = true
		}
	}

	creds := insecure.NewCredentials()
	if u.Scheme == "https" {
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.MaxMessageBytes), grpc.MaxCallSendMsgSize(opts.MaxMessageBytes)),
		// Large tensors: windows of this size keep a 64 MiB message from stalling on updates.
		grpc.WithInitialWindowSize(16 << 20),
		grpc.WithInitialConnWindowSize(32 << 20),
		grpc.WithReadBufferSize(64 << 10),
		grpc.WithWriteBufferSize(64 << 10),
		// The health loop paces reconnection (with its own backoff); grpc-go's default backoff
		// of up to 120 s would hide a recovered upstream from it for minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: min(cfg.CheckInterval, 5*time.Second)},
			MinConnectTimeout: cfg.CheckTimeout,
		}),
		grpc.WithUserAgent("infergate-kserveproxy"),
	}, opts.DialOptions...)
	e.conn, err = grpc.NewClient(target, dial...)
	if err != nil {
		return nil, bad("url", "%v", err)
	}
	e.client = inference.NewGRPCInferenceServiceClient(e.conn)
	return e, nil
}

// outgoing adds the configured headers to a call's context.
func (e *endpoint) outgoing(ctx context.Context) context.Context {
	if e.md == nil {
		return ctx
	}
	return metadata.NewOutgoingContext(ctx, e.md)
}

// unavailable records an UNAVAILABLE answer to a request. When the connection itself is gone the
// endpoint leaves rotation at once; either way the health loop checks it again soon.
func (e *endpoint) unavailable(err error) {
	if e.conn.GetState() != connectivity.Ready {
		e.Down("upstream unreachable; out of rotation until a health check passes", err)
	}
	e.Kick()
}

// check runs one health check: gRPC ServerReady answering ready, or a 2xx from the HTTP
// health_check_url.
func (e *endpoint) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CheckTimeout)
	defer cancel()
	if !e.Healthy() {
		// A recovered upstream should be found by this check, not after grpc-go's next retry.
		e.conn.ResetConnectBackoff()
	}
	if e.httpc != nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.cfg.HealthCheckURL, nil)
		if err != nil {
			return err
		}
		for k, v := range e.cfg.Headers {
			req.Header.Set(k, v)
		}
		res, err := e.httpc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			return fmt.Errorf("health check %s: HTTP %d", e.cfg.HealthCheckURL, res.StatusCode)
		}
		return nil
	}
	res, err := e.client.ServerReady(e.outgoing(ctx), &inference.ServerReadyRequest{})
	if err != nil {
		return fmt.Errorf("ServerReady: %w", err)
	}
	if !res.GetReady() {
		return errors.New("ServerReady: the server is not ready")
	}
	return nil
}

// probe runs one health check and, when healthy and due (or just recovered), a model discovery.
// It reports whether the check passed and whether the endpoint's models changed. A failure marks
// the endpoint unhealthy at once; a pass is for Proxy.probe to publish, with the routes.
func (e *endpoint) probe(ctx context.Context, discoverDue bool) (up, changed bool) {
	was, err := e.Check(ctx, e.check)
	if err != nil {
		return false, false
	}
	if !was || discoverDue || e.models.Load() == nil {
		models, derr := e.discover(ctx)
		if derr != nil {
			e.log.Warn("model discovery failed; keeping the last known models", "err", derr)
		} else {
			old := e.models.Load()
			changed = old == nil || !sameModels(*old, models)
			e.models.Store(&models)
		}
	}
	return true, changed
}

func sameModels(a, b map[string]*upstreamModel) bool {
	if len(a) != len(b) {
		return false
	}
	for k, x := range a {
		y, ok := b[k]
		if !ok || string(x.raw) != string(y.raw) {
			return false
		}
	}
	return true
}

// discover lists the endpoint's ready models (RepositoryIndex; the allow-list when the server has
// no repository extension or skip_discovery is set), applies the allow-list and fetches each
// model's config. A model whose config cannot be fetched for a reason other than NOT_FOUND keeps
// the config it had, so one slow call does not take a model out of service.
func (e *endpoint) discover(ctx context.Context) (map[string]*upstreamModel, error) {
	if e.supplied != nil {
		return e.supplied, nil
	}
	var names []string
	if e.cfg.SkipDiscovery {
		names = e.cfg.Models
	} else {
		cctx, cancel := context.WithTimeout(ctx, e.cfg.CheckTimeout)
		idx, err := e.client.RepositoryIndex(e.outgoing(cctx), &inference.RepositoryIndexRequest{Ready: true})
		cancel()
		switch {
		case status.Code(err) == codes.Unimplemented:
			if len(e.cfg.Models) == 0 {
				return nil, errors.New("the server has no RepositoryIndex and the endpoint no models allow-list: nothing to serve")
			}
			names = e.cfg.Models
		case err != nil:
			return nil, fmt.Errorf("RepositoryIndex: %w", err)
		default:
			seen := map[string]bool{}
			for _, m := range idx.GetModels() {
				n := m.GetName()
				// Triton lists a model once per version; ready=true already drops the others,
				// but a server may ignore the flag.
				if seen[n] || m.GetState() != "" && m.GetState() != "READY" || e.allowed != nil && !e.allowed[n] {
					continue
				}
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	var old map[string]*upstreamModel
	if p := e.models.Load(); p != nil {
		old = *p
	}
	out := make(map[string]*upstreamModel, len(names))
	for _, name := range names {
		um, err := e.modelConfig(ctx, name)
		if err != nil {
			if prev, ok := old[name]; ok && status.Code(err) != codes.NotFound && ctx.Err() == nil {
				out[name] = prev
				continue
			}
			e.log.Warn("not serving a model from this endpoint: its config could not be read", "model", name, "err", err)
			continue
		}
		out[name] = um
	}
	return out, nil
}

// modelConfig fetches a model's config with ModelConfig or, from a server without Triton's
// model_configuration extension, builds one from ModelMetadata (shapes as given, no batching).
func (e *endpoint) modelConfig(ctx context.Context, name string) (*upstreamModel, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CheckTimeout)
	defer cancel()
	res, err := e.client.ModelConfig(e.outgoing(ctx), &inference.ModelConfigRequest{Name: name})
	var cfg *inference.ModelConfig
	switch {
	case status.Code(err) == codes.Unimplemented:
		if cfg, err = e.configFromMetadata(ctx, name); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("ModelConfig: %w", err)
	default:
		cfg = res.GetConfig()
		switch {
		case cfg == nil:
			return nil, errors.New("ModelConfig: the response has no config")
		case cfg.GetName() == "":
			cfg.Name = name
		case cfg.GetName() != name:
			return nil, fmt.Errorf("ModelConfig: asked for '%s', got the config of '%s'", name, cfg.GetName())
		}
	}
	return newUpstreamModel(cfg)
}

func newUpstreamModel(cfg *inference.ModelConfig) (*upstreamModel, error) {
	raw, err := deterministic.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	iface := &inference.ModelConfig{Input: cfg.GetInput(), Output: cfg.GetOutput(), MaxBatchSize: cfg.GetMaxBatchSize(),
		ModelTransactionPolicy: cfg.GetModelTransactionPolicy()}
	if sb := cfg.GetSequenceBatching(); sb != nil {
		iface.SchedulingChoice = &inference.ModelConfig_SequenceBatching{SequenceBatching: &inference.ModelSequenceBatching{ControlInput: sb.GetControlInput()}}
	}
	ib, err := deterministic.Marshal(iface)
	if err != nil {
		return nil, err
	}
	return &upstreamModel{cfg: cfg, raw: raw, iface: ib}, nil
}

func (e *endpoint) configFromMetadata(ctx context.Context, name string) (*inference.ModelConfig, error) {
	md, err := e.client.ModelMetadata(e.outgoing(ctx), &inference.ModelMetadataRequest{Name: name})
	if err != nil {
		return nil, fmt.Errorf("ModelMetadata: %w", err)
	}
	desc := &tensorv1.TensorModelConfig{Name: name}
	conv := func(ts []*inference.ModelMetadataResponse_TensorMetadata) []*tensorv1.TensorMetadata {
		out := make([]*tensorv1.TensorMetadata, len(ts))
		for i, t := range ts {
			out[i] = &tensorv1.TensorMetadata{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape()}
		}
		return out
	}
	desc.Inputs, desc.Outputs = conv(md.GetInputs()), conv(md.GetOutputs())
	cfg, err := servedConfig(desc)
	if err != nil {
		return nil, fmt.Errorf("ModelMetadata of '%s': %w", name, err)
	}
	if md.GetPlatform() != "" {
		cfg.Platform = md.GetPlatform()
	}
	return cfg, nil
}

// servedConfig is the config a model described by desc is served with: engines.NewRemoteModel's,
// so a described model looks the same whichever way it reaches the gateway.
func servedConfig(desc *tensorv1.TensorModelConfig) (*inference.ModelConfig, error) {
	m, err := engines.NewRemoteModel(desc, func(context.Context, *engines.Request, func(*engines.Response) error) error { return nil })
	if err != nil {
		return nil, err
	}
	return m.Config(), nil
}

// suppliedModels are the models of an endpoint whose configs were given, as a discovery would
// have found them.
func suppliedModels(configs []*tensorv1.TensorModelConfig) (map[string]*upstreamModel, error) {
	out := make(map[string]*upstreamModel, len(configs))
	for _, desc := range configs {
		cfg, err := servedConfig(desc)
		if err != nil {
			return nil, err
		}
		name := cfg.GetName()
		if _, dup := out[name]; dup {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("two configs describe model '%s'", name))
		}
		if out[name], err = newUpstreamModel(cfg); err != nil {
			return nil, fmt.Errorf("model '%s': %w", name, err)
		}
	}
	return out, nil
}

// closeWhenIdle closes the connection once no request runs on it (or at once when ctx ends).
func (e *endpoint) closeWhenIdle(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for e.Outstanding() > 0 {
		select {
		case <-ctx.Done():
			e.close()
			return
		case <-t.C:
		}
	}
	e.close()
}

func (e *endpoint) close() {
	if e.stop != nil {
		e.stop()
	}
	e.conn.Close()
	if e.httpc != nil {
		e.httpc.CloseIdleConnections()
	}
}
