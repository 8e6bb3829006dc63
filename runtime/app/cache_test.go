package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/lib/embed"
	"github.com/infergate/infergate/surface/openai/openaitest"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// cachePost sends a chat completion with key (none when "") and extra headers, and returns the
// status, the X-Infergate-Cache header and the body.
func cachePost(t *testing.T, addr, key, body string, header ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header.Get("X-Infergate-Cache"), string(b)
}

// TestOwnAnswersCarryLength: an answer the gateway makes itself (a stored one, a processor's)
// is sent with its Content-Length, as an upstream's is passed on, not in chunks, even when it is
// too long for net/http to measure by itself (over 2 KB).
func TestOwnAnswersCarryLength(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "m", "granite")
	up.SetReply(strings.Repeat("A long answer, said once and then again. ", 150))
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
models:
  m: {cache: {mode: exact}}
  granite: {processor: granite3.3}
`, up.URL), "granite")
	post := func(model, cache, what string) {
		t.Helper()
		res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","temperature":0,"messages":[{"role":"user","content":"Say it"}]}`))
		require.NoError(t, err)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, string(b))
		require.Greater(t, len(b), 4096)
		assert.Equal(t, cache, res.Header.Get("X-Infergate-Cache"), what)
		assert.Equal(t, int64(len(b)), res.ContentLength, "%s is sent with its length", what)
		assert.Empty(t, res.TransferEncoding, "%s is not chunked", what)
	}
	post("m", "miss", "the upstream's answer")
	post("m", "hit", "a stored answer")
	post("granite", "", "a processed answer")
}

// TestCacheExact: models.<name>.cache in exact mode, through every client a user has. A
// temperature-0 request is answered by the upstream once, then from the cache: over HTTP, the
// OpenAI SDK (whole and streamed: the answer replayed as chunks), OpenAIService over Connect;
// a request that may sample, or opts out with Cache-Control, goes upstream; DELETE
// /admin/cache empties it.
func TestCacheExact(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "m")
	up.SetReply("The capital of France is Paris.")
	addr := startModels(t, fmt.Sprintf("builtin_models: false\nupstreams:\n  - {name: up, url: %s, type: vllm, check_interval: 1h}\nmodels:\n  m: {cache: {mode: exact}}\n", up.URL), "m")
	body := `{"model":"m","temperature":0,"messages":[{"role":"user","content":"What is the capital of France?"}]}`

	status, cache, first := cachePost(t, addr, "", body)
	require.Equal(t, http.StatusOK, status, first)
	assert.Equal(t, "miss", cache)
	status, cache, second := cachePost(t, addr, "", body)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, "hit", cache)
	assert.EqualValues(t, 1, up.Requests(), "the repeat was answered by the gateway")
	var a, b struct {
		ID      string
		Choices []struct{ Message struct{ Content string } }
	}
	require.NoError(t, json.Unmarshal([]byte(first), &a))
	require.NoError(t, json.Unmarshal([]byte(second), &b))
	assert.Equal(t, a.Choices, b.Choices)
	assert.NotEqual(t, a.ID, b.ID, "a hit has an id of its own")

	ctx := context.Background()
	sdk := oai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	params := oai.ChatCompletionNewParams{Model: "m", Temperature: oai.Float(0),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("What is the capital of France?")}}
	got, err := sdk.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	assert.Equal(t, "The capital of France is Paris.", got.Choices[0].Message.Content)
	stream := sdk.Chat.Completions.NewStreaming(ctx, params)
	var text strings.Builder
	chunks := 0
	for stream.Next() {
		chunks++
		for _, ch := range stream.Current().Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "The capital of France is Paris.", text.String())
	assert.Greater(t, chunks, 3, "the hit is replayed in pieces, as a model streams")
	rpc, err := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, "http://"+addr).CreateChatCompletion(ctx,
		&openaiv1.CreateChatCompletionRequest{Model: "m", Temperature: proto.Float64(0),
			Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("What is the capital of France?")}}})
	require.NoError(t, err)
	assert.Equal(t, "The capital of France is Paris.", rpc.GetChoices()[0].GetMessage().GetContent())
	assert.EqualValues(t, 1, up.Requests(), "every client got the stored answer")

	// Sampling, and opting out, go upstream.
	_, cache, _ = cachePost(t, addr, "", `{"model":"m","messages":[{"role":"user","content":"What is the capital of France?"}]}`)
	assert.Equal(t, "bypass; reason=temperature", cache, "no temperature is the model's default: it samples")
	_, cache, _ = cachePost(t, addr, "", body, "Cache-Control", "no-cache")
	assert.Equal(t, "bypass; reason=no-cache", cache)
	assert.EqualValues(t, 3, up.Requests())

	assert.Contains(t, exposition(t, addr), `infergate_respcache_requests_total{model="m",result="hit"} 4`)

	req, err := http.NewRequest(http.MethodDelete, "http://"+addr+"/admin/cache?model=m", nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	flushed, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(flushed))
	assert.JSONEq(t, `{"object":"list","data":[{"model":"m","flushed":1}]}`, string(flushed))
	_, cache, _ = cachePost(t, addr, "", body)
	assert.Equal(t, "miss", cache, "flushed")
}

// TestCacheKeyScope: with API keys, a key never gets another key's cached answer (scope key,
// the default), while scope shared serves every key; /admin/cache needs an admin key; a hit
// charges the key's request budget but no tokens.
func TestCacheKeyScope(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "llama")
	body := `{"model":"llama","temperature":0,"messages":[{"role":"user","content":"hi"}]}`
	for scope, want := range map[string]string{"key": "miss", "shared": "hit"} {
		t.Run(scope, func(t *testing.T) {
			addr := startInProcess(t, secureConfig(t, up.URL, "models:\n  llama: {cache: {scope: "+scope+"}}\n"))
			_, cache, _ := cachePost(t, addr, secUserKey, body)
			require.Equal(t, "miss", cache)
			_, cache, _ = cachePost(t, addr, secUserKey, body)
			require.Equal(t, "hit", cache)
			_, cache, _ = cachePost(t, addr, secControlKey, body)
			assert.Equal(t, want, cache, "another key")
		})
	}
	addr := startInProcess(t, secureConfig(t, up.URL, "models:\n  llama: {cache: {}}\n"))
	for key, want := range map[string]int{secUserKey: http.StatusForbidden, secAdminKey: http.StatusOK} {
		req, err := http.NewRequest(http.MethodDelete, "http://"+addr+"/admin/cache", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		assert.Equal(t, want, res.StatusCode)
	}

	limited := startInProcess(t, secureConfig(t, up.URL, "models:\n  llama: {cache: {}}\nlimits:\n  per_key: {tokens_per_minute: 1000}\n"))
	remaining := func() int {
		req, err := http.NewRequest(http.MethodPost, "http://"+limited+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secUserKey)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		var n int
		_, _ = fmt.Sscan(res.Header.Get("X-RateLimit-Remaining"), &n)
		return n
	}
	remaining() // a miss: charged its usage once it is done
	afterMiss := remaining()
	// Each request's header shows its own estimate spent; a hit's comes back when it is done,
	// so the next one's header shows the same (but for a few tokens refilled meanwhile).
	assert.InDelta(t, afterMiss, remaining(), 20, "hits give their token estimate back")
}

// TestCacheSemantic: mode semantic matches a reworded question in the same conversation
// context, with the built-in lexical embedder, or with an embeddings model the gateway routes
// (several misses at once share one embeddings request); the same question after another
// conversation is not a hit.
func TestCacheSemantic(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "m")
	lex := embed.NewLexical(0)
	var embeds atomic.Int64
	emb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"bge","object":"model"}]}`)
		case "/v1/embeddings":
			embeds.Add(1)
			var req struct{ Input []string }
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			vs, _ := lex.Embed(r.Context(), req.Input)
			type item struct {
				Index     int       `json:"index"`
				Object    string    `json:"object"`
				Embedding []float32 `json:"embedding"`
			}
			out := struct {
				Object string `json:"object"`
				Data   []item `json:"data"`
			}{Object: "list"}
			for i, v := range vs {
				out.Data = append(out.Data, item{i, "embedding", v})
			}
			_ = json.NewEncoder(w).Encode(out)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	t.Cleanup(emb.Close)
	for name, cache := range map[string]string{
		"lexical":    "{mode: semantic, threshold: 0.8}",
		"embeddings": "{mode: semantic, threshold: 0.8, embeddings: bge}",
	} {
		t.Run(name, func(t *testing.T) {
			addr := startModels(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
  - {name: emb, url: %s, type: vllm, kind: embeddings, check_interval: 1h}
models:
  m: {cache: %s}
`, up.URL, emb.URL, cache), "m")
			ask := func(history, q string) string {
				_, c, _ := cachePost(t, addr, "", `{"model":"m","temperature":0,"messages":[`+history+`{"role":"user","content":"`+q+`"}]}`)
				return c
			}
			before := up.Requests()
			require.Equal(t, "miss", ask("", "What is the capital city of France?"))
			// The answer is stored off the request's path, after the client has its last byte:
			// a semantic lookup finds it only once it is there.
			require.Eventually(t, func() bool {
				_, metrics := getWithKey(t, addr, "/metrics", "")
				return strings.Contains(metrics, `infergate_respcache_answers_total{model="m",outcome="stored"} 1`)
			}, 10*time.Second, 10*time.Millisecond, "the first answer was not stored")
			// An embeddings model's similarity alone decides; with the lexical embedder a hit
			// also needs the same words (a word more is another question).
			reworded := "So what is the capital city of France?"
			if name == "lexical" {
				reworded = "what is the capital city of france"
			}
			assert.Regexp(t, `^semantic; similarity=[01]\.\d{3}$`, ask("", reworded))
			assert.Equal(t, "hit", ask("", "What is the capital city of France?"))
			assert.Equal(t, "miss", ask(`{"role":"user","content":"Let us talk about Germany."},{"role":"assistant","content":"Sure."},`,
				"What is the capital city of France?"), "another conversation is another context")
			assert.Equal(t, before+2, up.Requests())
		})
	}
	assert.Positive(t, embeds.Load(), "the embeddings model was asked")
}

// TestCacheSharedRedis: with redis.addr, an answer produced through one replica is a hit on
// the other, and on a replica started afterwards.
func TestCacheSharedRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("three gateways and a redis-server")
	}
	t.Parallel()
	rdb := redistest.Start(t)
	up := openaitest.Start(t, "up", "m")
	cfg := fmt.Sprintf("builtin_models: false\nredis: {addr: %s}\nregistry: {disabled: true}\nupstreams:\n  - {name: up, url: %s, type: vllm, check_interval: 1h}\nmodels:\n  m: {cache: {mode: semantic, threshold: 0.8}}\n", rdb.Addr, up.URL)
	a, b := startModels(t, cfg, "m"), startModels(t, cfg, "m")
	body := `{"model":"m","temperature":0,"messages":[{"role":"user","content":"Is the answer cache shared between replicas?"}]}`
	// A Redis call slower than the cache's 50 ms (a loaded test machine) is a bypass: retried.
	require.Eventually(t, func() bool {
		_, cache, _ := cachePost(t, a, "", body)
		return cache == "miss"
	}, 5*time.Second, 20*time.Millisecond, "a miss, stored in Redis")
	// no-store: b's own misses are not stored, so only a's answer can make a hit.
	require.Eventually(t, func() bool {
		_, cache, _ := cachePost(t, b, "", body, "Cache-Control", "no-store")
		return cache == "hit"
	}, time.Second, 20*time.Millisecond, "the other replica finds the answer within a second")
	c := startModels(t, cfg, "m")
	// The lexical embedder's hit needs the same words: case and punctuation may differ.
	reworded := strings.Replace(body, "Is the answer cache shared between replicas?", "is the answer cache shared between replicas", 1)
	require.Eventually(t, func() bool {
		_, cache, _ := cachePost(t, c, "", reworded, "Cache-Control", "no-store")
		return strings.HasPrefix(cache, "semantic; ")
	}, time.Second, 20*time.Millisecond, "a new replica loads the entries already in Redis into its index")
}

// TestCacheSessionConfigErrors: a cache or session setting that cannot work fails start-up
// naming the key; unknown keys are errors too.
func TestCacheSessionConfigErrors(t *testing.T) {
	for model, want := range map[string]string{
		"{cache: {mode: fuzzy}}":                    `models.m.cache.mode: "fuzzy" is neither exact nor semantic`,
		"{cache: {mode: semantic, threshold: 1.5}}": "models.m.cache.threshold: 1.5 is not a cosine similarity",
		"{cache: {scope: team}}":                    `models.m.cache.scope: "team" is neither key nor shared`,
		"{cache: {sampling: some}}":                 `models.m.cache.sampling: "some" is neither zero nor any`,
		"{cache: {threshold: 0.9}}":                 "models.m.cache: embeddings and threshold are for mode: semantic",
		"{cache: {mode: semantic, embeddings: m}}":  `models.m.cache.embeddings: "m" is the cached model itself`,
		"{cache: {ttl: -1s}}":                       "models.m.cache: ttl, max_entries and max_bytes cannot be negative",
		"{cache: {max_entires: 5}}":                 "max_entires",
		"{session: {context_window: -5}}":           "models.m.session: context_window, ttl and max_bytes cannot be negative",
		"{session: {window: 4096}}":                 "window",
	} {
		_, err := ParseConfig("test", []byte("models:\n  m: "+model+"\n"))
		require.Error(t, err, model)
		assert.Contains(t, err.Error(), want, model)
	}
	_, err := ParseConfig("test", []byte("models:\n  m: {cache: {mode: semantic, threshold: 0.9, embeddings: bge, scope: shared, sampling: any}, session: {context_window: 4096, ttl: 2h}}\n"))
	require.NoError(t, err)
}
