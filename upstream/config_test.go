package upstream_test

import (
	"errors"
	"testing"
	"time"

	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidate(t *testing.T) {
	good := func() upstream.Endpoint {
		return upstream.Endpoint{Name: "a", URL: "http://127.0.0.1:8001", Type: "vllm"}
	}
	require.NoError(t, upstream.Validate([]upstream.Endpoint{good()}))
	t.Setenv("INFERGATE_SET", "v")

	for _, tc := range []struct {
		name   string
		mutate func(*upstream.Endpoint)
		field  string
		msg    string
	}{
		{"no name", func(e *upstream.Endpoint) { e.Name = "" }, "name", "required"},
		{"no url", func(e *upstream.Endpoint) { e.URL = "" }, "url", "required"},
		{"relative url", func(e *upstream.Endpoint) { e.URL = "localhost:8000" }, "url", "absolute http"},
		{"userinfo", func(e *upstream.Endpoint) { e.URL = "http://u:p@h" }, "url", "credentials"},
		{"no type", func(e *upstream.Endpoint) { e.Type = "" }, "type", "required"},
		{"bad type", func(e *upstream.Endpoint) { e.Type = "triton" }, "type", `"triton" is not one of`},
		{"negative priority", func(e *upstream.Endpoint) { e.Priority = -1 }, "priority", ">= 0"},
		{"bad health url", func(e *upstream.Endpoint) { e.HealthCheckURL = "health" }, "health_check_url", "must start with /"},
		{"bad model url", func(e *upstream.Endpoint) { e.ModelURL = "ftp://x/models" }, "model_url", "http(s) URL"},
		{"negative interval", func(e *upstream.Endpoint) { e.CheckInterval = -time.Second }, "check_interval", "positive"},
		{"negative timeout", func(e *upstream.Endpoint) { e.CheckTimeout = -time.Second }, "check_timeout", "positive"},
		{"unset env", func(e *upstream.Endpoint) {
			e.Headers = map[string]string{"Authorization": "Bearer ${INFERGATE_UNSET_X}"}
		},
			"headers.Authorization", "INFERGATE_UNSET_X is not set"},
		{"bad env name", func(e *upstream.Endpoint) { e.Headers = map[string]string{"X": "${1A}"} }, "headers.X", "not a valid environment variable name"},
		{"unterminated", func(e *upstream.Endpoint) { e.Headers = map[string]string{"X": "${INFERGATE_SET"} }, "headers.X", "unterminated"},
		{"bad header name", func(e *upstream.Endpoint) { e.Headers = map[string]string{"Bad Name": "v"} }, "headers", "not a valid header name"},
		{"bad header value", func(e *upstream.Endpoint) { e.Headers = map[string]string{"X": "a\nb"} }, "headers.X", "not a valid header value"},
		{"alias outside allow-list", func(e *upstream.Endpoint) {
			e.Models = []string{"m1"}
			e.Aliases = map[string]string{"gpt": "m2"}
		}, "aliases", "not in the models allow-list"},
		{"empty alias", func(e *upstream.Endpoint) { e.Aliases = map[string]string{"gpt": ""} }, "aliases", "both names are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := good()
			tc.mutate(&e)
			err := upstream.Validate([]upstream.Endpoint{e})
			require.Error(t, err)
			var fe *upstream.FieldError
			require.True(t, errors.As(err, &fe), "%v", err)
			assert.Equal(t, tc.field, fe.Field)
			assert.Contains(t, err.Error(), tc.msg)
			if e.Name != "" {
				assert.Contains(t, err.Error(), `endpoint "a"`)
			} else {
				assert.Contains(t, err.Error(), `endpoint "#0"`)
			}
		})
	}

	err := upstream.Validate([]upstream.Endpoint{good(), good()})
	require.ErrorContains(t, err, `endpoint "a": name: duplicate endpoint name`)

	ok := good()
	ok.Headers = map[string]string{"Authorization": "Bearer ${INFERGATE_SET}-$x"}
	ok.HealthCheckURL = "http://other:9000/healthz"
	ok.Models = []string{"m1"}
	ok.Aliases = map[string]string{"gpt": "m1"}
	require.NoError(t, upstream.Validate([]upstream.Endpoint{ok}))
}

func TestResolve(t *testing.T) {
	t.Setenv("INFERGATE_POOL_TOKEN", "tok")
	r, err := upstream.Resolve(upstream.Endpoint{Name: "v", Type: "vllm", URL: "http://h:8000/base/",
		Headers: map[string]string{"Authorization": "Bearer ${INFERGATE_POOL_TOKEN}"}})
	require.NoError(t, err)
	assert.Equal(t, "http://h:8000/base", r.BaseURL.String(), "no trailing slash")
	assert.Equal(t, "http://h:8000/base/health", r.HealthCheckURL)
	assert.Equal(t, r.HealthCheckURL, r.HealthURL.String())
	assert.Equal(t, "http://h:8000/base/v1/models", r.ModelURL)
	assert.Equal(t, r.ModelURL, r.ModelsURL.String())
	assert.Equal(t, 5*time.Second, r.CheckInterval)
	assert.Equal(t, 2*time.Second, r.CheckTimeout)
	assert.Equal(t, map[string]string{"Authorization": "Bearer tok"}, r.Headers)
	assert.Equal(t, [][2]string{{"Authorization", "Bearer tok"}}, r.HeaderList)

	r, err = upstream.Resolve(upstream.Endpoint{Name: "o", Type: "openai", URL: "https://api.example.com", ModelURL: "/models?x=1"})
	require.NoError(t, err)
	assert.Equal(t, "https://api.example.com/v1/models", r.HealthCheckURL, "openai's health check is its model listing")
	assert.Equal(t, "https://api.example.com/models?x=1", r.ModelURL)
	r, err = upstream.Resolve(upstream.Endpoint{Name: "l", Type: "ollama", URL: "http://h:11434", CheckInterval: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, "http://h:11434/", r.HealthCheckURL)
	assert.Equal(t, time.Minute, r.CheckInterval)

	// kserve: health over gRPC unless a URL is configured; no model listing URL.
	r, err = upstream.Resolve(upstream.Endpoint{Name: "k", Type: "kserve", URL: "http://h:8001"})
	require.NoError(t, err)
	assert.Empty(t, r.HealthCheckURL)
	assert.Nil(t, r.HealthURL)
	assert.Empty(t, r.ModelURL)
	assert.Nil(t, r.ModelsURL)
	r, err = upstream.Resolve(upstream.Endpoint{Name: "k", Type: "kserve", URL: "http://h:8001", HealthCheckURL: "http://h:8000/v2/health/ready"})
	require.NoError(t, err)
	assert.Equal(t, "http://h:8000/v2/health/ready", r.HealthCheckURL)

	_, err = upstream.Resolve(upstream.Endpoint{Name: "k", Type: "kserve"})
	require.ErrorContains(t, err, `endpoint "k": url: required`)
}

func TestResolveAll(t *testing.T) {
	eps := []upstream.Endpoint{
		{Name: "a", URL: "http://a", Type: "vllm"},
		{Name: "b", URL: "http://b", Type: "kserve", Priority: 3},
	}
	rs, err := upstream.ResolveAll(eps)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, "a", rs[0].Name)
	assert.Equal(t, 3, rs[1].Priority)

	rs, err = upstream.ResolveAll(append(eps, upstream.Endpoint{URL: "http://c", Type: "vllm"}))
	assert.Nil(t, rs)
	require.ErrorContains(t, err, `endpoint "#2": name: required`)
}
