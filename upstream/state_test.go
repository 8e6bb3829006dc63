package upstream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newState(t *testing.T, name string) (*upstream.State, *logtest.Sink) {
	t.Helper()
	var sink logtest.Sink
	s := new(upstream.State)
	s.Init(&upstream.Resolved{Endpoint: upstream.Endpoint{Name: name}}, sink.JSON())
	return s, &sink
}

// messages are the log lines' messages.
func messages(t *testing.T, sink *logtest.Sink) []string {
	t.Helper()
	var out []string
	for _, r := range sink.Records(t) {
		out = append(out, r["msg"].(string))
	}
	return out
}

// TestStateCheck: a failing check takes the endpoint out of rotation, warning on the very first
// check and when it was in rotation, not on every failure; a passing one leaves putting it back
// to the pool.
func TestStateCheck(t *testing.T) {
	s, sink := newState(t, "a")
	ctx := context.Background()
	down := errors.New("connection refused")
	fail := func(context.Context) error { return down }
	pass := func(context.Context) error { return nil }

	was, err := s.Check(ctx, fail)
	assert.False(t, was)
	assert.Same(t, down, err)
	assert.Equal(t, []string{"upstream unhealthy"}, messages(t, sink), "the very first check warns")
	_, err = s.Check(ctx, fail)
	require.Error(t, err)
	assert.Len(t, messages(t, sink), 1, "a failing endpoint is not warned about again")

	was, err = s.Check(ctx, pass)
	require.NoError(t, err)
	assert.False(t, was)
	assert.False(t, s.Healthy(), "a pass does not put the endpoint in rotation by itself")
	assert.False(t, s.SetHealthy(true))
	was, _ = s.Check(ctx, pass)
	assert.True(t, was)
	assert.True(t, s.Healthy())

	_, err = s.Check(ctx, fail)
	require.Error(t, err)
	assert.False(t, s.Healthy())
	assert.Equal(t, []string{"upstream unhealthy", "upstream unhealthy"}, messages(t, sink), "a healthy endpoint failing warns")
}

// TestStateFailed: a request's failure takes the endpoint out of rotation at once, warning once,
// and asks the health loop for an early check; pending requests for one absorb later ones.
func TestStateFailed(t *testing.T) {
	s, sink := newState(t, "a")
	s.SetHealthy(true)
	s.Failed(errors.New("reset"))
	s.Failed(errors.New("reset again"))
	assert.False(t, s.Healthy())
	recs := sink.Records(t)
	require.Len(t, recs, 1, "warned once")
	assert.Equal(t, "upstream failed; out of rotation until a health check passes", recs[0]["msg"])
	assert.Equal(t, "reset", recs[0]["err"])
	assert.Len(t, s.Kicks(), 1, "one early check asked for")
	<-s.Kicks()

	s.SetHealthy(true)
	s.Down("upstream unreachable", errors.New("x"))
	s.Down("upstream unreachable", errors.New("y"))
	assert.Equal(t, "upstream unreachable", messages(t, sink)[1])
	assert.Len(t, messages(t, sink), 2)
	assert.Empty(t, s.Kicks(), "Down alone asks for no check")
	s.Kick()
	s.Kick()
	assert.Len(t, s.Kicks(), 1)

	s.AddOutstanding(1)
	s.AddOutstanding(1)
	s.AddOutstanding(-1)
	assert.EqualValues(t, 1, s.Outstanding())
}
