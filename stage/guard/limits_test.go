package guard_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/store/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// limiters are the two implementations every rate-limit test runs against.
func limiters(t *testing.T) map[string]func(t *testing.T) ratelimit.Limiter {
	return map[string]func(t *testing.T) ratelimit.Limiter{
		"local": func(*testing.T) ratelimit.Limiter { return ratelimit.NewLocal(ratelimit.LocalOptions{}) },
		"redis": func(t *testing.T) ratelimit.Limiter {
			r, err := ratelimit.NewRedis(redistest.Start(t).NewClient(t), ratelimit.RedisOptions{})
			require.NoError(t, err)
			return r
		},
	}
}

// A key's request budget holds across surfaces: OpenAI and KServe requests spend from it alike,
// and another key has its own.
func TestGuardKeyRequestBudget(t *testing.T) {
	for name, newLimiter := range limiters(t) {
		t.Run(name, func(t *testing.T) {
			g := startGuardedWith(t, guard.Options{Limiter: newLimiter(t),
				Limits: guard.Limits{PerKey: guard.Budget{RequestsPerMinute: 3}}})
			c := inference.NewGRPCInferenceServiceClient(g.conn)
			res, _ := g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
			require.Equal(t, http.StatusOK, res.StatusCode)
			assert.Equal(t, "3", res.Header.Get("X-RateLimit-Limit"))
			assert.Equal(t, "2", res.Header.Get("X-RateLimit-Remaining"))
			assert.NotEmpty(t, res.Header.Get("X-RateLimit-Reset"))
			_, err := c.ModelInfer(userCtx(), simpleRequest("simple"))
			require.NoError(t, err)
			res, _ = g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
			require.Equal(t, http.StatusOK, res.StatusCode)
			assert.Equal(t, "0", res.Header.Get("X-RateLimit-Remaining"))

			res, body := g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
			assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
			assert.JSONEq(t, `{"error":{"message":"rate limit reached for API key 'user': 3 requests per minute; retry after 20s","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, body)
			retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
			require.NoError(t, err)
			assert.InDelta(t, 20, retry, 1, "a token returns every 20 s")
			_, err = c.ModelInfer(userCtx(), simpleRequest("simple"))
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), "rate limit reached for API key 'user'")

			res, _ = g.postAs(t, otherKey, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
			assert.Equal(t, http.StatusOK, res.StatusCode, "another key has its own budget")
		})
	}
}

// Token budgets are spent by estimate (the body's length / 4 plus max_tokens) and settled against
// the upstream's usage; a request larger than the whole budget is refused without a retry hint.
func TestGuardTokenBudget(t *testing.T) {
	for name, newLimiter := range limiters(t) {
		t.Run(name, func(t *testing.T) {
			g := startGuardedWith(t, guard.Options{Limiter: newLimiter(t),
				Limits: guard.Limits{PerModel: guard.Budget{TokensPerMinute: 1000}}})
			body := `{"model":"llama","max_tokens":500,"messages":[]}`
			res, _ := g.post(t, "/v1/chat/completions", body)
			require.Equal(t, http.StatusOK, res.StatusCode)
			estimate := 500 + (len(body)+3)/4
			first, _ := strconv.Atoi(res.Header.Get("X-RateLimit-Remaining"))
			assert.InDelta(t, 1000-estimate, first, 1, "the estimate is spent up front")
			// The fake reports 11 tokens used: the rest of the estimate came back, so a second
			// request of the same size still fits and leaves about 1000 - 11 - estimate.
			res, _ = g.post(t, "/v1/chat/completions", body)
			require.Equal(t, http.StatusOK, res.StatusCode)
			second, _ := strconv.Atoi(res.Header.Get("X-RateLimit-Remaining"))
			assert.InDelta(t, 1000-11-estimate, second, 2)

			res, resBody := g.postAs(t, otherKey, "/v1/chat/completions", `{"model":"llama","max_tokens":5000,"messages":[]}`)
			assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
			assert.Empty(t, res.Header.Get("Retry-After"), "waiting never makes it fit")
			assert.Contains(t, resBody, "request too large for model 'llama'")
			assert.Contains(t, resBody, `"type":"tokens"`)
		})
	}
}

// Replicas sharing one Redis share one budget: whichever replica a request reaches, the
// combined admitted count is the configured budget.
func TestGuardBudgetSharedByReplicas(t *testing.T) {
	redis := redistest.Start(t)
	var gs []*guarded
	for range 2 {
		lim, err := ratelimit.NewRedis(redis.NewClient(t), ratelimit.RedisOptions{})
		require.NoError(t, err)
		gs = append(gs, startGuardedWith(t, guard.Options{Limiter: lim,
			Limits: guard.Limits{Models: map[string]guard.Budget{"llama": {RequestsPerMinute: 10}}}}))
	}
	admitted := 0
	for i := range 30 {
		res, _ := gs[i%2].post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
		if res.StatusCode == http.StatusOK {
			admitted++
		} else {
			require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
		}
	}
	// Ten plus whatever refilled during the test (a token every 6 s).
	assert.InDelta(t, 10, admitted, 1)
}

// Review fixes: a request refused by the shedder, or that never reached an upstream, gets its
// budgets back; a stream without a usage chunk is charged its prompt estimate and its chunks; an
// LLM reached through the KServe bridge spends the token budgets too.
func TestGuardBudgetsSettleEveryWay(t *testing.T) {
	t.Run("shed refusal refunds", func(t *testing.T) {
		g := startGuardedWith(t, guard.Options{Limiter: ratelimit.NewLocal(ratelimit.LocalOptions{}),
			Shedder: guard.NewShedder(guard.ShedderConfig{MaxInFlight: 1}),
			Limits:  guard.Limits{PerKey: guard.Budget{RequestsPerMinute: 2}}})
		for len(g.up.Started()) > 0 {
			<-g.up.Started()
		}
		release := g.up.Hold()
		done := make(chan struct{})
		go func() {
			defer close(done)
			res, _ := g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
			assert.Equal(t, http.StatusOK, res.StatusCode)
		}()
		<-g.up.Started()
		for range 3 {
			res, body := g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
			require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
			require.Contains(t, body, "overloaded", "the shedder refuses, not the budget: its token came back")
		}
		release()
		<-done
		res, body := g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
		assert.Equal(t, http.StatusOK, res.StatusCode, body)
	})
	t.Run("never sent refunds", func(t *testing.T) {
		g := startGuardedWith(t, guard.Options{Limiter: ratelimit.NewLocal(ratelimit.LocalOptions{}),
			Limits: guard.Limits{PerKey: guard.Budget{RequestsPerMinute: 1}}})
		g.up.Stop()
		for range 3 {
			res, body := g.post(t, "/v1/chat/completions", `{"model":"llama","messages":[]}`)
			require.Contains(t, []int{http.StatusBadGateway, http.StatusServiceUnavailable}, res.StatusCode,
				"the upstream is down, not the budget spent: %s", body)
		}
	})
	t.Run("stream chunks settle", func(t *testing.T) {
		g := startGuardedWith(t, guard.Options{Limiter: ratelimit.NewLocal(ratelimit.LocalOptions{}),
			Limits: guard.Limits{PerKey: guard.Budget{TokensPerMinute: 2000}}})
		body := `{"model":"llama","stream":true,"max_tokens":500,"messages":[]}`
		res, _ := g.post(t, "/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, res.StatusCode)
		prompt := (len(body) + 3) / 4
		first, _ := strconv.Atoi(res.Header.Get("X-RateLimit-Remaining"))
		assert.InDelta(t, 2000-prompt-500, first, 1)
		res, _ = g.post(t, "/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, res.StatusCode)
		second, _ := strconv.Atoi(res.Header.Get("X-RateLimit-Remaining"))
		// The first stream (4 content chunks, a finish chunk and [DONE]: 6 events) was settled
		// to its prompt estimate plus 6.
		assert.InDelta(t, 2000-(prompt+6)-(prompt+500), second, 2)
	})
	t.Run("bridge spends tokens", func(t *testing.T) {
		g := startGuardedWith(t, guard.Options{Limiter: ratelimit.NewLocal(ratelimit.LocalOptions{}),
			Limits: guard.Limits{PerKey: guard.Budget{TokensPerMinute: 100}}})
		c := inference.NewGRPCInferenceServiceClient(g.conn)
		infer := func(sampling string) error {
			req := &inference.ModelInferRequest{ModelName: "llama",
				Inputs: []*inference.ModelInferRequest_InferInputTensor{
					{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}},
					{Name: "sampling_parameters", Datatype: "BYTES", Shape: []int64{1}}},
				RawInputContents: [][]byte{tensor.JoinBytes([]string{"hi"}), tensor.JoinBytes([]string{sampling})}}
			_, err := c.ModelInfer(userCtx(), req)
			return err
		}
		require.NoError(t, infer(`{"max_tokens":10}`))
		err := infer(`{"max_tokens":5000}`)
		require.Error(t, err)
		assert.Contains(t, status.Convert(err).Message(), "request too large for API key 'user'")
	})
}
