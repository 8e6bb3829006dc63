package sessions_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/sessions"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	gwupstream "github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Through the gateway's real upstream exchange (surface/openai), a session sticks to the
// endpoint that served it, and leaves it when it goes out of rotation.
func TestStickinessThroughTheProxy(t *testing.T) {
	t.Parallel()
	a, b := openaitest.Start(t, "a", "m"), openaitest.Start(t, "b", "m")
	store := sessions.NewMemory(sessions.MemoryOptions{})
	mgr := sessions.New(sessions.Options{Store: store, Models: map[string]sessions.ModelOptions{"m": {}},
		Prefer: gwupstream.WithPreferred}) // as the runtime wires it
	p, err := openai.New(openai.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Endpoints: []gwupstream.Endpoint{
			{Name: "a", URL: a.URL, Type: gwupstream.TypeVLLM, CheckInterval: 50 * time.Millisecond, CheckTimeout: time.Second},
			{Name: "b", URL: b.URL, Type: gwupstream.TypeVLLM, CheckInterval: 50 * time.Millisecond, CheckTimeout: time.Second}},
		Stages: func(model string) []pipeline.Interceptor { return []pipeline.Interceptor{mgr.Interceptor(model)} }})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	require.Eventually(t, func() bool { return len(p.Models()) == 1 }, 5*time.Second, 5*time.Millisecond)

	now := time.Now()
	id := sessions.NewID()
	require.NoError(t, store.Create(context.Background(), &sessions.Session{ID: id, Model: "m", Created: now, Expires: now.Add(time.Hour), TTL: time.Hour}))
	turn := func() string {
		t.Helper()
		req, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header = http.Header{sessions.HeaderSessionID: {id}}
		res, err := p.Handle(context.Background(), req)
		require.NoError(t, err)
		_, err = io.ReadAll(res)
		require.NoError(t, err)
		res.Body.Finish(nil)
		require.Equal(t, http.StatusOK, res.StatusCode)
		return res.Endpoint
	}
	first := turn()
	for range 5 {
		assert.Equal(t, first, turn())
	}
	out, other := a, b
	if first == "b" {
		out, other = b, a
	}
	out.SetHealthy(false)
	require.Eventually(t, func() bool { return turn() != first }, 5*time.Second, 20*time.Millisecond, "moved once out of rotation")
	before := other.Requests()
	for range 3 {
		turn()
	}
	assert.Equal(t, before+3, other.Requests(), "and stuck to the new endpoint")
	s, err := store.Get(context.Background(), "", id)
	require.NoError(t, err)
	assert.Greater(t, len(s.Messages), 2*7)
}
