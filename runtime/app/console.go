package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/surface/bridge"
	"github.com/infergate/infergate/surface/console"
	"github.com/infergate/infergate/upstream/kserveproxy"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/infergate/infergate/upstream/registry"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// consoleParts are what the console reads, gathered while Build assembles them.
type consoleParts struct {
	cfg      *Config
	version  string
	started  time.Time
	ups      *openaipool.Pool
	kp       *kserveproxy.Proxy
	br       breaker.Breaker
	store    registry.Store // nil: registry disabled
	reg      *engines.Registry
	stages   func(model string) []string
	batches  batchstate.Store // nil: batch API disabled
	metrics  prometheus.Gatherer
	log      *slog.Logger
	recorder *console.Recorder
}

// newConsole is the console over the gateway's parts.
func newConsole(p consoleParts) *console.Console {
	src := console.Sources{Version: p.version, Started: p.started, ConfigPath: p.cfg.source,
		Config: func() any { return redactedConfig(p.cfg) }, Pool: p.ups, KServe: p.kp.Status, Breaker: p.br,
		Tensors: p.reg, Stages: p.stages, TensorStages: tensorStageNames(p.kp), Metrics: p.metrics, Logger: p.log}
	if p.store != nil {
		src.Backends = p.store.List
	}
	if p.batches != nil {
		src.Batches = func(ctx context.Context) ([]*batchstate.Batch, error) {
			bs, _, err := p.batches.List(ctx, "", 20)
			return bs, err
		}
	}
	return console.New(p.recorder, src)
}

// tensorStageNames names a tensor model's stages in the order a KServe request (native gRPC,
// Connect, REST) goes through them, for the console, as Build wires them:
//
//	tracing: the KServe surface's span, as Triton's trace settings sample (gateway.Config.Tracer)
//	  -> validation: the request decoded (shared memory included) and checked against the
//	     model's config (engines.Entry.Validate)
//	  -> guard: the registry's admission (API key's models, rate limits, load shedding)
//	  -> sequence batcher: a sequence model's control tensors and slots (sequence_batching)
//	  -> dynamic batcher: concurrent requests joined into batches (dynamic_batching, when
//	     server.dynamic_batching is on; a remote model's only with dynamic_batching_remote:
//	     whether the registry gave the entry a scheduler, engines.Entry.Batched)
//	  -> the engine: the model in process (on the CPU or a GPU), routing and forwarding to the
//	     KServe upstreams or registered backends that serve it, or the bridge to an LLM, whose
//	     own stages follow (the console's LLM rows).
func tensorStageNames(kp *kserveproxy.Proxy) func(e *engines.Entry) []string {
	return func(e *engines.Entry) []string {
		out := []string{"tracing", "validation", "guard"}
		if e.Config().GetSequenceBatching() != nil {
			out = append(out, "sequence batcher")
		}
		if e.Batched() {
			out = append(out, "dynamic batcher")
		}
		return append(out, tensorEngine(e, kp))
	}
}

// tensorEngine names what computes a tensor model's answer.
func tensorEngine(e *engines.Entry, kp *kserveproxy.Proxy) string {
	cfg := e.Config()
	switch {
	case cfg.GetBackend() == bridge.Backend:
		return "OpenAI bridge (then the LLM's stages)"
	case e.Remote():
		// A remote model is the KServe pool's: its routes go to configured KServe upstreams,
		// to backends that registered it (endpoints named after their lease), or to both.
		var configured, registered bool
		for _, st := range kp.Status() {
			if !slices.Contains(st.Models, e.Name()) {
				continue
			}
			if strings.HasPrefix(st.Name, registry.EndpointName("")) {
				registered = true
			} else {
				configured = true
			}
		}
		var by []string
		if configured {
			by = append(by, "KServe upstream")
		}
		if registered {
			by = append(by, "registered backend")
		}
		if len(by) == 0 {
			return "routing and forwarding"
		}
		return "routing and forwarding (" + strings.Join(by, ", ") + ")"
	}
	var gpus []string
	onGPU := false
	for _, g := range cfg.GetInstanceGroup() {
		if g.GetKind() != inference.ModelInstanceGroup_KIND_GPU {
			continue
		}
		onGPU = true
		for _, n := range g.GetGpus() {
			if id := strconv.Itoa(int(n)); !slices.Contains(gpus, id) {
				gpus = append(gpus, id)
			}
		}
	}
	switch {
	case !onGPU:
		return "in-process model (CPU)"
	case len(gpus) == 1:
		return "in-process model (GPU " + gpus[0] + ")"
	case len(gpus) > 1:
		return "in-process model (GPUs " + strings.Join(gpus, ", ") + ")"
	}
	return "in-process model (GPU)"
}

// serveConsole serves the console on its own listener (server.console_listen), behind the same
// API key check as the main listener's; closers gets its shutdown.
func serveConsole(addr string, c *console.Console, authHTTP func(http.Handler) http.Handler, log *slog.Logger, closers *[]func()) error {
	mux := http.NewServeMux()
	c.Mount(mux)
	var h http.Handler = mux
	if authHTTP != nil {
		h = authHTTP(h)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server.console_listen: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("console listener stopped", "addr", addr, "err", err)
		}
	}()
	log.Info("console", "addr", ln.Addr().String())
	*closers = append(*closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return nil
}

// redactedConfig is the effective config as the console shows it: every value that may be a
// secret replaced, by the name of its key (passwords, keys and their hashes, headers, tokens), and
// every URL without its user info and query.
func redactedConfig(cfg *Config) any {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return map[string]string{"error": "the config could not be shown"}
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return map[string]string{"error": "the config could not be shown"}
	}
	return redact(doc, "")
}

// secretKey reports whether a config key's value may hold a secret.
func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"password", "secret", "sha256", "header", "credential", "api_key", "apikey"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return k == "username" || k == "token" || strings.HasSuffix(k, "_token")
}

const redactedValue = "[redacted]"

func redact(v any, key string) any {
	if key != "" && secretKey(key) {
		switch v.(type) {
		case nil, bool, int, float64: // a switch (olla_headers), a count: no secret
			return v
		}
		if v == "" {
			return v
		}
		return redactedValue
	}
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = redact(e, k)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = redact(e, key)
		}
		return out
	case string:
		return redactURL(x)
	}
	return v
}

// redactURL drops a URL's user info and query (a path's query too: a health check's
// /health?key=...); other strings are returned as they are.
func redactURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		if strings.ContainsAny(s, "@?") {
			return redactedValue // not a URL that parses, but it may hold credentials as one would
		}
		return s
	case u.Scheme != "" && u.Host != "":
		if u.User == nil && u.RawQuery == "" && u.Fragment == "" {
			return s
		}
		return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	case strings.HasPrefix(s, "/") && (u.RawQuery != "" || u.Fragment != ""):
		return u.Path
	}
	return s
}
