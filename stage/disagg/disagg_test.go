package disagg_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/vllmsim"
	"github.com/infergate/infergate/stage/disagg"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pool is a named endpoint of a test's proxy, with its priority (higher is tried first).
type pool struct {
	name, url string
	prio      int
}

// proxy serves model m from eps through the stage.
func proxy(t *testing.T, opts disagg.Options, eps ...pool) *openai.Proxy {
	t.Helper()
	var ups []upstream.Endpoint
	for _, e := range eps {
		ups = append(ups, upstream.Endpoint{Name: e.name, URL: e.url, Type: upstream.TypeVLLM, Priority: e.prio,
			CheckInterval: time.Hour, CheckTimeout: time.Second})
	}
	opts.Model = "m"
	stage := disagg.New(opts).Interceptor()
	p, err := openai.New(openai.Options{Endpoints: ups, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Stages: pipeline.ForAll(disagg.DropClientParams, stage)})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	require.Eventually(t, func() bool { return len(p.Models()) == 1 }, 5*time.Second, 5*time.Millisecond)
	return p
}

var long = strings.Repeat("A prompt long enough to prefill elsewhere. ", 20)

// complete sends one completion and returns the status and body of its answer.
func complete(t *testing.T, p *openai.Proxy, body string) (int, string) {
	t.Helper()
	req, err := pipeline.NewRequest("/v1/completions", []byte(body))
	require.NoError(t, err)
	res, err := p.Handle(context.Background(), req)
	var e *pipeline.Error
	if errors.As(err, &e) {
		return e.Status, string(e.JSON())
	}
	require.NoError(t, err)
	b, err := io.ReadAll(res)
	require.NoError(t, err)
	res.Body.Finish(nil)
	return res.StatusCode, string(b)
}

func body(prompt string) string {
	return fmt.Sprintf(`{"model":"m","max_tokens":3,"prompt":%q}`, prompt)
}

// A prefill endpoint that answers without transfer params (started without a KV connector) is
// replaced by another prefill endpoint; with none left, the decode endpoint prefills itself, or
// the request gets a 502 when the model is configured to fail.
func TestPrefillFailures(t *testing.T) {
	fabric := vllmsim.NewFabric()
	plain := vllmsim.Start(t, vllmsim.Config{Model: "m"}) // no KV connector: no params
	p1 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RolePrefill, Fabric: fabric})
	d1 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RoleDecode, Fabric: fabric})
	p := proxy(t, disagg.Options{Prefill: []string{"plain", "p1"}, Decode: []string{"d1"}},
		pool{"plain", plain.URL, 10}, pool{"p1", p1.URL, 5}, pool{"d1", d1.URL, 0})
	for range 3 {
		status, got := complete(t, p, body(long))
		require.Equal(t, http.StatusOK, status, got)
	}
	assert.EqualValues(t, 3, plain.Stats().Requests, "tried first (higher priority) every time")
	assert.EqualValues(t, 3, p1.Stats().Requests, "then the next prefill endpoint")
	assert.EqualValues(t, 3, d1.Stats().TransfersPulled)
	assert.Zero(t, d1.Stats().Recomputed)

	p = proxy(t, disagg.Options{Prefill: []string{"plain"}, Decode: []string{"d1"}}, pool{"plain", plain.URL, 0}, pool{"d1", d1.URL, 0})
	status, got := complete(t, p, body(long))
	require.Equal(t, http.StatusOK, status, got)
	assert.EqualValues(t, 1, d1.Stats().LocalPrefills, "no prefill endpoint gave params: decoded locally")

	p = proxy(t, disagg.Options{Prefill: []string{"plain"}, Decode: []string{"d1"}, FailOnPrefillError: true},
		pool{"plain", plain.URL, 0}, pool{"d1", d1.URL, 0})
	status, got = complete(t, p, body(long))
	assert.Equal(t, http.StatusBadGateway, status)
	assert.Contains(t, got, `"code":"prefill_failed"`)
	assert.Contains(t, got, "without kv_transfer_params", "the message says why")
	assert.EqualValues(t, 1, d1.Stats().LocalPrefills, "and the decode endpoint was not asked")
}

// A prefill's 4xx is the client's answer; a decode failing before its answer is redone once from
// the prefill step, on the prefill endpoint not tried yet.
func TestLegErrors(t *testing.T) {
	fabric := vllmsim.NewFabric()
	p1 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RolePrefill, Fabric: fabric, MaxModelLen: 64})
	p2 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RolePrefill, Fabric: fabric, MaxModelLen: 64})
	broken := openaitest.Start(t, "broken", "m")
	broken.FailWith(http.StatusInternalServerError)
	p := proxy(t, disagg.Options{Prefill: []string{"p1", "p2"}, Decode: []string{"broken"}},
		pool{"p1", p1.URL, 0}, pool{"p2", p2.URL, 0}, pool{"broken", broken.URL, 0})

	status, got := complete(t, p, body(strings.Repeat("too long ", 100)))
	assert.Equal(t, http.StatusBadRequest, status, got)
	assert.Contains(t, got, "maximum context length", "the prefill engine's own words")
	assert.Zero(t, broken.Requests(), "the decode pool was not asked")

	p1.Reset()
	p2.Reset()
	status, _ = complete(t, p, body("A prompt of some length, but short."))
	assert.Equal(t, http.StatusInternalServerError, status, "the decode's failure: no other decode endpoint to redo it on")
	assert.EqualValues(t, 1, broken.Requests())
	assert.EqualValues(t, 1, p1.Stats().Requests, "prefilled again for the redo, on the other prefill endpoint")
	assert.EqualValues(t, 1, p2.Stats().Requests)

	// With a second decode endpoint, the redo is served there.
	d2 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RoleDecode, Fabric: fabric})
	p = proxy(t, disagg.Options{Prefill: []string{"p1", "p2"}, Decode: []string{"broken", "d2"}},
		pool{"p1", p1.URL, 0}, pool{"p2", p2.URL, 0}, pool{"broken", broken.URL, 10}, pool{"d2", d2.URL, 0})
	status, got = complete(t, p, body("Another prompt, short too."))
	assert.Equal(t, http.StatusOK, status, got)
	assert.EqualValues(t, 1, d2.Stats().TransfersPulled)
	assert.Zero(t, d2.Stats().Recomputed)
}

// With max_prefill_queue prefill legs in flight, a new request is decoded locally.
func TestPrefillQueueBypass(t *testing.T) {
	fabric := vllmsim.NewFabric()
	slow := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RolePrefill, Fabric: fabric, PrefillPerToken: 2 * time.Millisecond})
	d1 := vllmsim.Start(t, vllmsim.Config{Model: "m", Role: vllmsim.RoleDecode, Fabric: fabric})
	p := proxy(t, disagg.Options{Prefill: []string{"slow"}, Decode: []string{"d1"}, MaxPrefillQueue: 1},
		pool{"slow", slow.URL, 0}, pool{"d1", d1.URL, 0})
	done := make(chan int)
	go func() {
		status, _ := complete(t, p, body(long))
		done <- status
	}()
	require.Eventually(t, func() bool { return slow.Stats().Requests == 1 }, 5*time.Second, time.Millisecond)
	status, got := complete(t, p, body(long+"second"))
	require.Equal(t, http.StatusOK, status, got)
	assert.EqualValues(t, 1, d1.Stats().LocalPrefills, "the second request did not wait for the prefill pool")
	assert.Equal(t, http.StatusOK, <-done)
	assert.EqualValues(t, 1, d1.Stats().TransfersPulled, "the first was disaggregated")
}
