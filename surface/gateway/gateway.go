// Package gateway assembles infergate's one-port server: the KServe service over gRPC, gRPC-Web and
// Connect, the gRPC health service, gRPC server reflection and Prometheus metrics, with a graceful
// drain on shutdown. gRPC clients are served by grpc-go's native HTTP/2 transport; everything else
// (gRPC-Web, Connect, HTTP/1.1, /metrics) by net/http with connect-go. A router on the listener
// sends each connection to the right one (see router.go).
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"sync"

	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference/inferenceconnect"
	"github.com/infergate/infergate/internal/h1server"
	"github.com/infergate/infergate/surface/inflate"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/infergate/infergate/surface/kserve/shm"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // gzip-compressed requests from gRPC clients (deflate: package inflate)
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// Config configures a Gateway. The zero value is usable: it serves whatever Registry holds with
// Triton's defaults.
type Config struct {
	// ServerName is what ServerMetadata reports; default "triton".
	ServerName string
	// Version is what ServerMetadata reports; default "dev".
	Version string
	// MaxMessageBytes limits one gRPC message; default engines.DefaultMaxMessageBytes (2 GiB).
	MaxMessageBytes int
	// DrainTimeout bounds how long Shutdown waits for in-flight requests and streams; default 30 s.
	DrainTimeout time.Duration
	// IdleTimeout closes a connection that has carried nothing for this long, before its first
	// request or between requests (HTTP/1.1 keep-alive; HTTP/2, gRPC included, with no call
	// open); default 5 min, well past the 90 s that Go's and most clients' pools keep a
	// connection idle, so the close does not race a client's reuse. Between HTTP/1.1 requests
	// the gateway's own server may wait up to a sixteenth longer (h1server.Server.IdleTimeout).
	// A grpc.KeepaliveParams in GRPCOptions replaces it for native gRPC connections.
	IdleTimeout time.Duration
	// FirstByteTimeout closes a connection that has not begun its first request this long after
	// it was accepted (HTTP/1: its first byte; HTTP/2: the preface and first frame); default
	// 10 s, never longer than IdleTimeout. While 4,096 accepted connections are that new, the
	// gateway stops accepting (the kernel's backlog queues the rest), so this bounds how long a
	// silent or trickling client keeps others waiting.
	FirstByteTimeout time.Duration
	// HeaderTimeout bounds the time an HTTP/1.1 request's header may take to arrive, so a client
	// trickling it (slowloris) cannot hold a connection; default 10 s.
	HeaderTimeout time.Duration
	// HTTP1 chooses the server of plain HTTP/1.x connections: HTTP1Gateway (the default) is the
	// gateway's own connection loop (internal/h1server: net/http's parser and handlers, half
	// net/http's server's CPU a proxied request), HTTP1NetHTTP net/http's server, which serves
	// cleartext HTTP/2 (gRPC-Web, Connect) either way.
	HTTP1 string
	// Logger receives lifecycle logs; default slog.Default().
	Logger *slog.Logger
	// Services mounts more services next to the KServe service, such as the typed services that
	// protoc-gen-infergate's Mount<Service> returns: each is called once, with the HTTP mux
	// (Connect, gRPC-Web) and the native gRPC server.
	Services []func(mux *http.ServeMux, grpcSrv grpc.ServiceRegistrar)
	// HTTPMiddleware wraps the HTTP handler (every protocol but native gRPC), first one outermost.
	HTTPMiddleware []func(http.Handler) http.Handler
	// GRPCOptions are added to the native gRPC server's, after the KServe service's own (so its
	// interceptors run inside the service's).
	GRPCOptions []grpc.ServerOption
	// Decompression bounds compressed requests on every surface: what one may inflate to, how
	// far past its compressed size, and the inflated bytes all requests may hold at once.
	Decompression inflate.Config
	// DisableSystemSharedMemory turns off Triton's system shared memory extension (on by
	// default on Linux; see surface/kserve/shm for its trust model: clients on the same host,
	// a namespace of regions per SharedMemoryOwner).
	DisableSystemSharedMemory bool
	// SharedMemoryOwner names the caller a request's shared memory regions belong to (the
	// runtime passes its API key's name); nil: one namespace for every caller, as in Triton.
	SharedMemoryOwner func(context.Context) string
	// CUDASharedMemory opens CUDA IPC handles for Triton's CUDA shared memory extension: the GPU
	// engine, in a build with it; nil: the extension answers as a GPU-less Triton. Its regions
	// share the system shared memory extension's owners and cap, and need it on.
	CUDASharedMemory shm.OpenCUDA
	// Tracer serves Triton's trace extension and spans inference requests (nil: the extension
	// is not served and nothing is traced).
	Tracer *tracing.Tracer
	// LogLevel, when set, is the level Triton's logging extension reads and changes at run time
	// (the slog handler's LevelVar).
	LogLevel *slog.LevelVar
	// SharedMemoryMaxRegions caps the shared memory regions registered at once; default 4096.
	SharedMemoryMaxRegions int
	// Readiness, when set, is the gateway's readiness (Ready), created before the gateway so that
	// what is built first can report it; nil: the gateway makes its own.
	Readiness *Readiness

	// unhardened drops the per-request checks of issue 17 (decompression bounds, the header
	// limit), so a benchmark can measure what they cost; set only by tests.
	unhardened bool
}

// The servers of HTTP/1.x connections (Config.HTTP1).
const (
	HTTP1Gateway = "gateway"
	HTTP1NetHTTP = "net/http"
)

// Gateway is a configured server. Create it with New, run it with Serve, stop it with Shutdown.
type Gateway struct {
	cfg        Config
	svc        *kserve.Service
	health     *grpchealth.StaticChecker
	grpcHealth *health.Server
	metrics    *prometheus.Registry
	handler    http.Handler
	srv        *http.Server
	h1         *h1server.Server // nil when net/http serves HTTP/1.x
	grpcSrv    *grpc.Server

	mu       sync.Mutex
	router   *router
	shutdown bool
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
		cfg.MaxMessageBytes = engines.DefaultMaxMessageBytes
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = 10 * time.Second
	}
	if cfg.FirstByteTimeout <= 0 {
		cfg.FirstByteTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Readiness == nil {
		cfg.Readiness = new(Readiness)
	}
	g := &Gateway{cfg: cfg}
	inflater := inflate.New(cfg.Decompression)
	svcOpts := []kserve.Option{
		kserve.WithServerName(cfg.ServerName),
		kserve.WithServerVersion(cfg.Version),
		kserve.WithMaxMessageBytes(cfg.MaxMessageBytes),
		kserve.WithInflater(inflater),
		kserve.WithSystemSharedMemory(!cfg.DisableSystemSharedMemory),
		kserve.WithSharedMemoryMaxRegions(cfg.SharedMemoryMaxRegions),
		kserve.WithSharedMemoryOwner(cfg.SharedMemoryOwner),
		kserve.WithTracing(cfg.Tracer),
		kserve.WithLogLevel(cfg.LogLevel),
	}
	if cfg.CUDASharedMemory != nil {
		svcOpts = append(svcOpts, kserve.WithCUDASharedMemory(cfg.CUDASharedMemory))
	}
	g.svc = kserve.NewService(reg, svcOpts...)
	g.health = grpchealth.NewStaticChecker(inferenceconnect.GRPCInferenceServiceName)

	g.metrics = prometheus.NewRegistry()
	g.metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), newCollector(reg))
	g.metrics.MustRegister(inflater.Collectors()...)

	mux := http.NewServeMux()
	mux.Handle(g.svc.Handler()) // gzip and deflate
	// deflate next to connect-go's gzip on the others too, as on native gRPC.
	deflate := inflater.ConnectCompression()
	mux.Handle(grpchealth.NewHandler(g.health, deflate))
	reflector := grpcreflect.NewStaticReflector(inferenceconnect.GRPCInferenceServiceName, grpchealth.HealthV1ServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, deflate))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, deflate))
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics, promhttp.HandlerOpts{}))
	rest := g.svc.RESTHandler() // KServe v2 REST, over HTTP/1.1 and h2c alike
	mux.Handle("/v2", rest)
	mux.Handle("/v2/", rest)
	// Compressed RPCs are inflated inside the middleware (authentication), never before it.
	g.handler = inflater.Handler(newRouteCache(mux))
	if cfg.unhardened {
		g.handler = mux
	}
	for i := len(cfg.HTTPMiddleware) - 1; i >= 0; i-- {
		g.handler = cfg.HTTPMiddleware[i](g.handler)
	}

	// Compressed gRPC messages are inflated by the call that reads them, within the bounds.
	inflateGRPC := inflater.GRPC(g.svc.Codec(), cfg.MaxMessageBytes)
	hardening := append(inflateGRPC.ServerOptions(),
		// Header blocks as large as net/http allows (1 MiB), not grpc-go's 16 MiB: headers are
		// read before the API key is checked.
		grpc.MaxHeaderListSize(http.DefaultMaxHeaderBytes))
	if cfg.unhardened {
		hardening = nil
	}
	grpcOpts := append(append(g.svc.ServerOptions(), hardening...),
		// Large tensors: windows of this size keep a 64 MiB message from stalling on updates.
		grpc.InitialWindowSize(16<<20),
		grpc.InitialConnWindowSize(32<<20),
		grpc.MaxConcurrentStreams(1000),
		grpc.ReadBufferSize(64<<10),
		grpc.WriteBufferSize(64<<10),
		// Requests run on reused goroutines, whose stacks have already grown to what a request
		// needs: a fresh goroutine per request spent ~15% of the CPU growing its stack.
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))),
		// An idle connection ends with a GOAWAY, which clients answer by reconnecting when needed.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: cfg.IdleTimeout}),
	)
	g.grpcSrv = grpc.NewServer(append(grpcOpts, cfg.GRPCOptions...)...)
	services := inflateGRPC.Registrar(g.grpcSrv)
	if cfg.unhardened {
		services = g.grpcSrv
	}
	g.svc.RegisterGRPC(services)
	g.grpcHealth = health.NewServer()
	g.grpcHealth.SetServingStatus(inferenceconnect.GRPCInferenceServiceName, healthgrpc.HealthCheckResponse_SERVING)
	healthgrpc.RegisterHealthServer(services, g.grpcHealth)
	for _, mount := range cfg.Services {
		mount(mux, services)
	}
	reflection.Register(services.(reflection.GRPCServer))

	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC clients speak HTTP/2 with prior knowledge
	g.srv = &http.Server{
		Handler:           closeAfterChunked(g.handler),
		Protocols:         protocols,
		ReadHeaderTimeout: cfg.HeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
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
	if cfg.HTTP1 != HTTP1NetHTTP {
		g.h1 = &h1server.Server{Handler: g.handler, HeaderTimeout: cfg.HeaderTimeout, IdleTimeout: cfg.IdleTimeout,
			MaxHeaderBytes: http.DefaultMaxHeaderBytes, Logger: cfg.Logger}
	}
	return g
}

// closeAfterChunked closes an HTTP/1.1 connection after a request whose body came chunked.
// RFC 9112 §6.1: a request with both Transfer-Encoding and Content-Length is read by its
// Transfer-Encoding, and the server MUST close the connection after answering it, since a
// proxy in front may have read it by its Content-Length (request smuggling). net/http's server
// reads it so but keeps the connection, and drops the Content-Length before a handler sees the
// request, so every chunked request closes its connection: a rare case among API clients, which
// send lengths, and one reconnect for those that do not (h1contract's check).
func closeAfterChunked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TransferEncoding) > 0 {
			w = &closingWriter{ResponseWriter: w}
		}
		h.ServeHTTP(w, r)
	})
}

// closingWriter sends Connection: close with the answer's header, which makes net/http's
// server close the connection after it: set as the header goes out, since a handler may clear
// hop-by-hop headers from its map (the proxy does), and r.Close is read before the handler runs.
type closingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *closingWriter) mark() {
	if !w.wrote {
		w.wrote = true
		w.ResponseWriter.Header().Set("Connection", "close")
	}
}

func (w *closingWriter) WriteHeader(code int) {
	if code >= 200 { // not on 1xx: the final answer carries it
		w.mark()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closingWriter) Write(p []byte) (int, error) {
	w.mark()
	return w.ResponseWriter.Write(p)
}

// Flush keeps the writer an http.Flusher (streams).
func (w *closingWriter) Flush() {
	w.mark()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Handler is the gateway's HTTP handler, for embedding in another server.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Metrics is the Prometheus registry /metrics serves, for callers that add their own collectors.
func (g *Gateway) Metrics() *prometheus.Registry { return g.metrics }

// Serve accepts connections on ln until Shutdown is called. Like http.Server.Serve it returns
// http.ErrServerClosed after a shutdown.
func (g *Gateway) Serve(ln net.Listener) error {
	r := newRouter(ln, g.cfg.FirstByteTimeout, g.cfg.IdleTimeout)
	r.ownH1 = g.h1 != nil
	g.mu.Lock()
	if g.shutdown {
		g.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	g.router = r
	g.mu.Unlock()
	g.cfg.Logger.Info("infergate serving", "addr", ln.Addr().String(), "server_name", g.cfg.ServerName)
	grpcDone := make(chan error, 1)
	go func() { grpcDone <- g.grpcSrv.Serve(r.grpc) }()
	httpDone := make(chan error, 1)
	go func() { httpDone <- g.srv.Serve(r.http) }()
	h1Done := make(chan error, 1)
	if g.h1 != nil {
		go func() { h1Done <- g.h1.Serve(r.h1) }()
	} else {
		h1Done <- nil
	}
	err := errors.Join(stopped(r.serve()), stopped(<-httpDone), stopped(<-h1Done), stopped(<-grpcDone))
	if err != nil {
		return err
	}
	return http.ErrServerClosed
}

// stopped drops the errors that only say a listener or server was closed on purpose.
func stopped(err error) error {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown drains the gateway: readiness and health turn false at once, new connections are
// refused, and in-flight requests and streams get until ctx ends (or DrainTimeout, whichever is
// sooner) to finish before their connections are closed.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.cfg.Readiness.drain()
	g.svc.Drain()
	g.health.SetStatus("", grpchealth.StatusNotServing)
	g.health.SetStatus(inferenceconnect.GRPCInferenceServiceName, grpchealth.StatusNotServing)
	g.grpcHealth.Shutdown()
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DrainTimeout)
	defer cancel()
	g.cfg.Logger.Info("infergate draining", "timeout", g.cfg.DrainTimeout)
	g.mu.Lock()
	g.shutdown = true
	if g.router != nil {
		g.router.close()
	}
	g.mu.Unlock()

	grpcDrained := make(chan struct{})
	go func() {
		g.grpcSrv.GracefulStop()
		close(grpcDrained)
	}()
	h1Drained := make(chan error, 1)
	if g.h1 != nil {
		go func() { h1Drained <- g.h1.Shutdown(ctx) }()
	} else {
		h1Drained <- nil
	}
	err := errors.Join(g.srv.Shutdown(ctx), <-h1Drained)
	select {
	case <-grpcDrained:
	case <-ctx.Done():
	}
	// Regions still used by requests that outlive the drain are unmapped when those finish.
	err = errors.Join(err, g.svc.Close())
	if ctx.Err() != nil {
		g.cfg.Logger.Warn("drain timed out; closing remaining connections")
		g.grpcSrv.Stop()
		if g.h1 != nil {
			g.h1.Close()
		}
		return errors.Join(ctx.Err(), g.srv.Close())
	}
	return err
}

// SharedMemory is the system shared memory regions' manager, nil when the extension is off.
func (g *Gateway) SharedMemory() *shm.Manager { return g.svc.SharedMemory() }

// Ready reports whether the gateway accepts new work: true until Shutdown starts.
func (g *Gateway) Ready() bool { return g.cfg.Readiness.Ready() }
