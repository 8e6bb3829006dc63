package olla_test

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/olla"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func decodeJSON(t *testing.T, body string, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(body), v), body)
}

// The status routes answer in Olla's shapes, from the gateway's own counts: what Olla's test
// scripts read first (/internal/health, /internal/status/endpoints' name, type and status) and
// what its monitoring reads.
func TestStatusRoutes(t *testing.T) {
	t.Parallel()
	v := openaitest.Start(t, "v", "llama")
	o := startOllama(t, "o", "qwen")
	started := time.Now().Add(-time.Minute)
	e := startWith(t, openai.Options{}, olla.Info{Version: "1.2.3", Commit: "abc", Started: started,
		Translators: func() []olla.TranslatorStats {
			return []olla.TranslatorStats{{Name: "anthropic", Requests: 3, Successes: 3, Translated: 2, Passthrough: 1, Streaming: 1, NonStreaming: 2}}
		}}, v.Endpoint(10), o.endpoint())
	e.waitModels(t, 2)

	res, body := e.Get(t, "/internal/health")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, `{"status":"healthy"}`, body, "compact, as Olla's scripts grep it")

	_, body = e.Get(t, "/version")
	var version struct{ Version, Name string }
	decodeJSON(t, body, &version)
	assert.Equal(t, "1.2.3", version.Version)

	for range 3 {
		res, body := e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"), "X-Olla-Session-Id", "s1")
		require.Equal(t, http.StatusOK, res.StatusCode, body)
	}
	res, body = e.Get(t, "/internal/status/endpoints")
	require.Equal(t, http.StatusOK, res.StatusCode)
	var eps struct {
		TotalCount   int `json:"total_count"`
		HealthyCount int `json:"healthy_count"`
		Endpoints    []struct {
			Name, Type, Status, URL string
			Priority                int
			ModelCount              int    `json:"model_count"`
			RequestCount            int64  `json:"request_count"`
			SuccessRate             string `json:"success_rate"`
		}
	}
	decodeJSON(t, body, &eps)
	assert.Equal(t, 2, eps.TotalCount)
	assert.Equal(t, 2, eps.HealthyCount)
	require.Len(t, eps.Endpoints, 2)
	assert.Equal(t, "v", eps.Endpoints[0].Name, "highest priority first")
	assert.Equal(t, "vllm", eps.Endpoints[0].Type)
	assert.Equal(t, "healthy", eps.Endpoints[0].Status)
	assert.Equal(t, v.URL, eps.Endpoints[0].URL)
	assert.EqualValues(t, 3, eps.Endpoints[0].RequestCount)
	assert.Equal(t, "100%", eps.Endpoints[0].SuccessRate)
	assert.Equal(t, 1, eps.Endpoints[0].ModelCount)
	assert.Equal(t, "ollama", eps.Endpoints[1].Type)
	assert.Equal(t, "N/A", eps.Endpoints[1].SuccessRate, "no traffic")

	// A weak ETag: the same answer again is a bare 304; gzip for a client that takes it.
	tag := res.Header.Get("ETag")
	assert.Regexp(t, `^W/"[0-9a-z]+"$`, tag)
	assert.Equal(t, "private, no-cache", res.Header.Get("Cache-Control"))
	// The answer carries its time to the second (Olla's timestamp): a tag from the second
	// before is rightly a 200 with a new tag, so the pair is tried again.
	require.Eventually(t, func() bool {
		res, _ := e.Get(t, "/internal/status/endpoints")
		req, _ := http.NewRequest(http.MethodGet, e.URL+"/internal/status/endpoints", nil)
		req.Header.Set("If-None-Match", res.Header.Get("ETag"))
		r304, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		r304.Body.Close()
		return r304.StatusCode == http.StatusNotModified
	}, 10*time.Second, time.Millisecond, "the same answer again is a bare 304")
	req, _ := http.NewRequest(http.MethodGet, e.URL+"/internal/status/endpoints", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rz, err := http.DefaultTransport.RoundTrip(req) // the raw answer, not net/http's transparent gunzip
	require.NoError(t, err)
	defer rz.Body.Close()
	assert.Equal(t, "gzip", rz.Header.Get("Content-Encoding"))
	zr, err := gzip.NewReader(rz.Body)
	require.NoError(t, err)
	unzipped, err := io.ReadAll(zr)
	require.NoError(t, err)
	assert.Contains(t, string(unzipped), `"name":"v"`)

	_, body = e.Get(t, "/internal/status")
	var overview struct {
		System struct {
			Status        string `json:"status"`
			EndpointsUp   string `json:"endpoints_up"`
			TotalRequests int64  `json:"total_requests"`
			Version       string `json:"version"`
			Commit        string `json:"commit"`
		}
		Endpoints []struct{ Name string }
	}
	decodeJSON(t, body, &overview)
	assert.Equal(t, "healthy", overview.System.Status)
	assert.Equal(t, "2/2", overview.System.EndpointsUp)
	assert.EqualValues(t, 3, overview.System.TotalRequests)
	assert.Equal(t, "abc", overview.System.Commit)

	_, body = e.Get(t, "/internal/status/models")
	var models struct {
		TotalModels  int `json:"total_models"`
		RecentModels []struct {
			Name      string
			Endpoints []string
		} `json:"recent_models"`
	}
	decodeJSON(t, body, &models)
	assert.Equal(t, 2, models.TotalModels)
	require.Len(t, models.RecentModels, 2)
	assert.Equal(t, "llama", models.RecentModels[0].Name)
	assert.Equal(t, []string{"v"}, models.RecentModels[0].Endpoints)

	_, body = e.Get(t, "/internal/stats/models")
	var stats struct {
		Models []struct {
			Name       string
			Total      int64 `json:"total_requests"`
			Successful int64 `json:"successful_requests"`
		}
		Summary struct {
			MostPopular string `json:"most_popular_model"`
		}
	}
	decodeJSON(t, body, &stats)
	require.Len(t, stats.Models, 1, "models that were requested")
	assert.Equal(t, "llama", stats.Models[0].Name)
	assert.EqualValues(t, 3, stats.Models[0].Total)
	assert.EqualValues(t, 3, stats.Models[0].Successful)
	assert.Equal(t, "llama", stats.Summary.MostPopular)

	_, body = e.Get(t, "/internal/stats/translators")
	var tr struct {
		Translators []struct {
			Name        string `json:"translator_name"`
			Passthrough int64  `json:"passthrough_requests"`
			Translation int64  `json:"translation_requests"`
		}
	}
	decodeJSON(t, body, &tr)
	require.Len(t, tr.Translators, 1)
	assert.Equal(t, "anthropic", tr.Translators[0].Name)
	assert.EqualValues(t, 1, tr.Translators[0].Passthrough)
	assert.EqualValues(t, 2, tr.Translators[0].Translation)

	_, body = e.Get(t, "/internal/stats/sticky")
	var sticky struct {
		Enabled    bool
		Active     int64 `json:"active_sessions"`
		Insertions int64
		Hits       int64
		Misses     int64
	}
	decodeJSON(t, body, &sticky)
	assert.True(t, sticky.Enabled)
	assert.EqualValues(t, 1, sticky.Active)
	assert.EqualValues(t, 1, sticky.Insertions, "one session, pinned once")
	assert.EqualValues(t, 2, sticky.Hits)
	assert.EqualValues(t, 1, sticky.Misses)

	res, body = e.Get(t, "/internal/process")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	var proc struct {
		Goroutines struct{ Count int }
		Runtime    struct{ Uptime string }
	}
	decodeJSON(t, body, &proc)
	assert.Positive(t, proc.Goroutines.Count)
	assert.NotEmpty(t, proc.Runtime.Uptime)
}
