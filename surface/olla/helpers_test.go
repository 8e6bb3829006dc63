package olla_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/require"
)

// env is a real gateway on a loopback port with the OpenAI surface and Olla's routes mounted, in
// front of fakes.
type env struct {
	srv   *gatewaytest.Server
	proxy *openai.Proxy
	URL   string
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ep is a vLLM endpoint for a fake with fast health checks.
func ep(u *openaitest.Upstream, priority int) upstream.Endpoint {
	return upstream.Endpoint{Name: u.Name, URL: u.URL, Type: upstream.TypeVLLM, Priority: priority,
		CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second}
}

// post sends a raw JSON body and returns the response with its body read.
func (e *env) post(t testing.TB, path, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func (e *env) get(t testing.TB, path string) (*http.Response, string) {
	t.Helper()
	res, err := http.Get(e.URL + path)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, string(b)
}

func chatBody(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

// slowChecks makes an endpoint's health checks rare, so only the proxy's own failures move it.
func slowChecks(e upstream.Endpoint) upstream.Endpoint {
	e.CheckInterval = time.Hour
	return e
}

func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
}

// chatOnce posts a chat completion to url's /v1/chat/completions and reads the answer.
func chatOnce(b *testing.B, c *http.Client, url string, buf *bytes.Buffer) {
	res, err := c.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"llama","messages":[{"role":"user","content":"Tell me about the weather in Paris."}],"max_tokens":64}`))
	if err != nil {
		b.Fatal(err)
	}
	buf.Reset()
	_, err = buf.ReadFrom(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		b.Fatalf("status %d, err %v: %s", res.StatusCode, err, buf.Bytes())
	}
}
