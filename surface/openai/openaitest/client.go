package openaitest

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/upstream"
)

// Endpoint is u as a vLLM endpoint with fast health checks (every 20 ms).
func (u *Upstream) Endpoint(priority int) upstream.Endpoint {
	return upstream.Endpoint{Name: u.Name, URL: u.URL, Type: upstream.TypeVLLM, Priority: priority,
		CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second}
}

// SlowChecks makes an endpoint's health checks rare, so only the proxy's own failures move it.
func SlowChecks(e upstream.Endpoint) upstream.Endpoint {
	e.CheckInterval = time.Hour
	return e
}

// ChatBody is the smallest chat completions request for model: one user message, "hi".
func ChatBody(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

// Client calls a server at URL (a gateway in front of fakes) from a test: each call returns the
// response with its body read, and fails the test on a transport error.
type Client struct {
	URL string // http://host:port
}

// Post sends a raw JSON body to path with the header pairs hdr (name, value, ...).
func (c Client) Post(tb testing.TB, path, body string, hdr ...string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, c.URL+path, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(tb, req)
}

// Get gets path.
func (c Client) Get(tb testing.TB, path string) (*http.Response, string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, c.URL+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return do(tb, req)
}

func do(tb testing.TB, req *http.Request) (*http.Response, string) {
	tb.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return res, string(b)
}

// BenchClient is a client for benchmarks: enough idle connections for every concurrent caller,
// answers not decompressed.
func BenchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
}

// ChatOnce posts the chat completions request body to url's /v1/chat/completions with c and
// reads the answer into buf, failing b unless it is a 200.
func ChatOnce(b testing.TB, c *http.Client, url string, body []byte, buf *bytes.Buffer) {
	res, err := c.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
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
