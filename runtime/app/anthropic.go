package app

import (
	"context"
	"log/slog"
	"net/http"
	"slices"

	"github.com/infergate/infergate/surface/anthropic"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// messagesAPI mounts Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens
// (and under /olla/anthropic with Olla's routes), served through the gateway's own
// /v1/chat/completions handler (the mux, after the guard checked the key) or, for a model whose
// models.<name>.messages is native, passed to its upstreams' /v1/messages. It returns the
// service to mount and the middleware that answers Anthropic's clients in their shapes: their
// x-api-key as the key (outermost, before the key check) and /v1/models in Anthropic's shape
// (inside it).
func messagesAPI(cfg *Config, models map[string]*llmModel, proxy *openai.Proxy, visible func(context.Context, string) bool,
	collectors *[]prometheus.Collector, log *slog.Logger) (mount func(*http.ServeMux, grpc.ServiceRegistrar), outer, inner func(http.Handler) http.Handler, m *anthropic.Metrics) {
	m = anthropic.NewMetrics()
	*collectors = append(*collectors, m.Collectors()...)
	count := anthropic.NewCountTokens(proxy.Serves, visible, promptCounters(models))
	native := func(model string) bool { return cfg.Models[model].Messages == "native" }
	mount = func(mux *http.ServeMux, _ grpc.ServiceRegistrar) {
		h := anthropic.New(anthropic.Options{Chat: mux, Native: native, NativeHandler: proxy.Forwarder(),
			CountTokens: count, Metrics: m, Logger: log})
		mux.Handle("/v1/messages", h)
		mux.Handle("/v1/messages/count_tokens", h)
		if cfg.Compat.ollaRoutes() {
			// Olla's route passes a model through to its upstreams' own /v1/messages when they are
			// all of a type that serves it (Olla's passthrough: vLLM, LM Studio, Ollama, llama.cpp),
			// saying so in X-Olla-Mode, and translates otherwise or when they turn out not to
			// (an older vLLM's 404); it keys sticky sessions as Olla does.
			forward := proxy.Forwarder()
			passthrough := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Olla-Mode", "passthrough")
				forward.ServeHTTP(w, r)
			})
			oh := anthropic.New(anthropic.Options{Chat: mux, Native: func(model string) bool { return native(model) || passesThrough(proxy, model) },
				NativeHandler: passthrough, CountTokens: count, Metrics: m, Logger: log})
			olla := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				oh.ServeHTTP(w, r.WithContext(openai.WithOllaSticky(r.Context())))
			})
			mux.Handle("/olla/anthropic/v1/messages", olla)
			mux.Handle("/olla/anthropic/v1/messages/count_tokens", olla)
			models := anthropic.WrapModels(http.StripPrefix("/olla/anthropic", mux))
			mux.Handle("GET /olla/anthropic/v1/models", models)
			mux.Handle("GET /olla/anthropic/v1/models/{model...}", models)
		}
	}
	return mount, anthropic.AcceptAPIKey, anthropic.ModelsMiddleware, m
}

// promptCounters returns each configured model's tokenizer and chat template as count_tokens
// counts with them; nil for a model without a tokenizer.
func promptCounters(models map[string]*llmModel) func(model string) anthropic.PromptCounter {
	return func(model string) anthropic.PromptCounter {
		if lm := models[model]; lm != nil && lm.Model != nil {
			return lm.Model
		}
		return nil
	}
}

// passthroughTypes are the endpoint types whose servers answer Anthropic's /v1/messages
// themselves, as Olla's profiles say.
var passthroughTypes = []string{upstream.TypeVLLM, upstream.TypeLMStudio, upstream.TypeOllama, upstream.TypeLlamaCpp}

// passesThrough reports whether every endpoint serving model is of a passthrough type.
func passesThrough(proxy *openai.Proxy, model string) bool {
	ms := proxy.Table(func(name string) bool { return name == model })
	return len(ms) == 1 && len(ms[0].Routes) > 0 && !slices.ContainsFunc(ms[0].Routes, func(r openaipool.Route) bool {
		return !slices.Contains(passthroughTypes, r.Type)
	})
}
