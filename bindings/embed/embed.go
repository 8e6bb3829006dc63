// Package embed runs an infergate gateway inside another program and serves that program's own
// functions through it: tensor models (KServe v2 over gRPC, Connect, gRPC-Web and REST) and LLMs
// (OpenAI's chat and completions routes, and the KServe bridge's text_input model). It is what
// the C shared library under bindings/cshared exposes to Python, kept free of cgo so that it is
// tested with plain `go test`.
//
// The gateway is the one runtime/app assembles from the runtime's own config file, so every key
// of that file works embedded (upstreams, models.<name> stages, API keys, limits, Redis, batches,
// tracing); the embedding program's models join its registry and its OpenAI proxy.
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

	"github.com/infergate/infergate/engines"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/runtime/app"
	"github.com/infergate/infergate/surface/gateway"
	"go.yaml.in/yaml/v3"
)

// Config is an embedded gateway's config: the runtime's config file (runtime/app.Config) plus
// four keys that the runtime takes as flags. One difference in defaults: builtin_models is false
// unless set (an embedding program serves its own models).
type Config struct {
	// App is the runtime's config, parsed and validated as the binary's -config is (INFERGATE_*
	// variables apply too).
	App *app.Config
	// ServerName is what ServerMetadata reports (server_name); default "triton".
	ServerName string `yaml:"server_name"`
	// DrainTimeout bounds Stop's wait for in-flight requests (drain_timeout); default 30 s.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// MaxMessageBytes limits one gRPC message (max_message_bytes); default the gateway's.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// LogLevel is debug, info, warn or error (log_level); default warn (an embedding program's
	// output is its own).
	LogLevel string `yaml:"log_level"`
}

// flagKeys are the keys Config reads itself; the rest of the document is the runtime's config.
var flagKeys = map[string]bool{"server_name": true, "drain_timeout": true, "max_message_bytes": true, "log_level": true}

// ParseConfig reads a YAML (or JSON, which is YAML) config; empty data is the zero config.
func ParseConfig(data []byte) (Config, error) {
	return parseConfig("embedded gateway config", data)
}

// LoadConfig reads the config file at path.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("embedded gateway config: %w", err)
	}
	return parseConfig(path, data)
}

func parseConfig(name string, data []byte) (Config, error) {
	var c Config
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return c, fmt.Errorf("%s: %w", name, err)
	}
	rest := data
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		// Split the flags' keys off: decode them here, and hand the rest on unchanged.
		m := doc.Content[0]
		flags := &yaml.Node{Kind: yaml.MappingNode}
		var kept []*yaml.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			if flagKeys[m.Content[i].Value] {
				flags.Content = append(flags.Content, m.Content[i], m.Content[i+1])
			} else {
				kept = append(kept, m.Content[i], m.Content[i+1])
			}
		}
		if len(flags.Content) > 0 {
			if err := flags.Decode(&c); err != nil {
				return c, fmt.Errorf("%s: %w", name, err)
			}
			m.Content = kept
			var err error
			if rest, err = yaml.Marshal(&doc); err != nil {
				return c, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	if c.LogLevel != "" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
			return c, fmt.Errorf("%s: log_level: %w", name, err)
		}
	}
	if c.DrainTimeout < 0 || c.MaxMessageBytes < 0 {
		return c, fmt.Errorf("%s: drain_timeout and max_message_bytes must not be negative", name)
	}
	a, err := app.ParseConfig(name, rest)
	if err != nil {
		return c, err
	}
	if a.BuiltinModels == nil {
		off := false
		a.BuiltinModels = &off
	}
	c.App = a
	return c, nil
}

// Gateway is an embedded gateway: create it with New, add models, Start it, Stop it.
type Gateway struct {
	log    *slog.Logger
	app    *app.App // its Backends is nil when the registry is disabled
	llms   *llmServer
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	served  chan error // nil until Start
	addr    string
	stopped bool
	leases  map[string]context.CancelFunc // backends registered through RegisterBackend: their heartbeats
}

// New builds a gateway from cfg; nothing listens until Start.
func New(cfg Config) (*Gateway, error) {
	level := slog.LevelWarn
	if cfg.LogLevel != "" {
		if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
			return nil, fmt.Errorf("embedded gateway config: log_level: %w", err)
		}
	}
	if cfg.App == nil {
		c, err := ParseConfig(nil)
		if err != nil {
			return nil, err
		}
		cfg.App = c.App
	}
	lv := new(slog.LevelVar) // Triton's logging extension may change it
	lv.Set(level)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
	// Zero sizes and timeouts take the gateway's defaults, as the runtime's flags' do.
	a, err := app.Build(cfg.App, app.RoleGateway, gateway.Config{ServerName: cfg.ServerName,
		MaxMessageBytes: cfg.MaxMessageBytes, DrainTimeout: cfg.DrainTimeout, Logger: log, LogLevel: lv})
	if err != nil {
		return nil, err
	}
	g := &Gateway{log: log, app: a, leases: map[string]context.CancelFunc{}}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g, nil
}

// Registry is the gateway's model registry, for Go callers that register engines.Model values.
func (g *Gateway) Registry() *engines.Registry { return g.app.Models }

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
	go func() { g.served <- g.app.Gateway.Serve(ln) }()
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
	err := g.app.Gateway.Shutdown(ctx)
	if served != nil {
		if serveErr := <-served; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
			err = errors.Join(err, serveErr)
		}
	}
	g.cancel()
	g.app.Close()
	if g.llms != nil {
		g.llms.close()
	}
	return err
}

// RegisterBackend registers a remote backend as a RegistryService call would, and keeps its lease
// alive with heartbeats until DeregisterBackend or Stop.
func (g *Gateway) RegisterBackend(ctx context.Context, req *registryv1.RegisterRequest) (*registryv1.RegisterResponse, error) {
	if g.app.Backends == nil {
		return nil, errors.New("the backend registry is disabled in the config")
	}
	res, err := g.app.Backends.Register(ctx, req)
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
			if _, err := g.app.Backends.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: lease}); err != nil && ctx.Err() == nil {
				g.log.Warn("embedded backend heartbeat failed", "lease", lease, "err", err)
			}
		}
	}
}

// DeregisterBackend ends a lease RegisterBackend took.
func (g *Gateway) DeregisterBackend(ctx context.Context, lease string) error {
	if g.app.Backends == nil {
		return errors.New("the backend registry is disabled in the config")
	}
	g.mu.Lock()
	if stop, ok := g.leases[lease]; ok {
		stop()
		delete(g.leases, lease)
	}
	g.mu.Unlock()
	_, err := g.app.Backends.Deregister(ctx, &registryv1.DeregisterRequest{LeaseId: lease})
	return err
}

// validName refuses names that cannot be a model name on every surface.
func validName(name string) error {
	if name == "" || len(name) > 256 || strings.ContainsAny(name, "/\x00") {
		return fmt.Errorf("invalid model name %q", name)
	}
	return nil
}
