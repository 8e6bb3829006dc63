package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Chain runs its interceptors outermost first, on the way in and the reverse on the way out.
func TestChainOrder(t *testing.T) {
	var trace []string
	stage := func(name string) pipeline.Interceptor {
		return func(next pipeline.Handler) pipeline.Handler {
			return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
				trace = append(trace, name+" in")
				res, err := next(ctx, req)
				trace = append(trace, name+" out")
				return res, err
			}
		}
	}
	h := pipeline.Chain(answer(`{}`), stage("a"), stage("b"))
	_, err := h(context.Background(), mustRequest(t, `{"model":"m"}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"a in", "b in", "b out", "a out"}, trace)
	assert.NotNil(t, pipeline.Chain(answer(`{}`)), "no interceptors: the handler itself")
}

// A request reads its routing fields up front and decodes the rest only when asked; a stage
// that rewrites the body gets the routing fields of the new one.
func TestRequest(t *testing.T) {
	_, err := pipeline.NewRequest("/v1/completions", []byte(`{"prompt":"x"}`))
	var e *pipeline.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusBadRequest, e.Status)
	assert.Equal(t, "missing_required_parameter", e.Code)
	_, err = pipeline.NewRequest("/v1/completions", []byte(`{"model":`))
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "invalid_json", e.Code)

	r := mustRequest(t, `{"model":"a","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, "a", r.Model())
	assert.True(t, r.Stream())
	assert.Equal(t, 9, r.Routing().MaxTokens)
	f, err := r.Fields()
	require.NoError(t, err)
	assert.JSONEq(t, `[{"role":"user","content":"hi"}]`, string(f["messages"]))
	again, _ := r.Fields()
	f["extra"] = json.RawMessage(`1`)
	assert.Contains(t, again, "extra", "Fields decodes once")

	assert.Equal(t, `{"model":"other/b","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`,
		string(r.BodyWithModel("other/b")))
	assert.Equal(t, "a", r.Model(), "BodyWithModel leaves the request as it was")

	require.Error(t, r.SetBody([]byte(`{"stream":false}`)))
	assert.Equal(t, "a", r.Model(), "a rejected body leaves the request as it was")
	require.NoError(t, r.SetBody([]byte(`{"model":"b","stream":false}`)))
	assert.Equal(t, "b", r.Model())
	assert.False(t, r.Stream())
	f, err = r.Fields()
	require.NoError(t, err)
	assert.NotContains(t, f, "extra", "a new body is decoded afresh")
}

// Admit asks the admission before the request goes on: a refusal comes back as *Refused holding
// the answer, an admitted request's headers reach the response and its Done runs once, with the
// usage, when the body is finished, or with nothing when the request failed further in.
func TestAdmit(t *testing.T) {
	var done []pipeline.Usage
	admission := func(ctx context.Context, req *pipeline.Request) (pipeline.Admitted, error) {
		switch req.Model() {
		case "deny":
			return pipeline.Admitted{}, pipeline.Unavailable("overloaded", 1500*time.Millisecond, "busy")
		case "broken":
			return pipeline.Admitted{}, errors.New("limiter exploded")
		}
		return pipeline.Admitted{Header: http.Header{"X-Ratelimit-Remaining-Requests": {"4"}},
			Done: func(u pipeline.Usage) { done = append(done, u) }}, nil
	}
	reached := 0
	next := func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		reached++
		if req.Model() == "fail" {
			return nil, pipeline.ModelNotFound("fail")
		}
		return &pipeline.Response{StatusCode: 200, Header: http.Header{}, Body: pipeline.NewBody([]byte(`{}`), pipeline.Usage{PromptTokens: 3, Status: 200})}, nil
	}
	h := pipeline.Admit(admission)(next)

	_, err := h(context.Background(), mustRequest(t, `{"model":"deny"}`))
	var refused *pipeline.Refused
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, http.StatusServiceUnavailable, refused.Err.Status)
	assert.Equal(t, "2", refused.Err.Header.Get("Retry-After"), "1.5 s rounds up")
	_, err = h(context.Background(), mustRequest(t, `{"model":"broken"}`))
	require.ErrorAs(t, err, &refused)
	assert.Equal(t, http.StatusInternalServerError, refused.Err.Status)
	assert.Zero(t, reached, "a refused request goes no further")

	_, err = h(context.Background(), mustRequest(t, `{"model":"fail"}`))
	require.Error(t, err)
	assert.Equal(t, []pipeline.Usage{{}}, done, "a request that failed further in used nothing")

	res, err := h(context.Background(), mustRequest(t, `{"model":"ok"}`))
	require.NoError(t, err)
	assert.Equal(t, "4", res.GatewayHeader.Get("X-Ratelimit-Remaining-Requests"))
	b, err := io.ReadAll(res)
	require.NoError(t, err)
	assert.Equal(t, `{}`, string(b))
	require.NoError(t, res.Close())
	require.NoError(t, res.Close())
	assert.Equal(t, []pipeline.Usage{{}, {PromptTokens: 3, Status: 200}}, done, "Done runs once, with the body's usage")
	_, err = res.Read(make([]byte, 1))
	assert.Error(t, err, "a finished body reads no more")
}

// A stream a stage makes reads back as OpenAI's events, ending with [DONE].
func TestEventBody(t *testing.T) {
	body := pipeline.NewEventBody([][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`)}, pipeline.Usage{})
	ev := pipeline.NewEvents(body)
	var got []string
	for {
		d, err := ev.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got = append(got, string(d))
	}
	assert.True(t, ev.Done())
	assert.Equal(t, []string{`{"a":1}`, `{"b":2}`}, got)
	assert.Equal(t, pipeline.Usage{Chunks: 3}, body.Finish(nil), "like an upstream stream without usage: its events, [DONE] included")
}

func TestRequestID(t *testing.T) {
	assert.Equal(t, "r-1", pipeline.RequestID(pipeline.WithRequestID(context.Background(), "r-1")))
	a, b := pipeline.RequestID(context.Background()), pipeline.NewRequestID()
	assert.Len(t, a, 32)
	assert.NotEqual(t, a, b)
}

func TestErrorJSON(t *testing.T) {
	assert.JSONEq(t, `{"error":{"message":"The model `+"`x`"+` does not exist or you do not have access to it.","type":"invalid_request_error","param":"model","code":"model_not_found"}}`,
		string(pipeline.ModelNotFound("x").JSON()))
}

// TestErrorConstructors: each constructor's status, error object and headers, as a surface sees
// them.
func TestErrorConstructors(t *testing.T) {
	rl := http.Header{"Retry-After": {"7"}, "X-Ratelimit-Limit": {"10"}}
	for _, c := range []struct {
		err    *pipeline.Error
		status int
		json   string
		header http.Header
	}{
		{pipeline.InvalidRequest("n", "", "bad n"), 400, `{"message":"bad n","type":"invalid_request_error","param":"n","code":null}`, nil},
		{pipeline.NotFound("", "unknown_url", "Invalid URL (GET /v1/x)"), 404, `{"message":"Invalid URL (GET /v1/x)","type":"invalid_request_error","param":null,"code":"unknown_url"}`, nil},
		{pipeline.TooLarge(10), 413, `{"message":"Request body exceeds 10 bytes.","type":"invalid_request_error","param":null,"code":"request_too_large"}`, nil},
		{pipeline.RateLimited("tokens", "slow down", rl), 429, `{"message":"slow down","type":"tokens","param":null,"code":"rate_limit_exceeded"}`, rl},
		{pipeline.Overloaded(1500*time.Millisecond, "busy"), 429, `{"message":"busy","type":"server_error","param":null,"code":"overloaded"}`, http.Header{"Retry-After": {"2"}}},
		{pipeline.Unavailable("queue_timeout", 0, "waited"), 503, `{"message":"waited","type":"server_error","param":null,"code":"queue_timeout"}`, http.Header{"Retry-After": {"1"}}},
		{pipeline.Canceled(context.Canceled), 499, `{"message":"context canceled","type":"server_error","param":null,"code":null}`, nil},
	} {
		assert.Equal(t, c.status, c.err.Status, c.json)
		assert.JSONEq(t, `{"error":`+c.json+`}`, string(c.err.JSON()))
		assert.Equal(t, c.header, c.err.Header, c.json)
	}
}

func answer(body string) pipeline.Handler {
	return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{StatusCode: 200, Body: pipeline.NewBody([]byte(body), pipeline.Usage{})}, nil
	}
}

func mustRequest(t *testing.T, body string) *pipeline.Request {
	t.Helper()
	r, err := pipeline.NewRequest("/v1/chat/completions", []byte(body))
	require.NoError(t, err)
	return r
}

func TestEditBody(t *testing.T) {
	req, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"stream": true, "model":"m","messages":[{"role":"user", "content":"hi"}],"session_id":"s"}`))
	require.NoError(t, err)
	body, err := req.EditBody(map[string]json.RawMessage{"max_tokens": json.RawMessage("1"), "stream": json.RawMessage("false")}, "session_id", "max_tokens")
	require.NoError(t, err)
	assert.Equal(t, `{"messages":[{"role":"user", "content":"hi"}],"model":"m","stream":false}`, string(body),
		"set members replace, dropped ones go (drop wins over set), others keep their bytes, sorted")
	assert.Contains(t, string(req.Body()), `"session_id":"s"`, "the request is unchanged")
	body, err = req.EditBody(nil)
	require.NoError(t, err)
	assert.Equal(t, `{"messages":[{"role":"user", "content":"hi"}],"model":"m","session_id":"s","stream":true}`, string(body))
	require.NoError(t, req.SetBody(body))
	assert.Equal(t, "m", req.Model())
}

// TestGatewayHeader: the gateway's own headers are X-Infergate-* in any case, as HTTP
// canonicalises them and grpc-go lower-cases them; the prefix alone, or a look-alike, is not.
func TestGatewayHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"X-Infergate-Session-Id": true, "x-infergate-session-id": true, "X-INFERGATE-DEBUG": true,
		"X-Infergate-": false, "X-Infergate": false, "X-Infergat-Session": false, "Authorization": false, "": false,
	} {
		assert.Equal(t, want, pipeline.GatewayHeader(name), name)
	}
}
