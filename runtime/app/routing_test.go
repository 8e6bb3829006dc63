package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/internal/vllmsim"
	"github.com/infergate/infergate/surface/openai/openaitest"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// TestRoutingPolicies: models.<name>.routing. With cache_aware every turn of a conversation (its
// messages growing) reaches the endpoint that served its first turn, with or without a
// tokenizer, while conversations spread over the endpoints; round_robin takes turns whatever
// the load.
func TestRoutingPolicies(t *testing.T) {
	t.Parallel()
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

// TestRoutingSharedIndex: with redis.addr, cache_aware replicas share their index: a
// conversation whose turns alternate between two gateways stays on one endpoint, and a
// conversation started on one gateway is continued where it is by the other.
func TestRoutingSharedIndex(t *testing.T) {
	if testing.Short() {
		t.Skip("two gateways and a redis-server")
	}
	t.Parallel()
	rdb := redistest.Start(t)
	ups := []*openaitest.Upstream{openaitest.Start(t, "a", "m"), openaitest.Start(t, "b", "m"), openaitest.Start(t, "c", "m")}
	cfg := "builtin_models: false\nredis: {addr: " + rdb.Addr + "}\nregistry: {disabled: true}\nupstreams:\n"
	for _, u := range ups {
		cfg += fmt.Sprintf("  - {name: %s, url: %s, type: vllm, check_interval: 1h}\n", u.Name, u.URL)
	}
	cfg += "models:\n  m: {routing: cache_aware}\n"
	gws := []string{startModels(t, cfg, "m"), startModels(t, cfg, "m")}
	post := func(addr, body string) string {
		t.Helper()
		res, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		return res.Header.Get("X-Infergate-Endpoint")
	}
	// The replicas' rotations start out of step, so that without the shared index a cold
	// prompt would go elsewhere on each.
	post(gws[1], `{"model":"m","messages":[{"role":"user","content":"warm-up"}]}`)
	applied := map[string]int{gws[0]: 0, gws[1]: 0} // the other replica's picks each has learned
	used := map[string]bool{}
	for conv := range 6 {
		msgs := fmt.Sprintf(`{"role":"system","content":"%s"}`, strings.Repeat(fmt.Sprintf("You are assistant number %d. ", conv), 20))
		first := ""
		for turn := range 4 {
			msgs += fmt.Sprintf(`,{"role":"user","content":"Question %d of conversation %d?"}`, turn, conv)
			gw := gws[(conv+turn)%2]
			if turn == 0 {
				first = post(gw, `{"model":"m","messages":[`+msgs+`]}`)
				used[first] = true
			} else {
				// The other replica learns the last turn's pick within a flush and a round trip.
				applied := fmt.Sprintf(`infergate_kvroute_shared_records_total{model="m",outcome="applied"} %d`, applied[gw])
				require.Eventually(t, func() bool { return strings.Contains(exposition(t, gw), applied) }, 5*time.Second, 5*time.Millisecond,
					"%s: the other replica's pick is learned", gw)
				assert.Equal(t, first, post(gw, `{"model":"m","messages":[`+msgs+`]}`), "conversation %d, turn %d, through the other gateway, stays where its prefix is", conv, turn)
			}
			applied[gws[(conv+turn+1)%2]]++
			msgs += `,{"role":"assistant","content":"An answer."}`
		}
	}
	assert.GreaterOrEqual(t, len(used), 2, "new conversations go by load: %v", used)
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
		_, err := ParseConfig("test", []byte(ups+"models:\n  m: "+model+"\n"))
		require.Error(t, err, model)
		assert.Contains(t, err.Error(), want, model)
	}
	_, err := ParseConfig("test", []byte(ups+"models:\n  m: {disaggregation: {prefill: [p1], decode: [d1], min_prompt_tokens: 512}}\n"))
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

// TestDisaggregation: a model with prefill and decode pools is served in two legs with vLLM's
// protocol, from the OpenAI SDK (whole and streamed), OpenAIService over Connect and the KServe
// bridge: every decode pulled its KV from a prefill engine (none recomputed the prompt, none got
// params or headers from a client), and a prompt under min_prompt_tokens is prefilled by the
// decode engine itself.
func TestDisaggregation(t *testing.T) {
	fabric := vllmsim.NewFabric()
	p1 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RolePrefill, Fabric: fabric})
	p2 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RolePrefill, Fabric: fabric})
	d1 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RoleDecode, Fabric: fabric})
	addr := startModels(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: p1, url: %s, type: vllm, check_interval: 1h}
  - {name: p2, url: %s, type: vllm, check_interval: 1h}
  - {name: d1, url: %s, type: vllm, check_interval: 1h}
models:
  m:
    routing: cache_aware
    disaggregation: {prefill: [p1, p2], decode: [d1], min_prompt_tokens: 64}
`, p1.URL, p2.URL, d1.URL), "m")
	ctx := context.Background()
	long := strings.Repeat("A long prompt that is worth prefilling elsewhere. ", 20)
	sdk := oai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	got, err := sdk.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "m", MaxTokens: oai.Int(5),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(long)}})
	require.NoError(t, err)
	assert.Equal(t, int64(5), got.Usage.CompletionTokens, "the decode engine's answer")

	stream := sdk.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{Model: "m", MaxTokens: oai.Int(3),
		Messages:      []oai.ChatCompletionMessageParamUnion{oai.UserMessage(long + "Streamed.")},
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}})
	chunks := 0
	for stream.Next() {
		chunks++
	}
	require.NoError(t, stream.Err())
	assert.Greater(t, chunks, 3)

	_, err = openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, "http://"+addr).CreateChatCompletion(ctx,
		&openaiv1.CreateChatCompletionRequest{Model: "m", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String(long + "Connect.")}}})
	require.NoError(t, err)
	res, err := http.Post("http://"+addr+"/v2/models/m/generate", "application/json",
		strings.NewReader(`{"text_input":"`+long+`Bridge.","parameters":{"max_tokens":2}}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))

	// A client's own transfer params never reach an engine.
	res, err = http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(
		`{"model":"m","max_tokens":2,"prompt":"`+long+`","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"x","remote_request_id":"y","remote_host":"10.6.6.6","remote_port":1,"remote_block_ids":[[1]]}}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	// A Batch API line takes the same two legs.
	done := completedBatch(t, addr, `{"custom_id":"pd","method":"POST","url":"/v1/chat/completions","body":{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"`+long+`Batch."}]}}`)
	assert.Equal(t, 1, fileLines(t, addr, done.OutputFileID, map[string]int{}), "the line succeeded")

	prefills := p1.Stats().Requests + p2.Stats().Requests
	d := d1.Stats()
	assert.EqualValues(t, 6, prefills, "each request prefilled once")
	assert.EqualValues(t, 6, d.TransfersPulled, "each decode pulled its KV")
	assert.Zero(t, d.Recomputed, "no decode recomputed its prompt (params passed through untouched)")
	assert.Zero(t, d.LocalPrefills)
	for _, s := range []*vllmsim.Server{p1, p2, d1} {
		assert.Zero(t, s.Stats().ForeignParams, "no engine saw a client's params or routing headers")
	}

	_, err = sdk.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "m", MaxTokens: oai.Int(2),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("short")}})
	require.NoError(t, err)
	assert.EqualValues(t, 1, d1.Stats().LocalPrefills, "a short prompt is prefilled by the decode engine")
	assert.EqualValues(t, prefills, p1.Stats().Requests+p2.Stats().Requests)
}

// exposition is the gateway's Prometheus exposition.
func exposition(t *testing.T, addr string) string {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return string(b)
}
