package openai_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Post sends a body to a root path of an endpoint of the type asked for that serves the model,
// under the endpoint's name for it, and returns the endpoint's answer as it is, error statuses
// included; endpoints of other types are not asked.
func TestPost(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	o := openaitest.Start(t, "o", "gpt")
	alias := a.Endpoint(100)
	alias.Aliases = map[string]string{"pub": "llama"}
	other := o.Endpoint(100)
	other.Type = upstream.TypeOpenAI
	e := start(t, openaitest.SlowChecks(alias), openaitest.SlowChecks(b.Endpoint(50)), openaitest.SlowChecks(other))
	require.Eventually(t, func() bool { return len(e.proxy.Models()) == 3 }, 5*time.Second, 10*time.Millisecond)
	ctx := context.Background()

	status, answer, err := e.proxy.Post(ctx, upstream.TypeVLLM, "pub", "/tokenize", []byte(`{"model":"pub","prompt":"hi"}`))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"count":2,"max_model_len":4096,"tokens":[104,105],"token_strs":null}`, string(answer))
	assert.JSONEq(t, `{"model":"llama","prompt":"hi"}`, string(a.LastBody()), "the endpoint's name for the model")
	assert.Equal(t, "application/json", a.LastHeader().Get("Content-Type"))
	assert.EqualValues(t, 1, a.Tokenizes())
	assert.Zero(t, a.Requests(), "not counted as an API request")

	// The last endpoint's error is the answer, as it is; a 5xx before it is failed over.
	a.FailWith(http.StatusServiceUnavailable)
	b.FailWith(http.StatusBadRequest)
	status, answer, err = e.proxy.Post(ctx, upstream.TypeVLLM, "llama", "/detokenize", []byte(`{"model":"llama","tokens":[104]}`))
	require.NoError(t, err)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, string(answer), "injected failure from b")
	assert.EqualValues(t, 2, a.Tokenizes(), "a was tried first")
	a.FailWith(0)
	b.FailWith(0)

	for _, tc := range []struct{ typ, model string }{
		{upstream.TypeVLLM, "gpt"},           // served, by an endpoint of another type
		{upstream.TypeVLLM, "no_such_model"}, // served by nobody
		{upstream.TypeOpenAI, "llama"},
	} {
		_, _, err = e.proxy.Post(ctx, tc.typ, tc.model, "/tokenize", []byte(`{"model":"`+tc.model+`","prompt":"hi"}`))
		assert.ErrorIs(t, err, openaipool.ErrNotServed, "%+v", tc)
	}
	assert.Zero(t, o.Tokenizes())

	// The body must name the model routed on: a caller checked that one.
	_, _, err = e.proxy.Post(ctx, upstream.TypeVLLM, "llama", "/tokenize", []byte(`{"model":"pub","prompt":"hi"}`))
	var perr *pipeline.Error
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, http.StatusBadRequest, perr.Status)
	_, _, err = e.proxy.Post(ctx, upstream.TypeVLLM, "llama", "/tokenize", []byte(`not json`))
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, http.StatusBadRequest, perr.Status)
}

// Post's failures: an endpoint that refuses connections is failed over, then out of rotation
// (503 with Retry-After); every endpoint failing is a 502; an answer over 16 MiB is refused
// whatever it declares; a cancelled caller gets its context's error.
func TestPostFailures(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	b := openaitest.Start(t, "b", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(100)), openaitest.SlowChecks(b.Endpoint(50)))
	require.Eventually(t, func() bool { return len(e.proxy.Models()) == 1 }, 5*time.Second, 10*time.Millisecond)
	body := []byte(`{"model":"llama","prompt":"hi"}`)
	ctx := context.Background()

	a.Stop()
	status, _, err := e.proxy.Post(ctx, upstream.TypeVLLM, "llama", "/tokenize", body)
	require.NoError(t, err, "a refused the connection, b answered")
	assert.Equal(t, http.StatusOK, status)
	assert.EqualValues(t, 1, b.Tokenizes())
	b.Stop()
	_, _, err = e.proxy.Post(ctx, upstream.TypeVLLM, "llama", "/tokenize", body)
	var perr *pipeline.Error
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, http.StatusBadGateway, perr.Status, perr.Message)
	_, _, err = e.proxy.Post(ctx, upstream.TypeVLLM, "llama", "/tokenize", body)
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, http.StatusServiceUnavailable, perr.Status, "both are out of rotation: %s", perr.Message)
	assert.NotEmpty(t, perr.Header.Get("Retry-After"))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _, err = e.proxy.Post(cctx, upstream.TypeVLLM, "llama", "/tokenize", body)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestPostBoundsTheAnswer(t *testing.T) {
	big := bigAnswerServer(t)
	e := start(t, openaitest.SlowChecks(upstream.Endpoint{Name: "big", URL: big, Type: upstream.TypeVLLM, SkipDiscovery: true,
		Models: []string{"llama"}, CheckTimeout: time.Second}))
	require.Eventually(t, func() bool { return len(e.proxy.Models()) == 1 }, 5*time.Second, 10*time.Millisecond)
	for _, path := range []string{"/tokenize", "/detokenize"} {
		_, _, err := e.proxy.Post(context.Background(), upstream.TypeVLLM, "llama", path, []byte(`{"model":"llama","tokens":[1]}`))
		var perr *pipeline.Error
		require.ErrorAs(t, err, &perr, path)
		assert.Equal(t, "upstream_response_too_large", perr.Code, path)
	}
}

// bigAnswerServer answers /health, and /tokenize with a JSON body one byte over 16 MiB;
// /detokenize declares a length of 1 TiB (which must not be allocated up front) and sends 17 MiB
// before it closes the connection.
func bigAnswerServer(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(http.ResponseWriter, *http.Request) {})
	pad := strings.Repeat(" ", 1<<20)
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, "{")
		for range 16 {
			_, _ = fmt.Fprint(w, pad)
		}
		_, _ = fmt.Fprint(w, "}")
	})
	mux.HandleFunc("POST /detokenize", func(w http.ResponseWriter, r *http.Request) {
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n{")
		for range 17 {
			if _, err := bw.WriteString(pad); err != nil {
				return
			}
		}
		_ = bw.Flush()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}
