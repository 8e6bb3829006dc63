package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/batcher"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/stage/disagg"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/stage/prompt"
	"github.com/infergate/infergate/stage/respcache"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/store/ratelimit"
	"github.com/infergate/infergate/surface/bridge"
	"github.com/infergate/infergate/surface/console"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/olla"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/kserveproxy"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/infergate/infergate/upstream/registry"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
)

// App is a gateway assembled from a config, with the parts an embedding program adds its own
// models to.
type App struct {
	// Gateway serves every surface; Serve it on a listener, Shutdown it to drain.
	Gateway *gateway.Gateway
	// Models is the registry behind the KServe surface (built-in, bridged, registered models).
	Models *engines.Registry
	// OpenAI is the OpenAI proxy: its endpoints are the LLMs every OpenAI route and the bridge reach.
	OpenAI *openai.Proxy
	// Backends is the RegistryService where backends register themselves; nil when disabled.
	Backends *registry.Service
	close    func()
}

// Close stops what Build started, in reverse order; call it after the gateway drained.
func (a *App) Close() { a.close() }

// Build assembles the gateway from the config: one model registry behind every surface, the
// OpenAI proxy and its KServe bridge, the KServe upstream pool, the backend registry with its
// store, and the guard (API keys, rate limits, load shedding, circuit breakers) in front of all of
// it. role is RoleGateway or RoleBatchWorker; gwCfg carries what the command line sets.
//
// Each part is built from parts already built, top to bottom: the OpenAI upstream pool
// (openaipool.Pool: routing without stages) before the stages that call it (the semantic
// caches' embeddings, vLLM's /tokenize, the sessions' served models), the stages before the
// OpenAI surface that runs them (openai.Proxy), and the gateway's readiness before the surface
// that reports it; the gateway last.
func Build(cfg *Config, role string, gwCfg gateway.Config) (_ *App, err error) {
	started := time.Now()
	if lines := cfg.Batch.validate(role, cfg.Redis.Addr); len(lines) > 0 {
		return nil, errors.New(strings.Join(lines, "\n"))
	}
	log := gwCfg.Logger
	gwCfg.Decompression = cfg.Server.decompression()
	gwCfg.FirstByteTimeout = cfg.Server.FirstByteTimeout
	gwCfg.HeaderTimeout = cfg.Server.HeaderTimeout
	gwCfg.IdleTimeout = cfg.Server.IdleTimeout
	gwCfg.HTTP1 = cfg.Server.HTTP1
	gwCfg.DisableSystemSharedMemory = cfg.Server.SystemSharedMemory != nil && !*cfg.Server.SystemSharedMemory
	gwCfg.SharedMemoryMaxRegions = cfg.Server.SharedMemoryMaxRegions
	var closers []func()
	stop := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	closers = append(closers, cancel)

	// One Redis client serves every shared component, auto-pipelining their calls together.
	var rdb rueidis.Client
	if cfg.Redis.Addr != "" {
		if rdb, err = newRedis(ctx, cfg.Redis); err != nil {
			return nil, err
		}
		closers = append(closers, rdb.Close)
	}
	var collectors []prometheus.Collector

	reg := engines.NewRegistry()
	if bm := dynamicBatching(reg, cfg.Server); bm != nil {
		collectors = append(collectors, bm.Collectors()...)
	}
	// Triton's trace extension: always served (as Triton's); spans go to the collector, when one
	// is configured, for the requests the trace settings sample.
	settings, err := cfg.Tracing.settings()
	if err != nil {
		return nil, err
	}
	tr, err := tracing.New(ctx, tracing.Config{Endpoint: cfg.Tracing.OTLPEndpoint, Headers: cfg.Tracing.Headers,
		ServiceName: cfg.Tracing.ServiceName, Settings: &settings})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	closers = append(closers, func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("tracing: flushing spans at shutdown", "err", err)
		}
	})
	gwCfg.Tracer = tr
	if role != RoleBatchWorker {
		// The GPU engine, in a build with -tags cuda: KIND_GPU instance groups (a dense
		// model's, a load's config override) run on it.
		setPlacer(reg, cfg.GPU, &gwCfg, log, &closers)
		if cfg.builtins() {
			if err := builtin.Register(reg); err != nil {
				return nil, fmt.Errorf("registering built-in models: %w", err)
			}
		}
		if err := registerDense(reg, cfg.DenseModels, log); err != nil {
			return nil, err
		}
	}

	br, brCollectors := newBreaker(cfg, rdb, log, &closers)
	collectors = append(collectors, brCollectors...)

	dm := disagg.NewMetrics()
	collectors = append(collectors, dm.Collectors()...)
	models, err := loadModels(cfg.Models, dm, rdb, redisPrefix(cfg), &closers, &collectors, log)
	if err != nil {
		return nil, err
	}

	// With API keys on, a client's Authorization is the gateway's key: never passed upstream.
	// A key sees only the models it may use, on every surface.
	var strip []string
	var visible func(context.Context, string) bool
	if len(cfg.Auth.Keys) > 0 || cfg.Auth.RedisKeys {
		strip = []string{"Authorization", "X-Api-Key"}
		visible = guard.Visible
		reg.SetVisibility(guard.Visible)
		// Each key's shared memory regions are its own: another key can neither read, write,
		// list nor unregister them.
		gwCfg.SharedMemoryOwner = func(ctx context.Context) string {
			if p := guard.PrincipalFrom(ctx); p != nil {
				return p.Name
			}
			return ""
		}
	}
	// The OpenAI upstreams' pool: routing, health, breakers and failover, without the stages,
	// which use it (the semantic caches' embeddings, vLLM's /tokenize, the sessions' models).
	ups, err := openaipool.New(openaipool.Options{Endpoints: cfg.Upstreams, Logger: log, Breaker: br,
		StripHeaders: strip, UpstreamClient: cfg.UpstreamClient})
	if err != nil {
		return nil, err
	}
	cs, err := caches(cfg.Models, rdb, redisPrefix(cfg), proxyEmbeddings(ups), &closers, &collectors, log)
	if err != nil {
		return nil, err
	}
	for name, c := range cs {
		models[name].cache = c.Interceptor()
	}
	limiter, limCollectors, err := newLimiter(cfg, rdb, log)
	if err != nil {
		return nil, err
	}
	collectors = append(collectors, limCollectors...)
	g := guard.New(guard.Options{Shedder: guard.NewShedder(cfg.Shedding), Limiter: limiter, Limits: cfg.Limits.Limits,
		Breaker: br, Logger: log})
	reg.SetAdmission(g.KServe())
	collectors = append(collectors, g.Collectors()...)

	// /tokenize and /detokenize, over HTTP and as OpenAIService's RPCs alike: the model's own
	// tokenizer when it has one configured, else its vLLM upstream's endpoints.
	tokenize := &prompt.Endpoints{Lookup: tokenizers(models), Visible: visible, Forward: vllmTokenize(ups)}
	sm := sessionManager(cfg.Models, models, rdb, redisPrefix(cfg), visible, ups.Serves, &collectors, log)
	// The console's traffic figures: every transport and every model's pipeline feed them.
	var rec *console.Recorder
	var meter func(model string) pipeline.Interceptor
	if cfg.Server.console() && role != RoleBatchWorker {
		rec = console.NewRecorder()
		meter = rec.Stage
	}
	// The gateway's readiness, turned false by its Shutdown: /health reports it.
	ready := new(gateway.Readiness)
	gwCfg.Readiness = ready
	// The OpenAI surface on the pool: each model's requests through its stages.
	proxy := openai.NewProxy(ups, openai.ProxyOptions{Visible: visible, Ready: ready.Ready,
		OllaHeaders: cfg.Compat.OllaHeaders, MaxSpoolBytes: cfg.Server.MaxSpoolBytes, SpoolDir: cfg.Server.SpoolDir,
		Stages: llmStages(tr, g, models, sm, meter),
		Tokens: tokenize.Serve})
	// The bridge gives every LLM the proxy routes a KServe model, following the proxy's model set.
	bridged := bridge.New(reg, proxy, bridge.WithLogger(log), bridge.WithChatResult(func(name string) bool {
		m := models[name]
		return m != nil && m.granite != nil
	}))
	kp, err := kserveproxy.New(kserveproxy.Options{Endpoints: cfg.Upstreams, Registry: reg, Logger: log,
		MaxMessageBytes: gwCfg.MaxMessageBytes, Breaker: br})
	if err != nil {
		return nil, err
	}

	auth, err := newAuth(cfg, rdb, rec != nil, log)
	if err != nil {
		return nil, err
	}
	messagesMount, messagesOuter, messagesInner, messagesMetrics := messagesAPI(cfg, models, proxy, visible, &collectors, log)
	if rec != nil {
		// Outside the key check, so the requests it refuses are counted; HTTPKey, inside it,
		// names each request's key. Native gRPC calls refused in the transport's tap never
		// reach the interceptors.
		gwCfg.HTTPMiddleware = append(gwCfg.HTTPMiddleware, rec.HTTP)
		gwCfg.GRPCOptions = append(gwCfg.GRPCOptions, rec.GRPCOptions()...)
	}
	gwCfg.HTTPMiddleware = append(gwCfg.HTTPMiddleware, messagesOuter)
	if auth != nil {
		gwCfg.HTTPMiddleware = append(gwCfg.HTTPMiddleware, auth.HTTP)
		gwCfg.GRPCOptions = append(gwCfg.GRPCOptions,
			auth.GRPCOption())
		if rec != nil {
			gwCfg.HTTPMiddleware = append(gwCfg.HTTPMiddleware, rec.HTTPKey)
		}
	}
	gwCfg.HTTPMiddleware = append(gwCfg.HTTPMiddleware, messagesInner)
	responsesMount, batchCaller := responsesAPI(cfg, proxy, rdb, &collectors, log)
	gwCfg.Services = append(gwCfg.Services, proxy.Mount, messagesMount, responsesMount, func(mux *http.ServeMux, _ grpc.ServiceRegistrar) {
		if cfg.Compat.ollaRoutes() {
			olla.Mount(mux, "/olla", proxy)
			olla.MountStatus(mux, proxy, olla.Info{Version: gwCfg.Version, Started: started,
				Translators: func() []olla.TranslatorStats {
					st := messagesMetrics.Stats()
					return []olla.TranslatorStats{{Name: "anthropic", Requests: st.Translated + st.Native, Successes: st.Successes,
						Failures: st.Failures, Passthrough: st.Native, Translated: st.Translated, Streaming: st.Streaming,
						NonStreaming: st.Translated + st.Native - st.Streaming, LatencyTotal: st.LatencyTotal}}
				}})
		}
		tokenize.Mount(mux)
		if len(cs) > 0 {
			mux.Handle("DELETE /admin/cache", respcache.AdminHandler(cs))
		}
		if sm != nil {
			mux.Handle("/v1/sessions", sm.Handler())
			mux.Handle("/v1/sessions/", sm.Handler())
		}
		mux.Handle("GET /admin/guard", g.AdminHandler(endpointNames(ups, kp)))
	})

	var store registry.Store
	var backends *registry.Service
	if !cfg.Registry.Disabled {
		if store, err = newStore(cfg, rdb, log, &closers); err != nil {
			return nil, err
		}
		backends = registry.NewService(store, registry.ServiceOptions{Logger: log,
			DefaultTTL: cfg.Registry.DefaultTTL, MinTTL: cfg.Registry.MinTTL, MaxTTL: cfg.Registry.MaxTTL})
		gwCfg.Services = append(gwCfg.Services, backends.Mount)
	} else {
		log.Info("backend registry disabled")
	}

	bp, err := newBatch(cfg, role, rdb, batchCaller, log, &closers)
	if err != nil {
		return nil, err
	}
	// The console reads the parts built above, when asked; the gateway's metrics registry is
	// made by gateway.New below, hence the late binding.
	var gw *gateway.Gateway
	if rec != nil {
		cp := consoleParts{cfg: cfg, version: gwCfg.Version, started: started, ups: ups, kp: kp, br: br, store: store,
			reg: reg, stages: llmStageNames(models, sm, true), metrics: prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
				return gw.Metrics().Gather()
			}), log: log, recorder: rec}
		if bp != nil {
			cp.batches = bp.state
		}
		c := newConsole(cp)
		if addr := cfg.Server.ConsoleListen; addr != "" {
			var authHTTP func(http.Handler) http.Handler
			if auth != nil {
				authHTTP = auth.HTTP
			}
			if err := serveConsole(addr, c, authHTTP, log, &closers); err != nil {
				return nil, err
			}
		} else {
			gwCfg.Services = append(gwCfg.Services, func(mux *http.ServeMux, _ grpc.ServiceRegistrar) { c.Mount(mux) })
		}
	}
	if bp != nil {
		if bp.service != nil {
			gwCfg.Services = append(gwCfg.Services, bp.service.Mount)
		}
		collectors = append(collectors, bp.collectors()...)
	}

	gw = gateway.New(reg, gwCfg)
	gw.Metrics().MustRegister(ups.Collectors()...)
	gw.Metrics().MustRegister(kp.Collectors()...)
	gw.Metrics().MustRegister(collectors...)

	// Upstreams are checked once before serving, so the first requests find their models.
	ups.Start(ctx)
	closers = append(closers, ups.Close)
	kp.Start(ctx)
	closers = append(closers, kp.Close)
	bridged.Sync()
	if store != nil {
		// Registered tensor backends join the KServe upstream pool, routed like configured ones.
		ap := registry.NewApplier(registry.ApplierOptions{OpenAI: ups, Tensors: registry.KServeTensors{Pool: kp}, Logger: log})
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := ap.Run(ctx, store); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("backend registry stopped", "err", err)
			}
		}()
		closers = append(closers, func() { cancel(); <-done })
	}
	if bp != nil {
		// Started last, so it stops first: lines in flight go back to the bus while the proxy
		// they run through still works.
		bp.start(ctx, log, &closers)
	}
	return &App{Gateway: gw, Models: reg, OpenAI: proxy, Backends: backends, close: stop}, nil
}

// tokenizers is prompt.Endpoints' Lookup: the configured model's tokenizer, nil without one.
func tokenizers(models map[string]*llmModel) func(name string) *prompt.Model {
	return func(name string) *prompt.Model {
		if m := models[name]; m != nil {
			return m.Model // nil without a tokenizer
		}
		return nil
	}
}

// vllmTokenize is prompt.Endpoints' Forward: /tokenize and /detokenize of the model's vLLM
// upstreams, routed as the OpenAI API routes (health, breakers, failover), without the stages.
func vllmTokenize(ups *openaipool.Pool) func(ctx context.Context, model, path string, body []byte) (int, []byte, error) {
	return func(ctx context.Context, model, path string, body []byte) (int, []byte, error) {
		status, answer, err := ups.Post(ctx, upstream.TypeVLLM, model, path, body)
		if errors.Is(err, openaipool.ErrNotServed) {
			return 0, nil, prompt.ErrNoUpstream // only vLLM has the endpoints among the upstream types
		}
		return status, answer, err
	}
}

// endpointNames lists every upstream endpoint, the OpenAI pool's then the KServe pool's, for
// GET /admin/guard (their breakers' state).
func endpointNames(ups *openaipool.Pool, kp *kserveproxy.Proxy) func() []string {
	return func() []string {
		names := ups.EndpointNames()
		for _, s := range kp.Status() {
			names = append(names, s.Name)
		}
		return names
	}
}

// newAuth returns the API key check, or nil (with a warning) when no keys are configured; the
// warning names the console when it is served (consoleOn), which is then open to anyone too.
func newAuth(cfg *Config, rdb rueidis.Client, consoleOn bool, log *slog.Logger) (*guard.Auth, error) {
	static, err := guard.NewStaticKeys(cfg.Auth.Keys)
	if err != nil {
		return nil, err
	}
	var keys guard.Keys
	if static.Len() > 0 {
		keys = append(keys, static)
	}
	if cfg.Auth.RedisKeys {
		keys = append(keys, guard.NewRedisKeys(rdb, guard.RedisKeysOptions{Prefix: cfg.Redis.Prefix}))
	}
	if len(keys) == 0 {
		open := "register backends and read /admin/guard"
		switch {
		case consoleOn && cfg.Server.ConsoleListen == "":
			open = "register backends, read /admin/guard and open the operator console (/console)"
		case consoleOn:
			open += ", and anyone who can reach " + cfg.Server.ConsoleListen + " may open the operator console"
		}
		log.Warn("API keys are OFF: anyone who can reach this port may call every model, " + open + "; configure auth.keys")
		return nil, nil
	}
	log.Info("API keys required", "configured", static.Len(), "redis", cfg.Auth.RedisKeys)
	return guard.NewAuth(keys, log), nil
}

// newLimiter returns the rate limiter the configured limits need: shared through Redis when
// there is one, else in-process; nil without limits.
func newLimiter(cfg *Config, rdb rueidis.Client, log *slog.Logger) (ratelimit.Limiter, []prometheus.Collector, error) {
	if !cfg.Limits.limited() {
		return nil, nil, nil
	}
	m := ratelimit.NewMetrics()
	if rdb == nil {
		return ratelimit.NewLocal(ratelimit.LocalOptions{Metrics: m}), m.Collectors(), nil
	}
	policy := ratelimit.FailOpen
	if cfg.Limits.Failure == "closed" {
		policy = ratelimit.FailClosed
	}
	l, err := ratelimit.NewRedis(rdb, ratelimit.RedisOptions{Prefix: redisPrefix(cfg) + ":rl", Timeout: cfg.Limits.RedisTimeout,
		Failure: policy, Metrics: m, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	log.Info("rate limits shared through Redis", "failure", map[ratelimit.FailurePolicy]string{ratelimit.FailOpen: "open", ratelimit.FailClosed: "closed"}[policy])
	return l, m.Collectors(), nil
}

// newBreaker returns the circuit breaker: shared through Redis when there is one, else
// in-process; nil when disabled.
func newBreaker(cfg *Config, rdb rueidis.Client, log *slog.Logger, closers *[]func()) (breaker.Breaker, []prometheus.Collector) {
	if cfg.Breaker.Disabled {
		return nil, nil
	}
	opts := breaker.Options{Settings: cfg.Breaker.Settings,
		OnStateChange: func(endpoint string, from, to breaker.State) {
			log.Warn("circuit breaker", "endpoint", endpoint, "from", from.String(), "to", to.String())
		}}
	if rdb == nil {
		b := breaker.NewLocal(opts)
		return b, b.Collectors()
	}
	b := breaker.NewRedis(rdb, breaker.RedisOptions{Options: opts, Prefix: redisPrefix(cfg), Logger: log})
	*closers = append(*closers, b.Close)
	return b, b.Collectors()
}

func redisPrefix(cfg *Config) string {
	if cfg.Redis.Prefix != "" {
		return cfg.Redis.Prefix
	}
	return "infergate"
}

// newStore opens the registry's store: in-process, or shared through Redis.
func newStore(cfg *Config, rdb rueidis.Client, log *slog.Logger, closers *[]func()) (registry.Store, error) {
	if cfg.registryStore() == "memory" {
		s := registry.NewMemoryStore()
		*closers = append(*closers, s.Close)
		return s, nil
	}
	s := registry.NewRedisStore(rdb, registry.RedisOptions{Prefix: cfg.Redis.Prefix, Logger: log})
	*closers = append(*closers, s.Close)
	log.Info("backend registry shared through Redis", "addr", cfg.Redis.Addr)
	return s, nil
}

// newRedis connects to Redis and checks it answers, so a wrong address fails at start-up.
func newRedis(ctx context.Context, c redisConfig) (rueidis.Client, error) {
	timeout := c.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{c.Addr}, Username: c.Username, Password: c.Password, SelectDB: c.DB,
		Dialer: net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}, DisableCache: true,
	})
	if err != nil {
		return nil, fmt.Errorf("redis %s: %w", c.Addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redis %s: %w", c.Addr, err)
	}
	return client, nil
}

// dynamicBatching gives reg Triton's dynamic batcher, for the models whose config asks for it,
// unless server.dynamic_batching is off (then no model has a scheduler); it returns the
// batchers' metrics, nil when off.
func dynamicBatching(reg *engines.Registry, server serverConfig) *batcher.Metrics {
	if server.DynamicBatching != nil && !*server.DynamicBatching {
		reg.SetScheduler(nil)
		return nil
	}
	bm := batcher.NewMetrics()
	reg.SetScheduler(batcher.Factory(batcher.Options{Remote: server.DynamicBatchingRemote, Metrics: bm}))
	return bm
}
