// Command runtime is infergate: `go run ./runtime` serves the built-in models on :8000 over gRPC,
// gRPC-Web and Connect (KServe v2 / Triton's GRPCInferenceService), with gRPC health, server
// reflection and Prometheus metrics on the same port. With -config, the YAML file's upstreams are
// served on the same port through OpenAI's HTTP API (/v1/models, /v1/chat/completions, ...).
//
// default.pgo beside this file is a CPU profile of the OpenAI proxy's hot path, which go build
// uses for profile-guided optimisation (inlining and devirtualising the calls it shows hot):
// 3-7% less user CPU a request at c=64 (docs/performance.md, fifth run). BenchmarkHotPath
// writes a fresh one (INFERGATE_HOTPATH_PGO); a stale one still builds, only less well.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/internal/memrelease"
	"github.com/infergate/infergate/runtime/app"
	"github.com/infergate/infergate/runtime/ollaconfig"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "infergate:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "import-olla" {
		return importOlla(args[1:], os.Stdout, os.Stderr)
	}
	fs := flag.NewFlagSet("infergate", flag.ContinueOnError)
	listen := fs.String("listen", ":8000", "address to serve gRPC, gRPC-Web, Connect and /metrics on")
	serverName := fs.String("server-name", "triton", "server name reported by ServerMetadata (Triton clients expect \"triton\")")
	maxMsg := fs.Int("max-message-bytes", engines.DefaultMaxMessageBytes, "largest gRPC message accepted or sent")
	drain := fs.Duration("drain-timeout", 30*time.Second, "how long shutdown waits for in-flight requests and streams")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logJSON := fs.Bool("log-json", false, "log JSON lines instead of text")
	configPath := fs.String("config", "", "YAML config file (upstreams, Redis, registry); see runtime/infergate.example.yaml. INFERGATE_* variables override it")
	ollaPath := fs.String("olla-config", "", "an Olla config file to run with, converted as `infergate import-olla` prints it (its notes are logged); without -listen, Olla's address")
	showVersion := fs.Bool("version", false, "print the version and exit")
	pprofListen := fs.String("pprof-listen", "", "address to serve Go's profiler (/debug/pprof/) on, e.g. 127.0.0.1:6060; off when empty. Never expose it: it has no authentication")
	role := fs.String("role", app.RoleGateway, "gateway (every surface, and batch lines unless batch.worker is false) or batch-worker (batch lines only; serves just /metrics and /health)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println("infergate", version)
		return nil
	}

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("bad -log-level: %w", err)
	}
	// A LevelVar, so that Triton's logging extension (LogSettings, /v2/logging) can change it.
	lv := new(slog.LevelVar)
	lv.Set(level)
	hopts := &slog.HandlerOptions{Level: lv}
	var handler slog.Handler = slog.NewTextHandler(os.Stderr, hopts)
	if *logJSON {
		handler = slog.NewJSONHandler(os.Stderr, hopts)
	}
	logger := slog.New(handler)

	var cfg *app.Config
	var err error
	switch {
	case *configPath != "" && *ollaPath != "":
		return errors.New("-config and -olla-config: one or the other (convert the Olla file with `infergate import-olla` to edit it)")
	case *ollaPath != "":
		var conv ollaconfig.Result
		if conv, err = convertOlla(*ollaPath); err != nil {
			return err
		}
		for _, n := range conv.Notes {
			logger.Info("olla config", "note", n)
		}
		if !flagSet(fs, "listen") {
			*listen = conv.Listen
		}
		*configPath = *ollaPath
		cfg, err = app.ParseConfig(*ollaPath+" (converted)", conv.YAML)
	case *configPath != "":
		cfg, err = app.LoadConfig(*configPath)
	default:
		cfg, err = app.ParseConfig("environment", nil) // zero config, INFERGATE_* variables applied
	}
	if err != nil {
		return err
	}
	if *role != app.RoleGateway && *role != app.RoleBatchWorker {
		return fmt.Errorf("bad -role %q: gateway or batch-worker", *role)
	}
	a, err := app.Build(cfg, *role, gateway.Config{
		ServerName:      *serverName,
		Version:         version,
		MaxMessageBytes: *maxMsg,
		DrainTimeout:    *drain,
		Logger:          logger,
		LogLevel:        lv,
	})
	if err != nil {
		if *configPath != "" {
			return fmt.Errorf("%s: %w", *configPath, err)
		}
		return err
	}
	gw := a.Gateway
	defer a.Close() // after the drain: in-flight proxied requests finish first

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// A burst's memory goes back to the OS once the process is idle again.
	go memrelease.Run(ctx, memrelease.Options{Logger: logger})
	if *pprofListen != "" {
		stopProfiler, err := serveProfiler(*pprofListen, logger)
		if err != nil {
			return err
		}
		defer stopProfiler()
	}

	served := make(chan error, 1)
	if *role == app.RoleBatchWorker {
		srv := workerServer(gw)
		go func() { served <- srv.Serve(ln) }()
		defer srv.Close()
	} else {
		go func() { served <- gw.Serve(ln) }()
	}
	logger.Info("serving", "addr", ln.Addr().String())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	stop() // a second signal kills the process the default way
	logger.Info("shutdown requested")
	if *role == app.RoleBatchWorker {
		return nil // Close hands the lines in flight back to the bus
	}
	if err := gw.Shutdown(context.Background()); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped")
	return nil
}

// serveProfiler serves net/http/pprof's handlers on their own listener, apart from the
// gateway's port and its API keys: for an operator on the host, never for the network.
func serveProfiler(addr string, logger *slog.Logger) (stop func(), _ error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Warn("serving Go's profiler, unauthenticated", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// workerServer serves a batch worker's /metrics and /health: a worker takes no traffic of its own.
func workerServer(gw *gateway.Gateway) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gw.Metrics(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok","role":"batch-worker"}` + "\n"))
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
}

// importOlla is `infergate import-olla FILE`: the infergate config equivalent to an Olla config
// file, on out, headed by notes on what has no counterpart; how to run it, on msgs.
func importOlla(args []string, out, msgs io.Writer) error {
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: infergate import-olla OLLA_CONFIG.yaml > infergate.yaml")
	}
	conv, err := convertOlla(args[0])
	if err != nil {
		return err
	}
	if _, err := out.Write(conv.YAML); err != nil {
		return err
	}
	fmt.Fprintf(msgs, "infergate: converted %s with %d notes (comments at the top); run it with: infergate -config infergate.yaml -listen %s\n",
		args[0], len(conv.Notes), conv.Listen)
	return nil
}

func convertOlla(path string) (ollaconfig.Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return ollaconfig.Result{}, err
	}
	conv, err := ollaconfig.Convert(data)
	if err != nil {
		return ollaconfig.Result{}, fmt.Errorf("%s: %w", path, err)
	}
	return conv, nil
}

// flagSet reports whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
