package anthropic

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/infergate/infergate/core/pipeline"
)

// PromptCounter counts an OpenAI chat request's prompt tokens as its model renders and tokenizes
// it (*prompt.Model is one); ok is false when it cannot count this request.
type PromptCounter interface {
	PromptLen(ctx context.Context, req *pipeline.Request) (n int, ok bool, err error)
}

// NewCountTokens returns an Options.CountTokens that counts with each model's PromptCounter:
// served tells whether the gateway routes a model, visible (nil: every model) whether the caller
// of ctx may see it, and a model that fails either is model_not_found, as for any other request;
// counter returns a model's counter, nil when it has no tokenizer (ErrNoTokenizer, so the
// estimate is answered).
func NewCountTokens(served func(model string) bool, visible func(ctx context.Context, model string) bool,
	counter func(model string) PromptCounter) func(ctx context.Context, model string, openAIChatBody []byte) (int, error) {
	return func(ctx context.Context, model string, body []byte) (int, error) {
		if !served(model) || visible != nil && !visible(ctx, model) {
			return 0, pipeline.ModelNotFound(model)
		}
		c := counter(model)
		if c == nil {
			return 0, fmt.Errorf("model %s: %w", model, ErrNoTokenizer)
		}
		req, err := pipeline.NewRequest("/v1/chat/completions", body)
		if err != nil {
			return 0, err
		}
		n, ok, err := c.PromptLen(ctx, req)
		switch {
		case err != nil:
			return 0, err
		case !ok:
			return 0, fmt.Errorf("model %s: %w", model, ErrNoTokenizer)
		}
		return n, nil
	}
}

// ModelsMiddleware wraps the gateway's handler, inside its API key check: GET /v1/models and GET
// /v1/models/{model} go through WrapModels (an Anthropic client gets Anthropic's shape), every
// other request to next untouched.
func ModelsMiddleware(next http.Handler) http.Handler {
	models := WrapModels(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && (r.URL.Path == "/v1/models" || strings.HasPrefix(r.URL.Path, "/v1/models/")) {
			models.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
