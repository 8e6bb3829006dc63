// Package embed runs an infergate gateway inside another program and serves that program's own
// functions through it: tensor models (KServe v2 over gRPC, Connect, gRPC-Web and REST) and LLMs
// (OpenAI's chat and completions routes, and the KServe bridge's text_input model). It is what
// the C shared library under bindings/cshared exposes to Python, kept free of cgo so that it is
// tested with plain `go test`.
//
// It assembles a subset of what the runtime's config wires (upstreams, the backend registry, the
// built-in models); features that need the runtime's whole config (API keys, rate limits, Redis,
// batches) are not available embedded, and a config naming them is refused, never ignored.
package embed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/adapters/bridge"
	"github.com/infergate/infergate/adapters/gateway"
	"github.com/infergate/infergate/adapters/kserveproxy"
	"github.com/infergate/infergate/adapters/openai"
	"github.com/infergate/infergate/adapters/registry"
	"github.com/infergate/infergate/adapters/upstream"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/cpu"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"go.yaml.in/yaml/v3"
)

// Config is what an embedded gateway reads from its YAML or JSON config. Unknown keys are errors.
type Config struct {
	// ServerName is what ServerMetadata reports; default "triton".
	ServerName string `yaml:"server_name"`
	// BuiltinModels serves the CPU engine's built-in models too; default false (an embedding
	// program serves its own models).
	BuiltinModels bool `yaml:"builtin_models"`
	// DrainTimeout bounds Stop's wait for in-flight requests; default 30 s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// MaxMessageBytes limits one gRPC message; default the gateway's.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// Upstreams are OpenAI-compatible and KServe servers, as in the runtime's config.
	Upstreams []upstream.Endpoint `yaml:"upstreams"`
	// Registry turns the RegistryService (backends that register themselves) off.
	Registry struct {
		Disabled bool `yaml:"disabled"`
	} `yaml:"registry"`
	// LogLevel is debug, info, warn or error; default warn (an embedding program's output is
	// its own).
	LogLevel string `yaml:"log_level"`
}

// ParseConfig reads a YAML (or JSON, which is YAML) config; empty data is the zero config.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("embedded gateway config: %w", err)
	}
	return c, nil
}

// LoadConfig reads the config file at path.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("embedded gateway config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Gateway is an embedded gateway: create it with New, add models, Start it, Stop it.
type Gateway struct {
	cfg    Config
	log    *slog.Logger
	reg    *engines.Registry
	gw     *gateway.Gateway
	proxy  *openai.Proxy
	bridge *bridge.Bridge
	kp     *kserveproxy.Proxy
	svc    *registry.Service // nil when the registry is disabled
	llms   *llmServer
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when the registry applier stopped

	mu      sync.Mutex
	served  chan error // nil until Start
	addr    string
	stopped bool
	leases  map[string]context.CancelFunc // backends registered through RegisterBackend: their heartbeats
}

// New builds a gateway from cfg; nothing listens until Start.
func New(cfg Config) (*Gateway, error) {
	var level slog.Level = slog.LevelWarn
	if cfg.LogLevel != "" {
		if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
			return nil, fmt.Errorf("embedded gateway config: log_level: %w", err)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	g := &Gateway{cfg: cfg, log: log, reg: engines.NewRegistry(), leases: map[string]context.CancelFunc{}}
	if cfg.BuiltinModels {
		if err := cpu.Register(g.reg); err != nil {
			return nil, fmt.Errorf("registering built-in models: %w", err)
		}
	}
	var err error
	g.proxy, err = openai.New(openai.Options{Endpoints: cfg.Upstreams, Logger: log,
		Ready: func() bool { return g.gw.Ready() }})
	if err != nil {
		return nil, err
	}
	g.bridge = bridge.New(g.reg, g.proxy, bridge.WithLogger(log))
	g.kp, err = kserveproxy.New(kserveproxy.Options{Endpoints: cfg.Upstreams, Registry: g.reg, Logger: log,
		MaxMessageBytes: cfg.MaxMessageBytes})
	if err != nil {
		g.proxy.Close()
		return nil, err
	}
	gwCfg := gateway.Config{ServerName: cfg.ServerName, MaxMessageBytes: cfg.MaxMessageBytes,
		DrainTimeout: cfg.DrainTimeout, Logger: log}
	gwCfg.Services = append(gwCfg.Services, g.proxy.Mount)
	var store registry.Store
	if !cfg.Registry.Disabled {
		ms := registry.NewMemoryStore()
		store = ms
		g.svc = registry.NewService(store, registry.ServiceOptions{Logger: log})
		gwCfg.Services = append(gwCfg.Services, g.svc.Mount)
	}
	g.gw = gateway.New(g.reg, gwCfg)
	g.gw.Metrics().MustRegister(g.proxy.Collectors()...)
	g.gw.Metrics().MustRegister(g.kp.Collectors()...)

	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.proxy.Start(g.ctx)
	g.kp.Start(g.ctx)
	g.bridge.Sync()
	g.done = make(chan struct{})
	if store != nil {
		ap := registry.NewApplier(registry.ApplierOptions{OpenAI: g.proxy, Tensors: registry.KServeTensors{Pool: g.kp}, Logger: log})
		go func() {
			defer close(g.done)
			if err := ap.Run(g.ctx, store); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("backend registry stopped", "err", err)
			}
		}()
	} else {
		close(g.done)
	}
	return g, nil
}

// Registry is the gateway's model registry, for Go callers that register engines.Model values.
func (g *Gateway) Registry() *engines.Registry { return g.reg }

// Start listens on addr ("127.0.0.1:0" picks a free port) and serves in the background. It
// returns the address it listens on.
func (g *Gateway) Start(addr string) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return "", errors.New("gateway is stopped")
	}
	if g.served != nil {
		return "", errors.New("gateway is already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listening on %s: %w", addr, err)
	}
	g.served = make(chan error, 1)
	g.addr = ln.Addr().String()
	go func() { g.served <- g.gw.Serve(ln) }()
	return g.addr, nil
}

// Addr is the address Start listens on, or "".
func (g *Gateway) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// Stop drains the gateway (in-flight requests get until ctx ends or the drain timeout) and
// releases everything it started. Calling it again does nothing.
func (g *Gateway) Stop(ctx context.Context) error {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return nil
	}
	g.stopped = true
	served := g.served
	for id, stop := range g.leases {
		stop()
		delete(g.leases, id)
	}
	g.mu.Unlock()
	err := g.gw.Shutdown(ctx)
	if served != nil {
		if serveErr := <-served; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
			err = errors.Join(err, serveErr)
		}
	}
	g.cancel()
	<-g.done
	g.proxy.Close()
	g.kp.Close()
	if g.llms != nil {
		g.llms.close()
	}
	return err
}

// RegisterBackend registers a remote backend as a RegistryService call would, and keeps its lease
// alive with heartbeats until DeregisterBackend or Stop.
func (g *Gateway) RegisterBackend(ctx context.Context, req *registryv1.RegisterRequest) (*registryv1.RegisterResponse, error) {
	if g.svc == nil {
		return nil, errors.New("the backend registry is disabled in the config")
	}
	res, err := g.svc.Register(ctx, req)
	if err != nil {
		return nil, err
	}
	hctx, stop := context.WithCancel(g.ctx)
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		stop()
		return nil, errors.New("gateway is stopped")
	}
	g.leases[res.GetLeaseId()] = stop
	g.mu.Unlock()
	go g.heartbeat(hctx, res.GetLeaseId(), res.GetHeartbeatInterval().AsDuration())
	return res, nil
}

// heartbeat renews lease every interval until ctx ends.
func (g *Gateway) heartbeat(ctx context.Context, lease string, every time.Duration) {
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := g.svc.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: lease}); err != nil && ctx.Err() == nil {
				g.log.Warn("embedded backend heartbeat failed", "lease", lease, "err", err)
			}
		}
	}
}

// DeregisterBackend ends a lease RegisterBackend took.
func (g *Gateway) DeregisterBackend(ctx context.Context, lease string) error {
	if g.svc == nil {
		return errors.New("the backend registry is disabled in the config")
	}
	g.mu.Lock()
	if stop, ok := g.leases[lease]; ok {
		stop()
		delete(g.leases, lease)
	}
	g.mu.Unlock()
	_, err := g.svc.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: lease})
	return err
}

// validName refuses names that cannot be a model name on every surface.
func validName(name string) error {
	if name == "" || len(name) > 256 || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid model name %q", name)
	}
	return nil
}
