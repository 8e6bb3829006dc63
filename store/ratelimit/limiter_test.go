package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSetHeaders(t *testing.T) {
	l := Limit{Rate: 2, Burst: 60}
	h := make(map[string][]string)
	decision(l, 1, 10.7, true).SetHeaders(h)
	assert.Equal(t, map[string][]string{
		"X-Ratelimit-Limit": {"60"}, "X-Ratelimit-Remaining": {"10"}, "X-Ratelimit-Reset": {"25"},
	}, h)
	h = make(map[string][]string)
	d := decision(l, 5, 0.5, false)
	assert.Equal(t, 2250*time.Millisecond, d.RetryAfter)
	d.SetHeaders(h)
	assert.Equal(t, []string{"3"}, h["Retry-After"])
	assert.Equal(t, []string{"30"}, h["X-Ratelimit-Reset"])
	h = make(map[string][]string)
	decision(l, 61, 60, false).SetHeaders(h)
	assert.NotContains(t, h, "Retry-After", "waiting does not help a request too large")
	assert.Equal(t, []string{"0"}, h["X-Ratelimit-Reset"])
}

func TestEstimateTokens(t *testing.T) {
	assert.Equal(t, 3.0+100, EstimateTokens(9, 100))
	assert.Equal(t, 0.0, EstimateTokens(-5, -1))
}

func TestPerMinute(t *testing.T) {
	assert.Equal(t, Limit{Rate: 1, Burst: 60}, PerMinute(60))
}
