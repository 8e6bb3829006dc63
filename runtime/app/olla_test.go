package app

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOllaRoutes: with API keys on, an Olla client reaches its provider's endpoints under
// /olla/{provider}/v1 with its key in x-api-key (never passed upstream) and reads Olla's headers
// when compat.olla_headers asks for them; compat.olla_routes: false turns the routes off.
func TestOllaRoutes(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	post := func(addr, path string, hdr ...string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(`{"model":"llama","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	ready := func(addr string) {
		require.Eventually(t, func() bool {
			res, _ := post(addr, "/v1/chat/completions", "X-Api-Key", secUserKey)
			return res.StatusCode == http.StatusOK
		}, 10*time.Second, 10*time.Millisecond)
	}
	addr := startInProcess(t, secureConfig(t, up.URL, "compat: {olla_headers: true}"))
	ready(addr)
	res, body := post(addr, "/olla/vllm/v1/chat/completions", "X-Api-Key", secUserKey)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Equal(t, "up", res.Header.Get("X-Olla-Endpoint"))
	assert.Equal(t, "vllm", res.Header.Get("X-Olla-Backend-Type"))
	assert.Empty(t, up.LastHeader().Get("X-Api-Key"), "the gateway's key stays at the gateway")
	res, body = post(addr, "/olla/vllm/v1/chat/completions")
	assert.Equal(t, http.StatusUnauthorized, res.StatusCode)
	assert.Contains(t, body, `"code":"invalid_api_key"`)
	res, _ = post(addr, "/olla/ollama/v1/chat/completions", "Authorization", "Bearer "+secUserKey)
	assert.Equal(t, http.StatusNotFound, res.StatusCode, "no Ollama endpoint serves llama")

	off := startInProcess(t, secureConfig(t, up.URL, "compat: {olla_routes: false}"))
	ready(off)
	res, _ = post(off, "/olla/vllm/v1/chat/completions", "X-Api-Key", secUserKey)
	assert.Equal(t, http.StatusNotFound, res.StatusCode)
	res, _ = post(off, "/v1/chat/completions", "X-Api-Key", secUserKey)
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Empty(t, res.Header.Get("X-Olla-Endpoint"), "Olla's headers are off by default")
}
