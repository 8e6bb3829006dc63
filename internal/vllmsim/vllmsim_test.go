package vllmsim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/vllmsim"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sdk(s *vllmsim.Server) *oai.Client {
	c := oai.NewClient(option.WithBaseURL(s.URL+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
	return &c
}

func post(t *testing.T, s *vllmsim.Server, path, body string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, b
}

// ids is the token ids [from, to).
func ids(from, to int) []int64 {
	out := make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, int64(i))
	}
	return out
}

func complete(t *testing.T, s *vllmsim.Server, prompt []int64) *oai.Completion {
	t.Helper()
	out, err := sdk(s).Completions.New(context.Background(), oai.CompletionNewParams{
		Model:     "sim",
		Prompt:    oai.CompletionNewParamsPromptUnion{OfArrayOfTokens: prompt},
		MaxTokens: oai.Int(2),
	})
	require.NoError(t, err)
	return out
}

func cachedTokens(c *oai.Completion) int64 { return c.Usage.PromptTokensDetails.CachedTokens }

// metric is the value of name{model_name="sim"} in s's /metrics.
func metric(t *testing.T, s *vllmsim.Server, name string) int {
	t.Helper()
	res, err := http.Get(s.URL + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+`{model_name="sim"} `); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /metrics:\n%s", name, b)
	return 0
}

func TestPrefixHits(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{})
	first := complete(t, s, ids(0, 40))
	assert.Zero(t, cachedTokens(first))
	assert.False(t, first.Usage.JSON.PromptTokensDetails.Valid(), "omitted when 0, as vLLM does")
	assert.EqualValues(t, 40, first.Usage.PromptTokens)
	assert.EqualValues(t, 2, first.Usage.CompletionTokens)
	assert.EqualValues(t, 42, first.Usage.TotalTokens)

	// Shares 2 full blocks (32 tokens) with the first, then differs.
	second := complete(t, s, append(ids(0, 35), 999, 998))
	assert.EqualValues(t, 32, cachedTokens(second))

	// The whole first prompt again: its 2 full blocks; the partial third was never cached.
	assert.EqualValues(t, 32, cachedTokens(complete(t, s, ids(0, 40))))
	// A block-aligned prompt hits all but its last block: the last token is always computed.
	assert.EqualValues(t, 16, cachedTokens(complete(t, s, ids(0, 32))))

	st := s.Stats()
	assert.EqualValues(t, 4, st.Requests)
	assert.EqualValues(t, 40+37+40+32, st.PromptTokens)
	assert.EqualValues(t, 32+32+16, st.CachedTokens)
	assert.InDelta(t, 80.0/149, st.HitRate(), 1e-9)
	assert.Equal(t, 149, metric(t, s, "vllm:prefix_cache_queries_total"))
	assert.Equal(t, 80, metric(t, s, "vllm:prefix_cache_hits_total"))

	s.Reset()
	assert.Equal(t, vllmsim.Stats{}, s.Stats())
	assert.Equal(t, 149, metric(t, s, "vllm:prefix_cache_queries_total"), "counters are monotonic")
	assert.EqualValues(t, 32, cachedTokens(complete(t, s, ids(0, 40))), "Reset keeps the cache")
}

func TestTextPrefixHits(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{BlockSize: 4})
	c := sdk(s)
	system := oai.SystemMessage(strings.Repeat("You are a helpful assistant. ", 8))
	ask := func(q string) *oai.ChatCompletion {
		out, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{
			Model:    "sim",
			Messages: []oai.ChatCompletionMessageParamUnion{system, oai.UserMessage(q)},
		})
		require.NoError(t, err)
		return out
	}
	first := ask("What is the capital of France?")
	assert.Zero(t, first.Usage.PromptTokensDetails.CachedTokens)
	second := ask("Who wrote Hamlet?")
	// Rendered, the two share "system: <the system prompt>\nuser: W": whole pseudo-tokens of 4
	// bytes, then whole blocks of 4 tokens.
	shared := len("system: ") + len(system.OfSystem.Content.OfString.Value) + len("\nuser: W")
	assert.EqualValues(t, shared/4/4*4, second.Usage.PromptTokensDetails.CachedTokens)
	assert.Equal(t, strings.Repeat(" tok", 16), second.Choices[0].Message.Content, "max_tokens defaults to 16")

	text, err := c.Completions.New(context.Background(), oai.CompletionNewParams{
		Model:  "sim",
		Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String(strings.Repeat("abcd", 9))},
	})
	require.NoError(t, err)
	assert.EqualValues(t, 9, text.Usage.PromptTokens, "one token per 4 bytes")
	text, err = c.Completions.New(context.Background(), oai.CompletionNewParams{
		Model:  "sim",
		Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String(strings.Repeat("abcd", 9) + "xy")},
	})
	require.NoError(t, err)
	assert.EqualValues(t, 10, text.Usage.PromptTokens, "the last token is shorter")
	assert.EqualValues(t, 8, text.Usage.PromptTokensDetails.CachedTokens)
}

func TestLRUEviction(t *testing.T) {
	a, b, c := ids(0, 17), ids(100, 117), ids(200, 217) // 4 full blocks each
	t.Run("a sequence's tail goes first", func(t *testing.T) {
		s := vllmsim.Start(t, vllmsim.Config{BlockSize: 4, CapacityBlocks: 6})
		complete(t, s, a)
		complete(t, s, b) // 8 blocks for 6 places: a's last two go
		assert.EqualValues(t, 8, cachedTokens(complete(t, s, a)), "a's first two blocks stay")
	})
	t.Run("the least recently used goes", func(t *testing.T) {
		s := vllmsim.Start(t, vllmsim.Config{BlockSize: 4, CapacityBlocks: 8})
		complete(t, s, a)
		complete(t, s, b)
		assert.EqualValues(t, 16, cachedTokens(complete(t, s, a)), "a touched: b is now the oldest")
		complete(t, s, c)
		assert.EqualValues(t, 16, cachedTokens(complete(t, s, a)))
		assert.Zero(t, cachedTokens(complete(t, s, b)), "b evicted")
	})
	t.Run("a prompt over capacity keeps its head", func(t *testing.T) {
		s := vllmsim.Start(t, vllmsim.Config{BlockSize: 4, CapacityBlocks: 3})
		complete(t, s, a)
		assert.EqualValues(t, 12, cachedTokens(complete(t, s, a)))
	})
}

func TestQueueing(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{MaxConcurrent: 1, DecodePerToken: 100 * time.Millisecond})
	var wg sync.WaitGroup
	start := time.Now()
	for i := range 3 {
		wg.Go(func() { // 2 tokens: 200ms each
			_, err := sdk(s).Completions.New(context.Background(), oai.CompletionNewParams{
				Prompt: oai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids(i*100, i*100+10)}, MaxTokens: oai.Int(2),
			})
			assert.NoError(t, err)
		})
	}
	require.Eventually(t, func() bool {
		return metric(t, s, "vllm:num_requests_waiting") == 2
	}, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 1, metric(t, s, "vllm:num_requests_running"))
	wg.Wait()
	assert.GreaterOrEqual(t, time.Since(start), 600*time.Millisecond, "one at a time")
	assert.EqualValues(t, 2, s.Stats().MaxWaiting)
	assert.Equal(t, 0, metric(t, s, "vllm:num_requests_waiting"))
	assert.Equal(t, 0, metric(t, s, "vllm:num_requests_running"))
}

func TestQueuedClientGone(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{MaxConcurrent: 1, DecodePerToken: 100 * time.Millisecond})
	done := make(chan error)
	go func() {
		_, err := sdk(s).Completions.New(context.Background(), oai.CompletionNewParams{
			Prompt: oai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids(0, 10)}, MaxTokens: oai.Int(2),
		})
		done <- err
	}()
	require.Eventually(t, func() bool { return metric(t, s, "vllm:num_requests_running") == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := sdk(s).Completions.New(ctx, oai.CompletionNewParams{Model: "sim", Prompt: oai.CompletionNewParamsPromptUnion{OfString: oai.String("x")}})
		gone <- err
	}()
	require.Eventually(t, func() bool { return metric(t, s, "vllm:num_requests_waiting") == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.Error(t, <-gone)
	require.Eventually(t, func() bool { return metric(t, s, "vllm:num_requests_waiting") == 0 }, 5*time.Second, time.Millisecond)
	require.NoError(t, <-done)
	assert.EqualValues(t, 10, s.Stats().PromptTokens, "the request that left was never run")
}

func TestSDK(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{Model: "llama"})
	c := sdk(s)
	ctx := context.Background()

	page, err := c.Models.List(ctx)
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	assert.Equal(t, "llama", page.Data[0].ID)

	t.Run("completion", func(t *testing.T) {
		out, err := c.Completions.New(ctx, oai.CompletionNewParams{
			Model: "llama", Prompt: oai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids(0, 20)}, MaxTokens: oai.Int(3),
		})
		require.NoError(t, err)
		assert.Equal(t, " tok tok tok", out.Choices[0].Text)
		assert.Equal(t, oai.CompletionChoiceFinishReasonLength, out.Choices[0].FinishReason)
		assert.Equal(t, "llama", out.Model)
		assert.True(t, strings.HasPrefix(out.ID, "cmpl-"), out.ID)
	})
	t.Run("streamed completion", func(t *testing.T) {
		st := c.Completions.NewStreaming(ctx, oai.CompletionNewParams{
			Model: "llama", Prompt: oai.CompletionNewParamsPromptUnion{OfArrayOfTokens: ids(0, 20)}, MaxTokens: oai.Int(4),
			StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		})
		var text strings.Builder
		var chunks int
		var usage oai.CompletionUsage
		for st.Next() {
			ch := st.Current()
			if len(ch.Choices) > 0 {
				chunks++
				text.WriteString(ch.Choices[0].Text)
			}
			if ch.JSON.Usage.Valid() {
				usage = ch.Usage
			}
		}
		require.NoError(t, st.Err())
		assert.Equal(t, 4, chunks, "a chunk per token")
		assert.Equal(t, " tok tok tok tok", text.String())
		assert.EqualValues(t, 20, usage.PromptTokens)
		assert.EqualValues(t, 4, usage.CompletionTokens)
		assert.EqualValues(t, 16, usage.PromptTokensDetails.CachedTokens, "the first block, cached by the whole completion")
	})
	t.Run("chat", func(t *testing.T) {
		out, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
			Model: "llama", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}, MaxCompletionTokens: oai.Int(2),
		})
		require.NoError(t, err)
		assert.Equal(t, " tok tok", out.Choices[0].Message.Content)
		assert.Equal(t, "assistant", string(out.Choices[0].Message.Role))
		assert.Equal(t, "length", out.Choices[0].FinishReason)
		assert.True(t, strings.HasPrefix(out.ID, "chatcmpl-"), out.ID)
	})
	t.Run("streamed chat", func(t *testing.T) {
		st := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
			Model: "llama", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}, MaxTokens: oai.Int(3),
			StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
		})
		var acc oai.ChatCompletionAccumulator
		for st.Next() {
			require.True(t, acc.AddChunk(st.Current()))
		}
		require.NoError(t, st.Err())
		require.Len(t, acc.Choices, 1)
		assert.Equal(t, " tok tok tok", acc.Choices[0].Message.Content)
		assert.Equal(t, "length", acc.Choices[0].FinishReason)
		assert.EqualValues(t, 3, acc.Usage.CompletionTokens)
	})
	t.Run("stream without usage", func(t *testing.T) {
		st := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{
			Model: "llama", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}, MaxTokens: oai.Int(2),
		})
		for st.Next() {
			assert.False(t, st.Current().JSON.Usage.Valid())
		}
		require.NoError(t, st.Err())
	})
}

func TestErrors(t *testing.T) {
	s := vllmsim.Start(t, vllmsim.Config{})
	for name, tc := range map[string]struct {
		path, body string
		status     int
		param      any
	}{
		"unknown model":             {"/v1/completions", `{"model":"gpt","prompt":"x"}`, 404, "model"},
		"not JSON":                  {"/v1/completions", `{`, 400, nil},
		"no prompt":                 {"/v1/completions", `{"model":"sim"}`, 400, "prompt"},
		"batched prompt":            {"/v1/completions", `{"prompt":["a","b"]}`, 400, "prompt"},
		"negative id":               {"/v1/completions", `{"prompt":[1,-2]}`, 400, "prompt"},
		"no messages":               {"/v1/chat/completions", `{"messages":[]}`, 400, "messages"},
		"max_tokens 0":              {"/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, nil},
		"stream_options, no stream": {"/v1/completions", `{"prompt":"x","stream_options":{"include_usage":true}}`, 400, nil},
	} {
		t.Run(name, func(t *testing.T) {
			status, body := post(t, s, tc.path, tc.body)
			assert.Equal(t, tc.status, status)
			var e struct {
				Error map[string]any `json:"error"`
			}
			require.NoError(t, json.Unmarshal(body, &e), "%s", body)
			assert.Equal(t, float64(tc.status), e.Error["code"])
			assert.Equal(t, tc.param, e.Error["param"])
			assert.NotEmpty(t, e.Error["message"])
			assert.Contains(t, []any{"BadRequestError", "NotFoundError"}, e.Error["type"])
		})
	}
	res, err := http.Get(s.URL + "/health")
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, http.StatusOK, res.StatusCode)
}

// pd is a prefill and a decode server on one fabric, with prefill costly enough that a decode
// that recomputes would show.
type pd struct {
	fabric *vllmsim.Fabric
	p, d   *vllmsim.Server
	prompt []int64
	leg1   string
}

func startPD(t *testing.T, prefillTTL time.Duration) *pd {
	f := vllmsim.NewFabric()
	x := &pd{
		fabric: f,
		p:      vllmsim.Start(t, vllmsim.Config{Role: vllmsim.RolePrefill, Fabric: f, TransferTTL: prefillTTL}),
		d:      vllmsim.Start(t, vllmsim.Config{Role: vllmsim.RoleDecode, Fabric: f}),
		prompt: ids(0, 40),
	}
	prompt, _ := json.Marshal(x.prompt)
	// Leg 1 as vLLM's toy proxy sends it.
	x.leg1 = `{"model":"sim","prompt":` + string(prompt) + `,"max_tokens":1,"stream":false,` +
		`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`
	return x
}

// prefill runs leg 1 and returns the prefill answer's kv_transfer_params.
func (x *pd) prefill(t *testing.T) map[string]any {
	t.Helper()
	status, body := post(t, x.p, "/v1/completions", x.leg1, "X-Request-Id", "req-1")
	require.Equal(t, http.StatusOK, status, "%s", body)
	var answer struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage  map[string]any  `json:"usage"`
		Params json.RawMessage `json:"kv_transfer_params"`
	}
	require.NoError(t, json.Unmarshal(body, &answer))
	assert.Equal(t, " tok", answer.Choices[0].Text)
	assert.Equal(t, float64(1), answer.Usage["completion_tokens"])
	var params map[string]any
	require.NoError(t, json.Unmarshal(answer.Params, &params))
	return params
}

// decode runs leg 2 (the client's request plus params) as a stream, and returns its text, or
// the error.
func (x *pd) decode(t *testing.T, params any) (string, error) {
	t.Helper()
	opts := []option.RequestOption{}
	if params != nil {
		opts = append(opts, option.WithJSONSet("kv_transfer_params", params))
	}
	st := sdk(x.d).Completions.NewStreaming(context.Background(), oai.CompletionNewParams{
		Model: "sim", Prompt: oai.CompletionNewParamsPromptUnion{OfArrayOfTokens: x.prompt}, MaxTokens: oai.Int(5),
	}, opts...)
	var text strings.Builder
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Text)
		}
	}
	return text.String(), st.Err()
}

func TestPDHandshake(t *testing.T) {
	x := startPD(t, 0)
	params := x.prefill(t)
	u, err := url.Parse(x.p.URL)
	require.NoError(t, err)
	assert.Equal(t, true, params["do_remote_prefill"])
	assert.Equal(t, false, params["do_remote_decode"])
	assert.Equal(t, x.p.EngineID(), params["remote_engine_id"])
	assert.Equal(t, u.Hostname(), params["remote_host"])
	assert.Equal(t, u.Port(), strconv.Itoa(int(params["remote_port"].(float64))))
	assert.Equal(t, float64(1), params["tp_size"])
	assert.NotEmpty(t, params["remote_request_id"])
	assert.NotEqual(t, "req-1", params["remote_request_id"], "the engine's own id for the request")
	require.IsType(t, []any{}, params["remote_block_ids"])
	groups := params["remote_block_ids"].([]any)
	require.Len(t, groups, 1, "one KV-cache group")
	assert.Len(t, groups[0], 3, "40 tokens: 2 full blocks and a partial one")
	assert.Equal(t, 1, x.fabric.Held())

	text, err := x.decode(t, params)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat(" tok", 5), text)
	st := x.d.Stats()
	assert.EqualValues(t, 1, st.TransfersPulled)
	assert.Zero(t, st.Recomputed)
	assert.Zero(t, st.LocalPrefills)
	assert.Zero(t, st.ForeignParams)
	assert.Zero(t, x.p.Stats().ForeignParams)
	assert.Zero(t, x.fabric.Held(), "pulled: the prefill engine may free it")

	// The pulled blocks are now the decode engine's: the same prompt, prefilled locally, hits.
	_, err = x.decode(t, nil)
	require.NoError(t, err)
	st = x.d.Stats()
	assert.EqualValues(t, 1, st.LocalPrefills)
	assert.EqualValues(t, 32, st.CachedTokens)

	// A transfer is pulled once.
	_, err = x.decode(t, params)
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
	assert.Contains(t, apiErr.Message, "holds no KV transfer")
}

func TestPDDecodeSkipsPrefill(t *testing.T) {
	f := vllmsim.NewFabric()
	slow := vllmsim.Config{Fabric: f, PrefillPerToken: 5 * time.Millisecond, DecodePerToken: -1}
	slow.Role = vllmsim.RolePrefill
	p := vllmsim.Start(t, slow)
	slow.Role = vllmsim.RoleDecode
	d := vllmsim.Start(t, slow)
	x := &pd{fabric: f, p: p, d: d, prompt: ids(0, 100)}
	prompt, _ := json.Marshal(x.prompt)
	x.leg1 = `{"prompt":` + string(prompt) + `,"max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`
	start := time.Now()
	params := x.prefill(t)
	prefill := time.Since(start)
	assert.GreaterOrEqual(t, prefill, 500*time.Millisecond, "100 tokens at 5ms")
	start = time.Now()
	_, err := x.decode(t, params)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), prefill/2, "the decode engine pulled the KV instead of prefilling")
}

func TestPDInvalidParamsRecompute(t *testing.T) {
	for _, strip := range []string{"remote_block_ids", "remote_engine_id", "remote_request_id", "remote_host", "remote_port"} {
		t.Run(strip, func(t *testing.T) {
			x := startPD(t, 0)
			params := x.prefill(t)
			delete(params, strip)
			text, err := x.decode(t, params)
			require.NoError(t, err, "vLLM computes the prompt itself")
			assert.Equal(t, strings.Repeat(" tok", 5), text)
			st := x.d.Stats()
			assert.EqualValues(t, 1, st.Recomputed)
			assert.Zero(t, st.TransfersPulled)
			assert.Zero(t, st.ForeignParams, "a gateway's mistake, not a client's params")
			assert.Equal(t, 1, x.fabric.Held(), "the prefill engine holds the KV until it expires")
		})
	}
	t.Run("empty block ids", func(t *testing.T) {
		x := startPD(t, 0)
		params := x.prefill(t)
		params["remote_block_ids"] = []any{[]any{}}
		_, err := x.decode(t, params)
		require.NoError(t, err)
		assert.EqualValues(t, 1, x.d.Stats().Recomputed)
	})
	t.Run("flat block ids of older releases", func(t *testing.T) {
		x := startPD(t, 0)
		params := x.prefill(t)
		params["remote_block_ids"] = params["remote_block_ids"].([]any)[0]
		_, err := x.decode(t, params)
		require.NoError(t, err)
		assert.EqualValues(t, 1, x.d.Stats().TransfersPulled)
	})
}

func TestPDRefusals(t *testing.T) {
	refused := func(t *testing.T, x *pd, params any, want string) {
		t.Helper()
		_, err := x.decode(t, params)
		var apiErr *oai.Error
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusBadRequest, apiErr.StatusCode)
		assert.Contains(t, apiErr.Message, want)
		assert.Zero(t, x.d.Stats().TransfersPulled)
	}
	t.Run("unknown request", func(t *testing.T) {
		x := startPD(t, 0)
		params := x.prefill(t)
		params["remote_request_id"] = "cmpl-made-up"
		refused(t, x, params, "holds no KV transfer")
		assert.Zero(t, x.d.Stats().ForeignParams, "the engine is real: an expired transfer looks the same")
	})
	t.Run("unknown engine", func(t *testing.T) {
		x := startPD(t, 0)
		params := x.prefill(t)
		params["remote_engine_id"] = "someone-else"
		refused(t, x, params, "no engine someone-else")
		assert.EqualValues(t, 1, x.d.Stats().ForeignParams)
	})
	t.Run("another host", func(t *testing.T) {
		x := startPD(t, 0)
		params := x.prefill(t)
		params["remote_host"] = "10.0.0.66"
		refused(t, x, params, "no engine")
		assert.EqualValues(t, 1, x.d.Stats().ForeignParams)
	})
	t.Run("other blocks", func(t *testing.T) {
		x := startPD(t, 0)
		params := x.prefill(t)
		params["remote_block_ids"] = []any{[]any{7}}
		refused(t, x, params, "are not the blocks")
	})
	t.Run("expired", func(t *testing.T) {
		x := startPD(t, time.Millisecond)
		params := x.prefill(t)
		time.Sleep(5 * time.Millisecond)
		assert.Zero(t, x.fabric.Held())
		refused(t, x, params, "expired")
	})
	t.Run("prefill leg", func(t *testing.T) {
		x := startPD(t, 0)
		for name, body := range map[string]string{
			"no params":  `{"prompt":"hello","max_tokens":1}`,
			"not remote": `{"prompt":"hello","max_tokens":1,"kv_transfer_params":{"do_remote_decode":false}}`,
			"streamed":   `{"prompt":"hello","max_tokens":1,"stream":true,"kv_transfer_params":{"do_remote_decode":true}}`,
			"2 tokens":   `{"prompt":"hello","max_tokens":2,"kv_transfer_params":{"do_remote_decode":true}}`,
			"default":    `{"prompt":"hello","kv_transfer_params":{"do_remote_decode":true}}`,
			"params":     `{"prompt":"hello","max_tokens":1,"kv_transfer_params":"yes"}`,
		} {
			status, body := post(t, x.p, "/v1/completions", body)
			assert.Equal(t, http.StatusBadRequest, status, "%s: %s", name, body)
		}
		assert.Zero(t, x.fabric.Held())
	})
}

func TestForeignParams(t *testing.T) {
	f := vllmsim.NewFabric()
	agg := vllmsim.Start(t, vllmsim.Config{Fabric: f})
	p := vllmsim.Start(t, vllmsim.Config{Role: vllmsim.RolePrefill, Fabric: f})
	d := vllmsim.Start(t, vllmsim.Config{Role: vllmsim.RoleDecode, Fabric: f})

	status, _ := post(t, agg, "/v1/completions", `{"prompt":"hi","max_tokens":1}`, "Authorization", "Bearer k")
	require.Equal(t, http.StatusOK, status)
	assert.Zero(t, agg.Stats().ForeignParams)
	body, header := agg.LastRequest()
	assert.JSONEq(t, `{"prompt":"hi","max_tokens":1}`, string(body))
	assert.Equal(t, "Bearer k", header.Get("Authorization"))

	// An aggregated engine ignores params, as vLLM without a KV connector does, but counts them.
	status, _ = post(t, agg, "/v1/completions", `{"prompt":"hi","kv_transfer_params":{"do_remote_decode":true}}`)
	assert.Equal(t, http.StatusOK, status)
	assert.EqualValues(t, 1, agg.Stats().ForeignParams)

	status, _ = post(t, agg, "/v1/completions", `{"prompt":"hi"}`, "X-Prefiller-Host-Port", "10.0.0.66:8000")
	assert.Equal(t, http.StatusOK, status)
	assert.EqualValues(t, 2, agg.Stats().ForeignParams)
	_, header = agg.LastRequest()
	assert.Equal(t, "10.0.0.66:8000", header.Get("X-Prefiller-Host-Port"))

	// Counted once per request, refused ones too.
	status, _ = post(t, agg, "/v1/completions", `{"model":"gpt","prompt":"hi","kv_transfer_params":{}}`, "X-Prefiller-Host-Port", "10.0.0.66:8000")
	assert.Equal(t, http.StatusNotFound, status)
	assert.EqualValues(t, 3, agg.Stats().ForeignParams)
	assert.EqualValues(t, 4, agg.Stats().Requests)

	// A prefill leg carrying a client's source.
	status, _ = post(t, p, "/v1/completions", `{"prompt":"hi","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true,"remote_host":"10.0.0.66"}}`)
	assert.Equal(t, http.StatusOK, status)
	assert.EqualValues(t, 1, p.Stats().ForeignParams)

	// A decode leg naming an engine that is not on the fabric.
	status, _ = post(t, d, "/v1/completions", `{"prompt":"hi","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"x","remote_request_id":"r","remote_host":"10.0.0.66","remote_port":5600,"remote_block_ids":[[1]]}}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.EqualValues(t, 1, d.Stats().ForeignParams)
	// Or a real engine at another address, in params vLLM would not use.
	status, _ = post(t, d, "/v1/completions", `{"prompt":"hi","kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"`+p.EngineID()+`","remote_host":"10.0.0.66"}}`)
	assert.Equal(t, http.StatusOK, status)
	assert.EqualValues(t, 2, d.Stats().ForeignParams)
	assert.EqualValues(t, 1, d.Stats().Recomputed)
}

func TestHandlerWithoutStart(t *testing.T) {
	s := vllmsim.New(vllmsim.Config{Role: vllmsim.RolePrefill, Fabric: vllmsim.NewFabric()})
	req, err := http.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader([]byte(
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`)))
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var answer struct {
		Params map[string]any `json:"kv_transfer_params"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &answer))
	assert.Equal(t, "localhost", answer.Params["remote_host"], "vLLM's default side channel")
	assert.Equal(t, float64(5600), answer.Params["remote_port"])
}

func TestNewRefusesBadConfig(t *testing.T) {
	assert.Panics(t, func() { vllmsim.New(vllmsim.Config{Role: "both"}) })
	assert.Panics(t, func() { vllmsim.New(vllmsim.Config{Role: vllmsim.RoleDecode}) })
	f := vllmsim.NewFabric()
	vllmsim.New(vllmsim.Config{Fabric: f, EngineID: "e"})
	assert.Panics(t, func() { vllmsim.New(vllmsim.Config{Fabric: f, EngineID: "e"}) })
}
