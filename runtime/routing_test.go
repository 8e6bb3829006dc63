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
