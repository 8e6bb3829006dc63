package olla_test

import (
	"net/http"
	"testing"

	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// /olla/models answers in Olla's unified format by default (the olla block its clients read:
// availability per endpoint, capabilities), and in Olla's other formats when asked; a model is
// found by /olla/models/{id} in any case.
func TestOllaCatalogue(t *testing.T) {
	t.Parallel()
	v := openaitest.Start(t, "v", "llama")
	l := openaitest.Start(t, "l", "qwen-coder")
	o := startOllama(t, "o", "llama", "phi")
	e := startOlla(t, openai.Options{}, v.Endpoint(0), typed(l.Endpoint(0), upstream.TypeLMStudio), o.endpoint())
	e.waitModels(t, 3)

	res, body := e.Get(t, "/olla/models")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, body, `"object":"list"`, "compact, as Olla's scripts grep it")
	var unified struct {
		Data []struct {
			ID, Object, OwnedBy string
			Olla                struct {
				Availability []struct{ Endpoint, State string }
				Capabilities []string
			}
		}
	}
	decodeJSON(t, body, &unified)
	require.Len(t, unified.Data, 3)
	assert.Equal(t, "llama", unified.Data[0].ID)
	assert.ElementsMatch(t, []string{"v", "o"}, []string{unified.Data[0].Olla.Availability[0].Endpoint, unified.Data[0].Olla.Availability[1].Endpoint})
	assert.Equal(t, "available", unified.Data[0].Olla.Availability[0].State)
	assert.Contains(t, unified.Data[2].Olla.Capabilities, "code-generation", "qwen-coder")

	_, body = e.Get(t, "/olla/models?format=openai")
	assert.Contains(t, body, `"owned_by":"olla"`)
	assert.NotContains(t, body, `"olla":{`)
	_, body = e.Get(t, "/olla/models?format=ollama")
	assert.Contains(t, body, `"models":[`)
	assert.Contains(t, body, `"name":"phi"`)
	assert.NotContains(t, body, "qwen-coder", "only models an Ollama endpoint serves")
	_, body = e.Get(t, "/olla/models?format=lmstudio")
	assert.Contains(t, body, `"id":"qwen-coder"`)
	assert.NotContains(t, body, `"phi"`, "only models an LM Studio endpoint serves")
	_, body = e.Get(t, "/olla/models?format=vllm")
	assert.Contains(t, body, `"object":"model_permission"`)
	assert.Contains(t, body, `"id":"phi"`, "every model, as Olla lists them")
	_, body = e.Get(t, "/olla/models?endpoint=l")
	assert.Contains(t, body, "qwen-coder")
	assert.NotContains(t, body, `"id":"llama"`)
	res, body = e.Get(t, "/olla/models?format=xml")
	assert.Equal(t, http.StatusBadRequest, res.StatusCode)
	assert.Contains(t, body, "unsupported format")

	res, body = e.Get(t, "/olla/models/LLAMA")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var one struct {
		ID              string
		Endpoints       []string
		LoadedEndpoints []string `json:"loaded_endpoints"`
	}
	decodeJSON(t, body, &one)
	assert.Equal(t, "llama", one.ID)
	assert.ElementsMatch(t, []string{"v", "o"}, one.Endpoints)
	res, body = e.Get(t, "/olla/models/health") // looks like a provider route's tail
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Equal(t, "Model not found\n", body)
	res, _ = e.Get(t, "/olla/models/")
	assert.Equal(t, http.StatusBadRequest, res.StatusCode)
}

// Olla's OpenAI prefix reaches every endpoint (they all speak OpenAI's API), and a provider with
// no endpoint lists no models rather than failing.
func TestOllaInclusiveAndEmptyProviders(t *testing.T) {
	t.Parallel()
	v := openaitest.Start(t, "v", "llama")
	l := openaitest.Start(t, "l", "qwen")
	e := startOlla(t, openai.Options{}, v.Endpoint(0), typed(l.Endpoint(0), upstream.TypeLMStudio))
	e.waitModels(t, 2)

	for _, p := range []string{"/olla/openai/v1/chat/completions", "/olla/openai-compatible/v1/chat/completions"} {
		res, body := e.Post(t, p, openaitest.ChatBody("llama"))
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		assert.Equal(t, "v", res.Header.Get(openai.HeaderEndpoint))
	}
	_, body := e.Get(t, "/olla/openai/v1/models")
	assert.Contains(t, body, `"id":"llama"`)
	assert.Contains(t, body, `"id":"qwen"`)

	res, body := e.Get(t, "/olla/ollama/api/tags")
	assert.Equal(t, http.StatusOK, res.StatusCode, "no Ollama endpoint: no models, as Olla answers")
	assert.Equal(t, `{"models":[]}`, body)
	for _, p := range []string{"/olla/lmstudio/api/v0/models", "/olla/lm-studio/api/v0/models"} {
		res, body := e.Get(t, p)
		require.Equal(t, http.StatusOK, res.StatusCode, p)
		assert.Contains(t, body, `"id":"qwen"`, p)
		assert.Contains(t, body, `"type":"llm"`, p)
	}
	res, body = e.Get(t, "/olla/lmstudio/api/v1/models")
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Contains(t, body, `"object":"list"`)
	assert.Contains(t, body, `"id":"qwen"`)
	assert.NotContains(t, body, `"id":"llama"`)
}

// vLLM's pooling routes (rerank, score, pooling, classify) are forwarded as completions are, on
// infergate's routes and Olla's.
func TestPoolingRoutes(t *testing.T) {
	t.Parallel()
	v := openaitest.Start(t, "v", "reranker")
	e := startOlla(t, openai.Options{}, v.Endpoint(0))
	e.waitModels(t, 1)
	for _, path := range openai.PoolingPaths {
		for _, base := range []string{"", "/olla/vllm", "/olla/proxy"} {
			res, body := e.Post(t, base+path, `{"model":"reranker","query":"q","documents":["a","b"]}`)
			require.Equal(t, http.StatusOK, res.StatusCode, "%s%s: %s", base, path, body)
			assert.Contains(t, body, `"path":"`+path+`"`, "reached the upstream's own route")
			assert.Equal(t, "v", res.Header.Get(openai.HeaderEndpoint))
		}
	}
	res, body := e.Post(t, "/v1/rerank", `{"model":"nope","query":"q","documents":["a"]}`)
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	assert.Contains(t, body, "model_not_found")
}
