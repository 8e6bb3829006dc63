package anthropic_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/surface/anthropic"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingModel counts a prompt as its body's length, or cannot count it (ok false), or fails.
type countingModel struct {
	ok  bool
	err error
}

func (c countingModel) PromptLen(_ context.Context, req *pipeline.Request) (int, bool, error) {
	return len(req.Body()), c.ok, c.err
}

// TestNewCountTokens: a model the gateway does not route, or the caller may not see, is
// model_not_found; one without a counter, or whose counter cannot count the request, wraps
// ErrNoTokenizer; otherwise the counter's count, or its error.
func TestNewCountTokens(t *testing.T) {
	failed := errors.New("template failed")
	counters := map[string]anthropic.PromptCounter{"exact": countingModel{ok: true}, "unsure": countingModel{},
		"broken": countingModel{ok: true, err: failed}, "hidden": countingModel{ok: true}}
	served := func(model string) bool { return model != "gone" }
	visible := func(_ context.Context, model string) bool { return model != "hidden" }
	count := anthropic.NewCountTokens(served, visible, func(model string) anthropic.PromptCounter { return counters[model] })
	body := func(model string) []byte { return []byte(`{"model":"` + model + `","messages":[]}`) }
	ctx := context.Background()

	n, err := count(ctx, "exact", body("exact"))
	require.NoError(t, err)
	assert.Equal(t, len(body("exact")), n)
	for _, model := range []string{"gone", "hidden"} {
		_, err = count(ctx, model, body(model))
		var perr *pipeline.Error
		require.ErrorAs(t, err, &perr, model)
		assert.Equal(t, http.StatusNotFound, perr.Status, model)
		assert.Equal(t, "model_not_found", perr.Code, model)
	}
	for _, model := range []string{"none", "unsure"} {
		_, err = count(ctx, model, body(model))
		require.ErrorIs(t, err, anthropic.ErrNoTokenizer, model)
		assert.EqualError(t, err, "model "+model+": the model has no tokenizer")
	}
	_, err = count(ctx, "broken", body("broken"))
	assert.ErrorIs(t, err, failed)
	_, err = count(ctx, "exact", []byte(`not json`))
	assert.Error(t, err, "a body that is no request")

	// Without visible, every served model may be seen.
	n, err = anthropic.NewCountTokens(served, nil, func(model string) anthropic.PromptCounter { return counters[model] })(ctx, "hidden", body("hidden"))
	require.NoError(t, err)
	assert.Equal(t, len(body("hidden")), n)
}

// TestModelsMiddleware: GET /v1/models and /v1/models/{model} from an Anthropic client are
// answered in Anthropic's shape; everything else reaches the handler untouched.
func TestModelsMiddleware(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "GET /v1/models":
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"t"}]}`))
		case "GET /v1/models/m":
			_, _ = w.Write([]byte(`{"id":"m","object":"model","created":1,"owned_by":"t"}`))
		default:
			_, _ = w.Write([]byte(`next ` + r.Method + ` ` + r.URL.Path))
		}
	})
	h := anthropic.ModelsMiddleware(next)
	serve := func(method, path string, anthropicClient bool) string {
		r := httptest.NewRequest(method, path, nil)
		if anthropicClient {
			r.Header.Set("Anthropic-Version", "2023-06-01")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Body.String()
	}
	assert.JSONEq(t, `{"data":[{"type":"model","id":"m","display_name":"m","created_at":"1970-01-01T00:00:01Z"}],"has_more":false,"first_id":"m","last_id":"m"}`,
		serve(http.MethodGet, "/v1/models", true))
	assert.JSONEq(t, `{"type":"model","id":"m","display_name":"m","created_at":"1970-01-01T00:00:01Z"}`, serve(http.MethodGet, "/v1/models/m", true))
	assert.JSONEq(t, `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"t"}]}`, serve(http.MethodGet, "/v1/models", false),
		"an OpenAI client's list")
	assert.Equal(t, "next POST /v1/models", serve(http.MethodPost, "/v1/models", true))
	assert.Equal(t, "next GET /v1/modelsx", serve(http.MethodGet, "/v1/modelsx", true))
	assert.Equal(t, "next GET /v1/chat", serve(http.MethodGet, "/v1/chat", true))
}
