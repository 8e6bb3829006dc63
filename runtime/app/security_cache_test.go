package app

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSecuritySemanticCacheNoWrongHits (issue 35): the semantic cache with the built-in lexical
// embedder and its default threshold never answers a different question. A long prompt whose
// question changes one word scored 0.98-0.99 and got the first prompt's answer; it must go to
// the model, while the same prompt in other case and punctuation is still answered from the
// cache.
func TestSecuritySemanticCacheNoWrongHits(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "m")
	addr := startModels(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
models:
  m: {cache: {mode: semantic}}
`, up.URL), "m")
	ask := func(q string) (cache, answer string) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"model": "m", "temperature": 0,
			"messages": []map[string]string{{"role": "user", "content": q}}})
		require.NoError(t, err)
		status, cache, res := cachePost(t, addr, "", string(body))
		require.Equal(t, http.StatusOK, status, res)
		var a struct {
			Choices []struct{ Message struct{ Content string } }
		}
		require.NoError(t, json.Unmarshal([]byte(res), &a), res)
		require.Len(t, a.Choices, 1, res)
		return cache, a.Choices[0].Message.Content
	}
	const long = `Here is our quarterly summary for the board. The northern region grew steadily thanks to
new retail partners, while the southern region lost two large accounts and is recovering slowly.
The eastern region stayed flat, and the western region doubled its online sales after the spring
campaign. Marketing spent most of its budget on social media. Which region had the highest revenue
this quarter, and why?`

	up.SetReply("The western region.")
	cache, _ := ask(long)
	require.Equal(t, "miss", cache)
	// The answer is stored off the request's path: the same request is a hit once it is.
	require.Eventually(t, func() bool { c, _ := ask(long); return c == "hit" }, 5*time.Second, 5*time.Millisecond)
	asked := up.Requests()

	for _, other := range []string{
		strings.Replace(long, "highest", "lowest", 1),
		strings.Replace(long, "Which region had", "Which region had not", 1),
		strings.Replace(long, "northern region grew", "northern region shrank", 1),
	} {
		up.SetReply("Another answer.")
		cache, answer := ask(other)
		assert.Equal(t, "miss", cache, "a different question: %s", other)
		assert.Equal(t, "Another answer.", answer, "the model's answer, not the stored one")
	}
	assert.Equal(t, asked+3, up.Requests(), "every different question went to the model")

	up.SetReply("Not asked.")
	asked = up.Requests()
	for _, same := range []string{
		strings.ToLower(long),
		strings.NewReplacer(",", "", ".", "", "?", " ?", "\n", "  ").Replace(long),
		strings.ToUpper(long) + "!!",
	} {
		cache, answer := ask(same)
		assert.True(t, strings.HasPrefix(cache, "semantic; similarity="), "the same words: %s: %s", cache, same)
		assert.Equal(t, "The western region.", answer)
	}
	assert.Equal(t, asked, up.Requests(), "the same question was answered from the cache")
}
