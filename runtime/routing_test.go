package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/adapters/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRoutingPolicies: models.<name>.routing. With cache_aware every turn of a conversation (its
// messages growing) reaches the endpoint that served its first turn, with or without a
// tokenizer, while conversations spread over the endpoints; round_robin takes turns whatever
// the load.
func TestRoutingPolicies(t *testing.T) {
	ups := []*openaitest.Upstream{openaitest.Start(t, "a", "m"), openaitest.Start(t, "b", "m"), openaitest.Start(t, "c", "m")}
	upstreams := ""
	for _, u := range ups {
		upstreams += fmt.Sprintf("  - {name: %s, url: %s, type: vllm, check_interval: 1h}\n", u.Name, u.URL)
	}
	post := func(addr, body string) string {
		t.Helper()
		res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		return res.Header.Get("X-Infergate-Endpoint")
	}
	for name, model := range map[string]string{
		"cache_aware tokens": "{routing: cache_aware, tokenizer: " + qwenTokenizer(t) + "}",
		"cache_aware text":   "{routing: cache_aware}",
	} {
		t.Run(name, func(t *testing.T) {
			addr := startModels(t, "builtin_models: false\nupstreams:\n"+upstreams+"models:\n  m: "+model+"\n", "m")
			used := map[string]bool{}
			for conv := range 6 {
				msgs := fmt.Sprintf(`{"role":"system","content":"%s"}`, strings.Repeat(fmt.Sprintf("You are assistant number %d. ", conv), 20))
				first := ""
				for turn := range 4 {
					msgs += fmt.Sprintf(`,{"role":"user","content":"Question %d of conversation %d?"}`, turn, conv)
					ep := post(addr, `{"model":"m","messages":[`+msgs+`]}`)
					if turn == 0 {
						first = ep
						used[ep] = true
					}
					assert.Equal(t, first, ep, "conversation %d, turn %d stays where its prefix is", conv, turn)
					msgs += `,{"role":"assistant","content":"An answer."}`
				}
			}
			assert.GreaterOrEqual(t, len(used), 2, "new conversations go by load: %v", used)
		})
	}
	t.Run("round_robin", func(t *testing.T) {
		addr := startModels(t, "builtin_models: false\nupstreams:\n"+upstreams+"models:\n  m: {routing: round_robin}\n", "m")
		seen := map[string]int{}
		for range 9 {
			seen[post(addr, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)]++
		}
		assert.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3}, seen)
	})
}

// TestDisaggregationConfigErrors: a disaggregation that cannot work fails start-up naming the key.
func TestDisaggregationConfigErrors(t *testing.T) {
	ups := `upstreams:
  - {name: p1, url: "http://127.0.0.1:1", type: vllm}
  - {name: d1, url: "http://127.0.0.1:2", type: vllm}
  - {name: e1, url: "http://127.0.0.1:3", type: vllm, kind: embeddings}
  - {name: t1, url: "http://127.0.0.1:4", type: kserve}
`
	for model, want := range map[string]string{
		"{disaggregation: {prefill: [], decode: [d1]}}":                              "models.m.disaggregation.prefill: the pool is empty",
		"{disaggregation: {prefill: [p1], decode: [nope]}}":                          `models.m.disaggregation.decode: "nope" is not one of the upstreams`,
		"{disaggregation: {prefill: [p1], decode: [p1]}}":                            `models.m.disaggregation: "p1" is in both the prefill and the decode pool`,
		"{disaggregation: {prefill: [e1], decode: [d1]}}":                            `"e1" serves embeddings`,
		"{disaggregation: {prefill: [t1], decode: [d1]}}":                            `"t1" is a kserve upstream`,
		"{disaggregation: {prefill: [p1], decode: [d1], on_prefill_failure: retry}}": `on_prefill_failure: "retry" is neither fallback nor fail`,
		"{disaggregation: {prefill: [p1], decode: [d1], min_prompt_tokens: -1}}":     "min_prompt_tokens and max_prefill_queue cannot be negative",
		"{disaggregation: {prefill: [p1], decode: [d1], max_prefil_queue: 3}}":       "max_prefil_queue",
	} {
		_, err := parseConfig("test", []byte(ups+"models:\n  m: "+model+"\n"))
		require.Error(t, err, model)
		assert.Contains(t, err.Error(), want, model)
	}
	_, err := parseConfig("test", []byte(ups+"models:\n  m: {disaggregation: {prefill: [p1], decode: [d1], min_prompt_tokens: 512}}\n"))
	require.NoError(t, err)
}

// TestClientKVParamsDropped: a client's kv_transfer_params (which would tell a vLLM engine with a
// KV connector where to pull blocks from) and the routing headers of disaggregating proxies never
// reach an upstream, for any model; the rest of the body does.
func TestClientKVParamsDropped(t *testing.T) {
	up := openaitest.Start(t, "up", "m")
	addr := startModels(t, fmt.Sprintf("builtin_models: false\nupstreams:\n  - {name: up, url: %s, type: vllm, check_interval: 1h}\n", up.URL), "m")
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.6.6.6","remote_port":5600,"remote_engine_id":"evil","remote_block_ids":[1]},"user":"u1"}`))
	require.NoError(t, err)
	req.Header.Set("X-Prefiller-Host-Port", "10.6.6.6:8000")
	req.Header.Set("X-Data-Parallel-Rank", "3")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.NotContains(t, string(up.LastBody()), "kv_transfer_params")
	assert.NotContains(t, string(up.LastBody()), "10.6.6.6")
	assert.Contains(t, string(up.LastBody()), `"user":"u1"`)
	assert.Empty(t, up.LastHeader().Get("X-Prefiller-Host-Port"))
	assert.Empty(t, up.LastHeader().Get("X-Data-Parallel-Rank"))
}
