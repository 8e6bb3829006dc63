package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/vllmsim"
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

// Olla's Anthropic route passes a model through to upstreams that serve /v1/messages themselves
// (X-Olla-Mode: passthrough, the upstream's own answer), translates for other types, and falls
// back to translating when a passthrough type's server has no /v1/messages (an older vLLM's 404).
func TestOllaAnthropicPassthrough(t *testing.T) {
	t.Parallel()
	sim := vllmsim.Start(t, vllmsim.Config{Model: "native", DecodePerToken: -1, PrefillPerToken: -1})
	old := openaitest.Start(t, "old", "oldvllm") // a vLLM type without /v1/messages
	oai := openaitest.Start(t, "oai", "hosted")  // an OpenAI-type endpoint: always translated
	addr := serveYAML(t, fmt.Sprintf(`upstreams:
  - {name: sim, url: %q, type: vllm, check_interval: 50ms}
  - {name: old, url: %q, type: vllm, check_interval: 50ms}
  - {name: oai, url: %q, type: openai, check_interval: 50ms}
`, sim.URL, old.URL, oai.URL), io.Discard)
	messages := func(model string, stream bool) (*http.Response, string) {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"stream":%t,"messages":[{"role":"user","content":"hi"}]}`, model, stream)
		res, err := http.Post("http://"+addr+"/olla/anthropic/v1/messages", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	require.Eventually(t, func() bool {
		res, _ := messages("hosted", false)
		r2, _ := messages("native", false)
		r3, _ := messages("oldvllm", false)
		return res.StatusCode == http.StatusOK && r2.StatusCode == http.StatusOK && r3.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	counts := func() (pass, translated int64) {
		res, err := http.Get("http://" + addr + "/internal/stats/translators")
		require.NoError(t, err)
		defer res.Body.Close()
		var st struct {
			Translators []struct {
				Passthrough int64 `json:"passthrough_requests"`
				Translation int64 `json:"translation_requests"`
			}
		}
		require.NoError(t, json.NewDecoder(res.Body).Decode(&st))
		require.Len(t, st.Translators, 1)
		return st.Translators[0].Passthrough, st.Translators[0].Translation
	}
	pass0, tr0 := counts()

	res, body := messages("native", false)
	assert.Equal(t, "passthrough", res.Header.Get("X-Olla-Mode"))
	assert.Contains(t, body, `"id":"msg_sim`, "the upstream's own answer")
	res, body = messages("native", true)
	assert.Equal(t, "passthrough", res.Header.Get("X-Olla-Mode"))
	assert.Contains(t, body, "event: message_stop")

	res, body = messages("hosted", false)
	assert.Empty(t, res.Header.Get("X-Olla-Mode"), "translated")
	assert.Contains(t, body, `"type":"message"`)
	res, body = messages("oldvllm", false)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Empty(t, res.Header.Get("X-Olla-Mode"), "no /v1/messages upstream: translated after all")
	assert.Contains(t, body, `"type":"message"`)

	pass, tr := counts()
	assert.EqualValues(t, 2, pass-pass0, "passed through")
	assert.EqualValues(t, 2, tr-tr0, "translated, the fallback counted as a translation")
}
