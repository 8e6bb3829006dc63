package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/surface/anthropic"
	"github.com/infergate/infergate/surface/openai"
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
func messagesAPI(cfg *Config, models map[string]*llmModel, proxy func() *openai.Proxy, visible func(context.Context, string) bool,
	collectors *[]prometheus.Collector, log *slog.Logger) (mount func(*http.ServeMux, grpc.ServiceRegistrar), outer, inner func(http.Handler) http.Handler) {
	m := anthropic.NewMetrics()
	*collectors = append(*collectors, m.Collectors()...)
	served := func(model string) bool {
		return slices.ContainsFunc(proxy().Models(), func(mi openai.ModelInfo) bool { return mi.Name == model })
	}
	count := func(ctx context.Context, model string, body []byte) (int, error) {
		if !served(model) || visible != nil && !visible(ctx, model) {
			return 0, pipeline.ModelNotFound(model)
		}
		lm := models[model]
		if lm == nil || lm.Model == nil {
			return 0, fmt.Errorf("model %s: %w", model, anthropic.ErrNoTokenizer)
		}
		req, err := pipeline.NewRequest("/v1/chat/completions", body)
		if err != nil {
			return 0, err
		}
		n, ok, err := lm.PromptLen(ctx, req)
		switch {
		case err != nil:
			return 0, err
		case !ok:
			return 0, fmt.Errorf("model %s: %w", model, anthropic.ErrNoTokenizer)
		}
		return n, nil
	}
	native := func(model string) bool { return cfg.Models[model].Messages == "native" }
	mount = func(mux *http.ServeMux, _ grpc.ServiceRegistrar) {
		h := anthropic.New(anthropic.Options{Chat: mux, Native: native, NativeHandler: proxy().Forwarder(),
			CountTokens: count, Metrics: m, Logger: log})
		paths := []string{"/v1/messages", "/v1/messages/count_tokens"}
		if cfg.Compat.ollaRoutes() {
			paths = append(paths, "/olla/anthropic/v1/messages", "/olla/anthropic/v1/messages/count_tokens")
			models := anthropic.WrapModels(http.StripPrefix("/olla/anthropic", mux))
			mux.Handle("GET /olla/anthropic/v1/models", models)
			mux.Handle("GET /olla/anthropic/v1/models/{model...}", models)
		}
		for _, p := range paths {
			mux.Handle(p, h)
		}
	}
	inner = func(next http.Handler) http.Handler {
		models := anthropic.WrapModels(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && (r.URL.Path == "/v1/models" || strings.HasPrefix(r.URL.Path, "/v1/models/")) {
				models.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	return mount, anthropic.AcceptAPIKey, inner
}
