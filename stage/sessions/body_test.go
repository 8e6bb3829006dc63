package sessions

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/bodyref"
)

// checkTurnBody holds the body a turn sends upstream to the sorted rewrite of the client's with
// messages replaced by those sent and no session_id, as the stage wrote it before it edited the
// request's view (internal/bodyref keeps that code), byte for byte, with the model renamed too.
func checkTurnBody(t *testing.T, mgr *Manager, body []byte) {
	req, err := pipeline.NewRequest("/v1/chat/completions", body)
	if err != nil || req.Model() != "m" {
		return
	}
	hist := []json.RawMessage{json.RawMessage(`{"role":"system","content":"S"}`),
		json.RawMessage(`{"role":"user","content":"q0"}`), json.RawMessage(`{"role":"assistant","content":"a0"}`)}
	s := &Session{ID: NewID(), Model: "m", TTL: time.Hour, Messages: hist}
	sent, _, err := mgr.prepare(context.Background(), req, s, ModelOptions{ContextWindow: 50}.withDefaults())
	if err != nil {
		return
	}
	f, err := bodyref.Fields(body)
	require.NoError(t, err)
	msgs := []byte{'['}
	for i, m := range sent {
		if i > 0 {
			msgs = append(msgs, ',')
		}
		msgs = append(msgs, m...)
	}
	want, err := bodyref.EditBody(f, map[string]json.RawMessage{"messages": append(msgs, ']')}, "session_id")
	require.NoError(t, err)
	ref, err := pipeline.NewRequest(req.Path, want)
	require.NoError(t, err)
	require.Equal(t, ref.Routing(), req.Routing())
	require.Equal(t, string(want), string(req.Body()))
	require.Equal(t, string(ref.BodyWithModel("up/m")), string(req.BodyWithModel("up/m")))
}

func TestTurnBody(t *testing.T) {
	seeds, err := bodyref.Seeds(filepath.Join("..", ".."))
	require.NoError(t, err)
	mgr := New(Options{Store: NewMemory(MemoryOptions{})})
	for _, b := range append(seeds,
		[]byte(`{"model":"m","messages":[{"role":"user","content":"q"}]}`),
		[]byte(`{"session_id":"x","model":"m","messages":[{"role":"system","content":"s"} , {"role":"user","content":"q"}],"max_tokens":5,"\u003c":1}`),
		[]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}],"session_id":null,"session_id":"y"}`),
	) {
		checkTurnBody(t, mgr, b)
	}
}
