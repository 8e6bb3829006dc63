// Package gateway assembles infergate's one-port server: the KServe service over gRPC, gRPC-Web and
// Connect, the gRPC health service, gRPC server reflection and Prometheus metrics, on one
// http.Server speaking HTTP/1.1 and cleartext HTTP/2, with a graceful drain on shutdown.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/infergate/infergate/adapters/kserve"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures a Gateway. The zero value is usable: it serves whatever Registry holds with
// Triton's defaults.
type Config struct {
	// ServerName is what ServerMetadata reports; default "triton".
	ServerName string
	// Version is what ServerMetadata reports; default "dev".
	Version string
	// MaxMessageBytes limits one gRPC message; default kserve.DefaultMaxMessageBytes (2 GiB).
	MaxMessageBytes int
	// DrainTimeout bounds how long Shutdown waits for in-flight requests and streams; default 30 s.
	DrainTimeout time.Duration
	// Logger receives lifecycle logs; default slog.Default().
	Logger *slog.Logger
}

// Gateway is a configured server. Create it with New, run it with Serve, stop it with Shutdown.
type Gateway struct {
	cfg     Config
	svc     *kserve.Service
	health  *grpchealth.StaticChecker
	metrics *prometheus.Registry
	handler http.Handler
	srv     *http.Server
}

// New builds a gateway serving the models in reg.
func New(reg *engines.Registry, cfg Config) *Gateway {
	if cfg.ServerName == "" {
		cfg.ServerName = "triton"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = kserve.DefaultMaxMessageBytes
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &Gateway{cfg: cfg}
	g.svc = kserve.NewService(reg,
		kserve.WithServerName(cfg.ServerName),
		kserve.WithServerVersion(cfg.Version),
		kserve.WithMaxMessageBytes(cfg.MaxMessageBytes))
	g.health = grpchealth.NewStaticChecker(inferenceconnect.GRPCInferenceServiceName)

	g.metrics = prometheus.NewRegistry()
	g.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newCollector(reg))

	mux := http.NewServeMux()
	mux.Handle(g.svc.Handler())
	mux.Handle(grpchealth.NewHandler(g.health))
	reflector := grpcreflect.NewStaticReflector(inferenceconnect.GRPCInferenceServiceName, grpchealth.HealthV1ServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics, promhttp.HandlerOpts{}))
	g.handler = mux

	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC clients speak HTTP/2 with prior knowledge
	g.srv = &http.Server{
		Handler:           g.handler,
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		HTTP2: &http.HTTP2Config{
			// Large tensors: bigger flow-control windows and frames keep a 64 MiB message from
			// stalling on window updates.
			MaxReceiveBufferPerConnection: 32 << 20,
			MaxReceiveBufferPerStream:     16 << 20,
			MaxReadFrameSize:              1 << 20,
			MaxConcurrentStreams:          1000,
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return g
}

// Handler is the gateway's HTTP handler, for embedding in another server.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Metrics is the Prometheus registry /metrics serves, for callers that add their own collectors.
func (g *Gateway) Metrics() *prometheus.Registry { return g.metrics }

// Serve accepts connections on ln until Shutdown is called. Like http.Server.Serve it returns
// http.ErrServerClosed after a shutdown.
func (g *Gateway) Serve(ln net.Listener) error {
	g.cfg.Logger.Info("infergate serving", "addr", ln.Addr().String(), "server_name", g.cfg.ServerName)
	return g.srv.Serve(ln)
}

// Shutdown drains the gateway: readiness and health turn false at once, new connections are
// refused, and in-flight requests and streams get until ctx ends (or DrainTimeout, whichever is
// sooner) to finish before their connections are closed.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.svc.Drain()
	g.health.SetStatus("", grpchealth.StatusNotServing)
	g.health.SetStatus(inferenceconnect.GRPCInferenceServiceName, grpchealth.StatusNotServing)
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DrainTimeout)
	defer cancel()
	g.cfg.Logger.Info("infergate draining", "timeout", g.cfg.DrainTimeout)
	err := g.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		g.cfg.Logger.Warn("drain timed out; closing remaining connections")
		return errors.Join(err, g.srv.Close())
	}
	return err
}

// Ready reports whether the gateway accepts new work: true until Shutdown starts.
func (g *Gateway) Ready() bool { return g.svc.Ready() }
