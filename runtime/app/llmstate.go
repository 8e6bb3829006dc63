package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/embed"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/stage/prompt"
	"github.com/infergate/infergate/stage/respcache"
	"github.com/infergate/infergate/stage/sessions"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// owner is the caller a request belongs to, for the response cache's and the sessions' scopes:
// its API key's name; "" when API keys are off (every caller is one).
func owner(ctx context.Context) string {
	if p := guard.PrincipalFrom(ctx); p != nil {
		return p.Name
	}
	return ""
}

// caches builds the response cache of each model with models.<name>.cache: in the process,
// or in Redis (shared by the replicas) with redis.addr. Semantic mode embeds with the model
// its embeddings names, through post, else with the built-in lexical embedder. closers gets
// the Redis stores' Close.
func caches(cfg map[string]modelConfig, rdb rueidis.Client, redisPrefix string, post embedPost, closers *[]func(),
	collectors *[]prometheus.Collector, log *slog.Logger) (map[string]*respcache.Cache, error) {
	out := map[string]*respcache.Cache{}
	metrics := respcache.NewMetrics()
	for _, name := range slices.Sorted(maps.Keys(cfg)) {
		c := cfg[name].Cache
		if c == nil {
			continue
		}
		opts := respcache.Options{Model: name, Mode: respcache.ModeExact, Threshold: float32(c.Threshold),
			SamplingAny: c.Sampling == "any", ToolCalls: c.ToolCalls, Scope: respcache.ScopeKey, Owner: owner,
			IgnoreFields: []string{"session_id"}, Metrics: metrics, Logger: log}
		if c.Scope == "shared" {
			opts.Scope = respcache.ScopeShared
		}
		embedder := ""
		if c.Mode == "semantic" {
			opts.Mode = respcache.ModeSemantic
			if c.Embeddings == "" {
				opts.Embedder, embedder = embed.NewLexical(0), embed.LexicalVersion
			} else {
				model := c.Embeddings
				opts.Embedder, embedder = embed.NewRemote(embed.RemoteOptions{Model: model,
					Post: func(ctx context.Context, body []byte) ([]byte, error) { return post(ctx, model, body) }}), "model="+model
			}
		}
		if rdb != nil {
			// A model's entries live under a prefix of their own (Flush empties it), and so do
			// the vectors of each embedder: another's vectors are not comparable.
			prefix := redisPrefix + ":respcache:" + name + ":"
			if embedder != "" {
				prefix += embedder + ":"
			}
			st := respcache.NewRedis(rdb, respcache.RedisOptions{Prefix: prefix, TTL: c.TTL, MaxEntries: c.MaxEntries, Logger: log})
			*closers = append(*closers, st.Close)
			opts.Store = st
		} else {
			opts.Store = respcache.NewMemory(respcache.MemoryOptions{MaxEntries: c.MaxEntries, MaxBytes: int64(c.MaxBytes), TTL: c.TTL})
		}
		cache, err := respcache.New(opts)
		if err != nil {
			return nil, fmt.Errorf("models.%s.cache: %w", name, err)
		}
		log.Info("response cache", "model", name, "mode", opts.Mode, "scope", opts.Scope, "shared", rdb != nil, "embedder", embedder)
		out[name] = cache
	}
	if len(out) > 0 {
		*collectors = append(*collectors, metrics.Collectors()...)
	}
	return out, nil
}

// embedPost sends an embeddings request body for model to one of its upstreams and returns the
// answer.
type embedPost func(ctx context.Context, model string, body []byte) ([]byte, error)

// proxyEmbeddings is the embedPost of the semantic caches: the embeddings model's upstreams as
// the OpenAI API routes them (health, breakers, failover), without the stages (the guard's
// admission) — the embedding is the gateway's own work for a request already admitted.
func proxyEmbeddings(ups *openaipool.Pool) embedPost {
	return func(ctx context.Context, model string, body []byte) ([]byte, error) {
		for _, typ := range upstream.Types {
			status, answer, err := ups.Post(ctx, typ, model, "/v1/embeddings", body)
			if errors.Is(err, openaipool.ErrNotServed) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if status/100 != 2 {
				return nil, fmt.Errorf("embeddings model %s answered %d: %s", model, status, httpapi.Truncate(string(answer), 200))
			}
			return answer, nil
		}
		return nil, fmt.Errorf("no upstream serves the embeddings model %s", model)
	}
}

// sessionManager serves chat sessions for the models with models.<name>.session (nil when
// none has): in the process, or in Redis (replicas continue each other's conversations) with
// redis.addr. A model with a tokenizer counts its window's tokens exactly, with its chat
// template; the others with the sessions package's conservative estimate.
//
// served tells whether the gateway routes a model now: a session for one it does not is the
// same 404 as for one the caller's key may not see (visible), not "no sessions".
func sessionManager(cfg map[string]modelConfig, models map[string]*llmModel, rdb rueidis.Client, redisPrefix string,
	visible func(context.Context, string) bool, served func(string) bool, collectors *[]prometheus.Collector, log *slog.Logger) *sessions.Manager {
	mo := map[string]sessions.ModelOptions{}
	for name, c := range cfg {
		s := c.Session
		if s == nil {
			continue
		}
		o := sessions.ModelOptions{ContextWindow: s.ContextWindow, MaxBytes: s.MaxBytes, TTL: s.TTL}
		if m := models[name]; m != nil && m.Model != nil {
			o.Tokens = exactTokens(name, m.Model)
		}
		mo[name] = o
	}
	if len(mo) == 0 {
		return nil
	}
	metrics := sessions.NewMetrics()
	*collectors = append(*collectors, metrics.Collectors()...)
	var store sessions.Store
	if rdb != nil {
		store = sessions.NewRedis(rdb, sessions.RedisOptions{Prefix: redisPrefix})
	} else {
		store = sessions.NewMemory(sessions.MemoryOptions{Metrics: metrics})
	}
	log.Info("chat sessions", "models", slices.Sorted(maps.Keys(mo)), "shared", rdb != nil)
	shown := func(ctx context.Context, model string) bool {
		return (visible == nil || visible(ctx, model)) && served(model)
	}
	return sessions.New(sessions.Options{Store: store, Models: mo, Owner: owner, Visible: shown,
		Prefer: upstream.WithPreferred, Metrics: metrics, Logger: log})
}

// exactTokens counts a conversation's prompt tokens as model m renders and tokenizes it.
func exactTokens(name string, m *prompt.Model) sessions.TokenCounter {
	model, _ := json.Marshal(name)
	return func(ctx context.Context, messages []json.RawMessage) (int, error) {
		msgs, err := json.Marshal(messages)
		if err != nil {
			return 0, err
		}
		req, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":`+string(model)+`,"messages":`+string(msgs)+`}`))
		if err != nil {
			return 0, err
		}
		n, ok, err := m.PromptLen(ctx, req)
		if err != nil || !ok {
			return sessions.EstimateTokens(ctx, messages)
		}
		return n, nil
	}
}
