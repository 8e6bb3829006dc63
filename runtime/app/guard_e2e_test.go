package app

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	e2eUserKey  = "sk-e2e-user-5b8e0c1d"
	e2eAdminKey = "sk-e2e-admin-77d1f0aa"
)

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "infergate.yaml")
	require.NoError(t, os.WriteFile(p, []byte(yaml), 0o600))
	return p
}

// chat posts a chat completion for model with key (none when empty) and returns the status.
func chat(t *testing.T, addr, key, model string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	res, err := c.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

func getWithKey(t *testing.T, addr, path, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestBinaryGuard: the binary with API keys and a per-key budget: no key is 401, the budget holds,
// the admin endpoint needs an admin key and shows the bucket, /metrics counts the refusals.
func TestBinaryGuard(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	cfg := writeConfig(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: up, url: %q, type: vllm}
auth:
  keys:
    - {name: user, sha256: %s, models: [llama]}
    - {name: ops, sha256: %s, admin: true}
limits:
  per_key: {requests_per_minute: 3}
`, up.URL, guard.HashKey(e2eUserKey), guard.HashKey(e2eAdminKey)))
	addr := startBinary(t, nil, "-config", cfg)

	code, _, body := chat(t, addr, "", "llama")
	assert.Equal(t, http.StatusUnauthorized, code, body)
	for i := range 3 {
		code, h, body := chat(t, addr, e2eUserKey, "llama")
		require.Equal(t, http.StatusOK, code, body)
		assert.Equal(t, fmt.Sprint(2-i), h.Get("X-RateLimit-Remaining"))
	}
	assert.Empty(t, up.LastHeader().Get("Authorization"), "the gateway's API key never reaches the upstream")
	code, h, body := chat(t, addr, e2eUserKey, "llama")
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, body, "rate limit reached for API key 'user'")
	assert.NotEmpty(t, h.Get("Retry-After"))

	code, _ = getWithKey(t, addr, "/admin/guard", e2eUserKey)
	assert.Equal(t, http.StatusForbidden, code)
	code, body = getWithKey(t, addr, "/admin/guard", e2eAdminKey)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"bucket": "key:user:req"`)
	assert.Contains(t, body, `"endpoint": "up"`)
	_, metrics := getWithKey(t, addr, "/metrics", "")
	assert.Contains(t, metrics, `infergate_guard_decisions_total{result="rate_limited",route="openai"} 1`)
	assert.Contains(t, metrics, `infergate_guard_decisions_total{result="admitted",route="openai"} 3`)
}

// TestBinaryReplicasShareGuard: two gateway processes sharing one redis-server act as one guard:
// together they admit the configured budget, and failures seen by one open the circuit breaker
// on the other, whose half-open probes across both replicas number exactly the configured one.
func TestBinaryReplicasShareGuard(t *testing.T) {
	redis := redistest.Start(t)
	flaky := openaitest.Start(t, "flaky", "llama")
	steady := openaitest.Start(t, "steady", "llama")
	cfg := writeConfig(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: flaky, url: %q, type: vllm, priority: 100, check_interval: 1h}
  - {name: steady, url: %q, type: vllm, priority: 10, check_interval: 1h}
redis: {addr: %q}
limits:
  models: {llama: {requests_per_minute: 10}}
breaker: {consecutive_failures: 2, error_rate: -1, open_timeout: 1s, half_open_probes: 1}
`, flaky.URL, steady.URL, redis.Addr))
	a := startBinary(t, nil, "-config", cfg)
	b := startBinary(t, nil, "-config", cfg)

	// Two failures through A open flaky's breaker for both.
	flaky.FailWith(http.StatusInternalServerError)
	for range 2 {
		code, h, body := chat(t, a, "", "llama")
		require.Equal(t, http.StatusOK, code, body)
		assert.Equal(t, "steady", h.Get("X-Infergate-Endpoint"), "a 500 fails over")
	}
	require.EqualValues(t, 2, flaky.Requests())
	opened := time.Now()
	require.Eventually(t, func() bool {
		_, body := getWithKey(t, b, "/admin/guard", "")
		return strings.Contains(body, `"endpoint": "flaky",
      "state": "open"`)
	}, 5*time.Second, 5*time.Millisecond, "B learns A's breaker opened")
	t.Logf("B saw the breaker open %v after A tripped it", time.Since(opened))
	code, h, _ := chat(t, b, "", "llama")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "steady", h.Get("X-Infergate-Endpoint"))
	assert.EqualValues(t, 2, flaky.Requests(), "B sends nothing to the open endpoint")

	// After the open timeout, a burst on both replicas sends exactly one probe to flaky (which
	// still fails, so the breaker opens again); everything else goes to steady.
	time.Sleep(1100 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			addr := a
			if i%2 == 1 {
				addr = b
			}
			code, _, body := chat(t, addr, "", "llama")
			assert.Equal(t, http.StatusOK, code, body)
		})
	}
	wg.Wait()
	assert.EqualValues(t, 3, flaky.Requests(), "one half-open probe across both replicas")

	// The model's budget of 10 a minute is shared: 10 requests were admitted above (2 + 1 + 6 +
	// ... let the count speak), so what is left is spent across both replicas and then both refuse.
	admitted, refused := 0, 0
	for i := range 20 {
		addr := a
		if i%2 == 1 {
			addr = b
		}
		switch code, _, body := chat(t, addr, "", "llama"); code {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("status %d: %s", code, body)
		}
	}
	assert.InDelta(t, 10-9, admitted, 1, "9 of the 10 were spent before; one more may have refilled")
	assert.Equal(t, 20-admitted, refused)
}

// TestBinaryRedisDown: with Redis killed mid-run, a fail-open gateway keeps admitting (deciding
// locally) and a fail-closed one refuses with 503, neither hanging; when Redis returns, the
// shared budget is enforced again.
func TestBinaryRedisDown(t *testing.T) {
	redis := redistest.Start(t)
	up := openaitest.Start(t, "up", "llama")
	conf := func(policy string) string {
		return writeConfig(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: up, url: %q, type: vllm}
redis: {addr: %q}
registry: {store: memory}
limits:
  per_model: {requests_per_minute: 1000}
  failure: %s
`, up.URL, redis.Addr, policy))
	}
	open := startBinary(t, nil, "-config", conf("open"))
	closed := startBinary(t, nil, "-config", conf("closed"))
	for _, addr := range []string{open, closed} {
		code, _, body := chat(t, addr, "", "llama")
		require.Equal(t, http.StatusOK, code, body)
	}

	redis.Kill()
	for range 5 {
		start := time.Now()
		code, _, body := chat(t, open, "", "llama")
		assert.Equal(t, http.StatusOK, code, "fail-open keeps serving: %s", body)
		assert.Less(t, time.Since(start), 2*time.Second, "no hang")
		start = time.Now()
		code, _, body = chat(t, closed, "", "llama")
		assert.Equal(t, http.StatusServiceUnavailable, code, "fail-closed refuses: %s", body)
		assert.Contains(t, body, "rate_limiter_unavailable")
		assert.Less(t, time.Since(start), 2*time.Second, "no hang")
	}

	redis.Restart()
	require.Eventually(t, func() bool {
		code, _, _ := chat(t, closed, "", "llama")
		return code == http.StatusOK
	}, 15*time.Second, 50*time.Millisecond, "decisions go back to Redis")
}
