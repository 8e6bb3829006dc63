package disagg_test

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/disagg"
	"github.com/infergate/infergate/stage/sessions"
)

// TestOneEncodePerLeg: a session's turn, disaggregated, encodes its body once per upstream call
// and copies it nowhere else. The stages parse the body once into the request's view and edit
// that (sessions: messages and session_id; disagg: each leg's members on a Clone), so the only
// body-sized allocations are the two legs' encodes: counted in bytes, on a 4 MiB body whose
// bulk is a member no stage edits. (Before the view: Fields' copy and the rewrite in sessions,
// then Fields' copy and EditBody's for the prefill, and EditBody's for the decode: five.)
func TestOneEncodePerLeg(t *testing.T) {
	const big = 4 << 20
	ctx := context.Background()
	st := sessions.NewMemory(sessions.MemoryOptions{})
	mgr := sessions.New(sessions.Options{Store: st, Models: map[string]sessions.ModelOptions{"m": {}}})
	id := sessions.NewID()
	require.NoError(t, st.Create(ctx, &sessions.Session{ID: id, Model: "m", Expires: time.Now().Add(time.Hour), TTL: time.Hour}))
	body := []byte(`{"model":"m","session_id":"` + id + `","messages":[{"role":"user","content":"q"}],"metadata":"` +
		strings.Repeat("x", big) + `"}`)

	var legs []string
	next := func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		b := r.Body()
		require.Greater(t, len(b), big)
		require.NotContains(t, string(b[:100]), "session_id")
		answer := `{"choices":[{"message":{"role":"assistant","content":"a"}}]}`
		if strings.Contains(string(b[:200]), `"do_remote_decode":true`) {
			legs = append(legs, "prefill")
			answer = `{"kv_transfer_params":{"do_remote_prefill":true}}`
		} else {
			legs = append(legs, "decode")
		}
		return &pipeline.Response{StatusCode: http.StatusOK, Endpoint: "e", Body: pipeline.NewBody([]byte(answer), pipeline.Usage{})}, nil
	}
	h := pipeline.Chain(next, disagg.DropClientParams, mgr.Interceptor("m"),
		disagg.New(disagg.Options{Model: "m", Prefill: []string{"p"}, Decode: []string{"d"}}).Interceptor())
	req, err := pipeline.NewRequest("/v1/chat/completions", body)
	require.NoError(t, err)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := h(ctx, req)
	require.NoError(t, err)
	res.Body.Finish(nil)
	runtime.ReadMemStats(&after)

	assert.Equal(t, []string{"prefill", "decode"}, legs)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d = %.2f bodies", allocated, float64(allocated)/big)
	assert.Less(t, allocated, uint64(3*big), "%d bytes allocated: more than one encode per leg", allocated)
}
