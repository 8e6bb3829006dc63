package openai_test

import (
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolve(t *testing.T) {
	t.Setenv("INFERGATE_POOL_TOKEN", "tok")
	r, err := openai.Resolve(openai.Endpoint{Name: "v", Type: "vllm", URL: "http://h:8000/base",
		Headers: map[string]string{"Authorization": "Bearer ${INFERGATE_POOL_TOKEN}"}})
	require.NoError(t, err)
	assert.Equal(t, "http://h:8000/base/health", r.HealthCheckURL)
	assert.Equal(t, "http://h:8000/base/v1/models", r.ModelURL)
	assert.Equal(t, 5*time.Second, r.CheckInterval)
	assert.Equal(t, 2*time.Second, r.CheckTimeout)
	assert.Equal(t, map[string]string{"Authorization": "Bearer tok"}, r.Headers)

	// kserve: health over gRPC unless a URL is configured; no model listing URL.
	r, err = openai.Resolve(openai.Endpoint{Name: "k", Type: "kserve", URL: "http://h:8001"})
	require.NoError(t, err)
	assert.Empty(t, r.HealthCheckURL)
	assert.Empty(t, r.ModelURL)
	r, err = openai.Resolve(openai.Endpoint{Name: "k", Type: "kserve", URL: "http://h:8001", HealthCheckURL: "http://h:8000/v2/health/ready"})
	require.NoError(t, err)
	assert.Equal(t, "http://h:8000/v2/health/ready", r.HealthCheckURL)

	_, err = openai.Resolve(openai.Endpoint{Name: "k", Type: "kserve"})
	require.ErrorContains(t, err, `endpoint "k": url: required`)
}

func TestPick(t *testing.T) {
	prio := []int{10, 10, 5, 5, 0}
	load := []int64{3, 1, 0, 0, 0}
	ok := []bool{true, true, true, true, true}
	pick := func(rotate uint32) int {
		return openai.Pick(len(prio), func(i int) int { return prio[i] }, func(i int) bool { return ok[i] },
			func(i int) int64 { return load[i] }, rotate)
	}
	assert.Equal(t, 1, pick(0), "least loaded in the highest tier")
	ok[1] = false
	assert.Equal(t, 0, pick(0), "whatever its load, the highest tier wins while usable")
	ok[0] = false
	seen := map[int]bool{pick(0): true, pick(1): true}
	assert.Equal(t, map[int]bool{2: true, 3: true}, seen, "ties rotate")
	ok[2], ok[3] = false, false
	assert.Equal(t, 4, pick(7))
	ok[4] = false
	assert.Equal(t, -1, pick(0))

	assert.Equal(t, time.Second, openai.Backoff(time.Second, 0))
	assert.Equal(t, 8*time.Second, openai.Backoff(time.Second, 9))
	assert.Equal(t, 60*time.Second, openai.Backoff(20*time.Second, 9))
	assert.Equal(t, 90*time.Second, openai.Backoff(90*time.Second, 3))
}
