package respcache_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/respcache"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stageOnly is the cache in front of a terminal handler answering answer, in process.
func stageOnly(t *testing.T, opts respcache.Options, answer string) (*respcache.Cache, pipeline.Handler, *int) {
	t.Helper()
	opts.Model, opts.Logger = "m", quiet()
	c, err := respcache.New(opts)
	require.NoError(t, err)
	calls := new(int)
	terminal := func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		*calls++
		return &pipeline.Response{StatusCode: 200, Body: pipeline.NewBody([]byte(answer), pipeline.Usage{Status: 200})}, nil
	}
	return c, pipeline.Chain(terminal, c.Interceptor()), calls
}

const okAnswer = `{"id":"a","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"four"},"finish_reason":"stop"}]}`

// An answer whose client went away before its end, or that was never read to its end, is not
// stored; a hit costs no tokens.
func TestClientGoneNotStored(t *testing.T) {
	c, h, calls := stageOnly(t, respcache.Options{}, okAnswer)
	send := func(read int, clientErr error) *pipeline.Response {
		req, err := pipeline.NewRequest("/v1/chat/completions", []byte(chatReq("2+2")))
		require.NoError(t, err)
		res, err := h(context.Background(), req)
		require.NoError(t, err)
		buf := make([]byte, read)
		_, _ = io.ReadFull(res, buf)
		res.Body.Finish(clientErr)
		c.Wait()
		return res
	}
	send(10, errors.New("client went away"))
	send(10, nil) // stopped early
	send(len(okAnswer), errors.New("the last write failed"))
	assert.Equal(t, 3, *calls, "none stored")
	send(len(okAnswer)+1, nil)
	res := send(len(okAnswer)+1, nil)
	assert.Equal(t, "hit", res.GatewayHeader.Get(respcache.Header))
	assert.Equal(t, 4, *calls)
	u := res.Body.Finish(nil)
	assert.Equal(t, pipeline.Usage{Status: 200, Cached: true}, u, "a hit cost the upstream nothing")
}

// The metrics count results, bypass reasons, outcomes and the store's contents.
func TestMetrics(t *testing.T) {
	m := respcache.NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	c, h, _ := stageOnly(t, respcache.Options{Metrics: m}, okAnswer)
	for _, body := range []string{chatReq("a"), chatReq("a"), chatReq("b"), `{"model":"m","messages":[]}`} {
		req, err := pipeline.NewRequest("/v1/chat/completions", []byte(body))
		require.NoError(t, err)
		res, err := h(context.Background(), req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res)
		res.Body.Finish(nil)
		c.Wait()
	}
	got := gather(t, reg)
	assert.Equal(t, map[string]float64{
		`infergate_respcache_requests_total{model="m",result="bypass"}`:       1,
		`infergate_respcache_requests_total{model="m",result="hit"}`:          1,
		`infergate_respcache_requests_total{model="m",result="miss"}`:         2,
		`infergate_respcache_requests_total{model="m",result="semantic_hit"}`: 0,
		`infergate_respcache_bypass_total{model="m",reason="temperature"}`:    1,
		`infergate_respcache_answers_total{model="m",outcome="stored"}`:       2,
		`infergate_respcache_entries{model="m"}`:                              2,
		`infergate_respcache_bytes{model="m"}`:                                got[`infergate_respcache_bytes{model="m"}`],
		`infergate_respcache_evictions_total{model="m"}`:                      0,
	}, got)
	assert.Greater(t, got[`infergate_respcache_bytes{model="m"}`], 200.0)
}

// gather reads every counter and gauge of reg as name{labels} -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			name := mf.GetName() + "{" + strings.Join(labels, ",") + "}"
			switch {
			case m.Counter != nil:
				out[name] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
