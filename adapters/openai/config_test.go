package openai_test

import (
	"errors"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/openai"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidateEndpoints(t *testing.T) {
	good := func() openai.Endpoint {
		return openai.Endpoint{Name: "a", URL: "http://127.0.0.1:8001", Type: "vllm"}
	}
	require.NoError(t, openai.ValidateEndpoints([]openai.Endpoint{good()}))
	t.Setenv("INFERGATE_SET", "v")

	for _, tc := range []struct {
		name   string
		mutate func(*openai.Endpoint)
		field  string
		msg    string
	}{
		{"no name", func(e *openai.Endpoint) { e.Name = "" }, "name", "required"},
		{"no url", func(e *openai.Endpoint) { e.URL = "" }, "url", "required"},
		{"relative url", func(e *openai.Endpoint) { e.URL = "localhost:8000" }, "url", "absolute http"},
		{"userinfo", func(e *openai.Endpoint) { e.URL = "http://u:p@h" }, "url", "credentials"},
		{"no type", func(e *openai.Endpoint) { e.Type = "" }, "type", "required"},
		{"bad type", func(e *openai.Endpoint) { e.Type = "triton" }, "type", `"triton" is not one of`},
		{"negative priority", func(e *openai.Endpoint) { e.Priority = -1 }, "priority", ">= 0"},
		{"bad health url", func(e *openai.Endpoint) { e.HealthCheckURL = "health" }, "health_check_url", "must start with /"},
		{"bad model url", func(e *openai.Endpoint) { e.ModelURL = "ftp://x/models" }, "model_url", "http(s) URL"},
		{"negative interval", func(e *openai.Endpoint) { e.CheckInterval = -time.Second }, "check_interval", "positive"},
		{"negative timeout", func(e *openai.Endpoint) { e.CheckTimeout = -time.Second }, "check_timeout", "positive"},
		{"unset env", func(e *openai.Endpoint) {
			e.Headers = map[string]string{"Authorization": "Bearer ${INFERGATE_UNSET_X}"}
		},
			"headers.Authorization", "INFERGATE_UNSET_X is not set"},
		{"bad env name", func(e *openai.Endpoint) { e.Headers = map[string]string{"X": "${1A}"} }, "headers.X", "not a valid environment variable name"},
		{"unterminated", func(e *openai.Endpoint) { e.Headers = map[string]string{"X": "${INFERGATE_SET"} }, "headers.X", "unterminated"},
		{"bad header name", func(e *openai.Endpoint) { e.Headers = map[string]string{"Bad Name": "v"} }, "headers", "not a valid header name"},
		{"bad header value", func(e *openai.Endpoint) { e.Headers = map[string]string{"X": "a\nb"} }, "headers.X", "not a valid header value"},
		{"alias outside allow-list", func(e *openai.Endpoint) {
			e.Models = []string{"m1"}
			e.Aliases = map[string]string{"gpt": "m2"}
		}, "aliases", "not in the models allow-list"},
		{"empty alias", func(e *openai.Endpoint) { e.Aliases = map[string]string{"gpt": ""} }, "aliases", "both names are required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := good()
			tc.mutate(&e)
			err := openai.ValidateEndpoints([]openai.Endpoint{e})
			require.Error(t, err)
			var fe *openai.FieldError
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

	err := openai.ValidateEndpoints([]openai.Endpoint{good(), good()})
	require.ErrorContains(t, err, `endpoint "a": name: duplicate endpoint name`)

	ok := good()
	ok.Headers = map[string]string{"Authorization": "Bearer ${INFERGATE_SET}-$x"}
	ok.HealthCheckURL = "http://other:9000/healthz"
	ok.Models = []string{"m1"}
	ok.Aliases = map[string]string{"gpt": "m1"}
	require.NoError(t, openai.ValidateEndpoints([]openai.Endpoint{ok}))
}

// TestKServeEndpointSkipped: kserve endpoints validate but are not served yet.
func TestKServeEndpointSkipped(t *testing.T) {
	p, err := openai.New(openai.Options{Logger: quiet(), Endpoints: []openai.Endpoint{
		{Name: "triton", URL: "http://127.0.0.1:1", Type: "kserve"},
	}})
	require.NoError(t, err)
	p.Close()
}
