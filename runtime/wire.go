package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/adapters/bridge"
	"github.com/infergate/infergate/adapters/gateway"
	"github.com/infergate/infergate/adapters/kserveproxy"
	"github.com/infergate/infergate/adapters/openai"
	"github.com/infergate/infergate/adapters/registry"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/cpu"
	"github.com/redis/rueidis"
)

// build assembles the gateway from the config: one model registry behind every surface, the
// OpenAI proxy and its KServe bridge, the KServe upstream pool, and the backend registry with its
// store. closeAll stops what build started, in reverse order; call it after the gateway drained.
func build(cfg *fileConfig, gwCfg gateway.Config) (gw *gateway.Gateway, closeAll func(), err error) {
	log := gwCfg.Logger
	var closers []func()
	closeAll = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	closers = append(closers, cancel)

	reg := engines.NewRegistry()
	if cfg.builtins() {
		if err := cpu.Register(reg); err != nil {
			return nil, nil, fmt.Errorf("registering built-in models: %w", err)
		}
	}

	// The bridge gives every LLM the proxy routes a KServe model; the proxy announces its model set
	// changing before the bridge exists, so the callback looks the bridge up.
	var br atomic.Pointer[bridge.Bridge]
	proxy, err := openai.New(openai.Options{Endpoints: cfg.Upstreams, Logger: log,
		Ready: func() bool { return gw.Ready() },
		OnModelsChanged: func() {
			if b := br.Load(); b != nil {
				b.Sync()
			}
		}})
	if err != nil {
		return nil, nil, err
	}
	br.Store(bridge.New(reg, proxy, bridge.WithLogger(log)))
	kp, err := kserveproxy.New(kserveproxy.Options{Endpoints: cfg.Upstreams, Registry: reg, Logger: log,
		MaxMessageBytes: gwCfg.MaxMessageBytes})
	if err != nil {
		return nil, nil, err
	}
	gwCfg.Services = append(gwCfg.Services, proxy.Mount)

	var store registry.Store
	if !cfg.Registry.Disabled {
		store, err = newStore(ctx, cfg, log, &closers)
		if err != nil {
			return nil, nil, err
		}
		svc := registry.NewService(store, registry.ServiceOptions{Logger: log,
			DefaultTTL: cfg.Registry.DefaultTTL, MinTTL: cfg.Registry.MinTTL, MaxTTL: cfg.Registry.MaxTTL})
		gwCfg.Services = append(gwCfg.Services, svc.Mount)
	} else {
		log.Info("backend registry disabled")
	}

	gw = gateway.New(reg, gwCfg)
	gw.Metrics().MustRegister(proxy.Collectors()...)
	gw.Metrics().MustRegister(kp.Collectors()...)

	// Upstreams are checked once before serving, so the first requests find their models.
	proxy.Start(ctx)
	closers = append(closers, proxy.Close)
	kp.Start(ctx)
	closers = append(closers, kp.Close)
	br.Load().Sync()
	if store != nil {
		// Registered tensor backends join the KServe upstream pool, routed like configured ones.
		ap := registry.NewApplier(registry.ApplierOptions{OpenAI: proxy, Tensors: registry.KServeTensors{Pool: kp}, Logger: log})
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := ap.Run(ctx, store); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("backend registry stopped", "err", err)
			}
		}()
		closers = append(closers, func() { cancel(); <-done })
	}
	return gw, closeAll, nil
}

// newStore opens the registry's store: in-process, or shared through Redis.
func newStore(ctx context.Context, cfg *fileConfig, log *slog.Logger, closers *[]func()) (registry.Store, error) {
	if cfg.registryStore() == "memory" {
		s := registry.NewMemoryStore()
		*closers = append(*closers, s.Close)
		return s, nil
	}
	client, err := newRedis(ctx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, client.Close)
	s := registry.NewRedisStore(client, registry.RedisOptions{Prefix: cfg.Redis.Prefix, Logger: log})
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
		Dialer: netDialer(timeout), DisableCache: true,
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

func netDialer(timeout time.Duration) net.Dialer {
	return net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
}
