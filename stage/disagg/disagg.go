// Package disagg serves a model's requests disaggregated, with vLLM's prefill/decode protocol
// (its NIXL connector's, as vLLM's own proxies speak it): a prefill worker computes the prompt's
// KV cache, a decode worker pulls it and generates (models.<name>.disaggregation).
//
// Leg 1 sends the request to a prefill endpoint with kv_transfer_params asking for a remote
// decode ({"do_remote_decode": true, "do_remote_prefill": false, "remote_*": null}), stream
// false, max_tokens 1 (and max_completion_tokens 1 when the client sent it), without
// stream_options, min_tokens and min_completion_tokens. Leg 2 sends the client's request as it
// was, plus the kv_transfer_params of the prefill answer passed through untouched (their shape
// changes across vLLM versions), to a decode endpoint; its answer, streamed or not, is the
// client's. Both legs carry the same X-Request-Id.
//
// Disaggregation is conditional, as Dynamo's is: a prompt shorter than MinPromptTokens (counted
// exactly when the model has a tokenizer, else estimated at 4 bytes a token), or one arriving
// while MaxPrefillQueue prefill legs are in flight, goes straight to a decode endpoint, which
// prefills it locally. A prefill endpoint that fails, or answers without kv_transfer_params, is
// replaced by another; when none is left the request is decoded locally (OnPrefillFailure
// "fallback", the default) or answered 502 ("fail"). A prefill answer of 4xx is the client's
// answer: another worker would refuse the request too. A decode that fails before its answer
// starts is redone once from the prefill step, on endpoints not tried yet.
//
// A client never chooses where KV comes from: DropClientParams removes kv_transfer_params and
// the routing headers of disaggregating proxies (X-Prefiller-Host-Port and kin) from every
// request before any stage sees it.
package disagg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/openaiwire"
	"github.com/infergate/infergate/store/ratelimit"
	"github.com/infergate/infergate/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure one model's disaggregation.
type Options struct {
	Model string
	// Prefill and Decode name the endpoints of each pool (upstream names; disjoint).
	Prefill, Decode []string
	// MinPromptTokens: shorter prompts skip the prefill pool (0: none do).
	MinPromptTokens int
	// MaxPrefillQueue: with this many prefill legs in flight, new requests skip the prefill
	// pool (0: no limit).
	MaxPrefillQueue int
	// FailOnPrefillError answers 502 when no prefill endpoint gave transfer params, instead of
	// decoding locally.
	FailOnPrefillError bool
	// Metrics is where the model's requests are counted (NewMetrics; shared by every model).
	Metrics *Metrics
}

// maxPrefillAnswer bounds a prefill answer the gateway reads: a one-token completion and its
// transfer params (block ids: a few per KB of prompt).
const maxPrefillAnswer = 4 << 20

// Stage disaggregates one model's requests.
type Stage struct {
	opts            Options
	prefill, decode map[string]bool
	inflight        atomic.Int64 // prefill legs in flight
	m               *Metrics
}

// New is the stage for opts.
func New(opts Options) *Stage {
	s := &Stage{opts: opts, prefill: map[string]bool{}, decode: map[string]bool{}, m: opts.Metrics}
	for _, n := range opts.Prefill {
		s.prefill[n] = true
	}
	for _, n := range opts.Decode {
		s.decode[n] = true
	}
	if s.m == nil {
		s.m = NewMetrics()
	}
	return s
}

// Paths a request takes, the values of the path label.
const (
	pathDisaggregated = "disaggregated"
	pathShortPrompt   = "local_short_prompt"
	pathPrefillQueue  = "local_prefill_queue"
	pathFallback      = "local_prefill_failed"
)

// Interceptor is the stage: it runs both legs through next (routing and the terminal handler),
// each kept to its pool.
func (s *Stage) Interceptor() pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			if req.Path == "/v1/embeddings" {
				return s.leg(ctx, next, req, s.decode, nil, "decode")
			}
			n := len(req.PromptTokens)
			if req.PromptTokens == nil { // no tokenizer: the guard's estimate of the prompt
				n = int(ratelimit.EstimateTokens(req.BodyLen(), 0))
			}
			switch {
			case n < s.opts.MinPromptTokens:
				return s.local(ctx, next, req, pathShortPrompt)
			case s.opts.MaxPrefillQueue > 0 && s.inflight.Load() >= int64(s.opts.MaxPrefillQueue):
				return s.local(ctx, next, req, pathPrefillQueue)
			}
			res, err, tried := s.disaggregate(ctx, next, req, nil)
			if !failedBeforeAnswer(res, err) || ctx.Err() != nil || tried == nil {
				return res, err
			}
			// The decode failed before its answer began. The transfer is bound to the prefill
			// worker that made it: start over, once, on endpoints not tried yet; should none be
			// left (or the redo fail too), the first failure is the answer.
			s.m.fallbacks.WithLabelValues(s.opts.Model, "decode").Inc()
			if res != nil {
				tried = append(tried, res.Endpoint)
			}
			res2, err2, _ := s.disaggregate(ctx, next, req, tried)
			if failedBeforeAnswer(res2, err2) && ctx.Err() == nil {
				if res2 != nil {
					res2.Body.Finish(nil)
				}
				return res, err
			}
			if res != nil {
				res.Body.Finish(nil)
			}
			return res2, err2
		}
	}
}

// disaggregate runs both legs, on endpoints not in tried. It returns the decode leg's answer and
// the endpoints tried (nil when the request did not reach the decode leg disaggregated: the
// prefill's own answer, a local decode, or a refusal).
func (s *Stage) disaggregate(ctx context.Context, next pipeline.Handler, req *pipeline.Request, tried []string) (*pipeline.Response, error, []string) {
	params, prefilled, res, err := s.prefillLeg(ctx, next, req, tried)
	switch {
	case res != nil || err != nil && !errors.Is(err, errNoParams):
		return res, err, nil // the prefill's 4xx, or the caller went away
	case params == nil && s.opts.FailOnPrefillError:
		return nil, pipeline.ServerError(http.StatusBadGateway, "prefill_failed", fmt.Sprintf(
			"No prefill endpoint of model `%s` gave the KV transfer its decode needs: %v", s.opts.Model, err)), nil
	case params == nil:
		s.m.fallbacks.WithLabelValues(s.opts.Model, "prefill").Inc()
		res, err := s.local(ctx, next, req, pathFallback)
		return res, err, nil
	}
	tried = append(slices.Clone(tried), prefilled)
	s.m.requests.WithLabelValues(s.opts.Model, pathDisaggregated).Inc()
	res, err = s.decodeLeg(ctx, next, req, params, tried)
	return res, err, tried
}

// clientError reports the gateway's own 4xx answer to a request, 429 aside (a busy endpoint).
func clientError(err error) bool {
	var e *pipeline.Error
	return errors.As(err, &e) && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests
}

// failedBeforeAnswer reports a decode leg that failed before its answer began: the gateway's
// own 5xx (every decode endpoint failed or none was healthy), or an upstream 5xx.
func failedBeforeAnswer(res *pipeline.Response, err error) bool {
	var e *pipeline.Error
	if errors.As(err, &e) {
		return e.Status >= 500
	}
	return err == nil && res.StatusCode >= 500
}

// local serves the request on the decode pool alone, prefilling there.
func (s *Stage) local(ctx context.Context, next pipeline.Handler, req *pipeline.Request, path string) (*pipeline.Response, error) {
	s.m.requests.WithLabelValues(s.opts.Model, path).Inc()
	return s.leg(ctx, next, req, s.decode, nil, "decode")
}

// leg runs req through next on pool, without the endpoints in tried.
func (s *Stage) leg(ctx context.Context, next pipeline.Handler, req *pipeline.Request, pool map[string]bool, tried []string, poolName string) (*pipeline.Response, error) {
	ctx = upstream.WithFilter(ctx, func(name string) bool { return pool[name] && !slices.Contains(tried, name) })
	g := s.m.inflight.WithLabelValues(s.opts.Model, poolName)
	g.Inc()
	res, err := next(ctx, req)
	if err != nil {
		g.Dec()
		return nil, err
	}
	res.Body = &meteredBody{Body: res.Body, gauge: g, start: time.Now(), ttft: s.m.decodeTTFT.WithLabelValues(s.opts.Model), decode: poolName == "decode"}
	return res, nil
}

var errNoParams = errors.New("no prefill endpoint answered with kv_transfer_params")

// prefillLeg asks the prefill pool for the KV transfer's params, trying each endpoint once. It
// returns the params and the endpoint that made them; or res, a 4xx answer for the client; or
// err: the caller's context's, or errNoParams wrapping the last failure.
func (s *Stage) prefillLeg(ctx context.Context, next pipeline.Handler, req *pipeline.Request, tried []string) (params json.RawMessage, endpoint string, res *pipeline.Response, err error) {
	out := req.Clone()
	if err := out.Edit(prefillEdit); err != nil {
		return nil, "", nil, err
	}
	tried = slices.Clone(tried)
	last := errors.New("no prefill endpoint is usable")
	for range len(s.opts.Prefill) {
		s.inflight.Add(1)
		start := time.Now()
		params, name, res, err := s.prefillOnce(ctx, next, out, tried)
		s.inflight.Add(-1)
		switch {
		case ctx.Err() != nil:
			return nil, "", nil, ctx.Err()
		case res != nil:
			return nil, "", res, nil
		case clientError(err):
			return nil, "", nil, err // a stage's refusal of the request (a 400): the client's answer
		case err == nil:
			s.m.prefill.WithLabelValues(s.opts.Model).Observe(time.Since(start).Seconds())
			return params, name, nil, nil
		}
		last = err
		if name == "" {
			break // no endpoint left, or every one failed
		}
		tried = append(tried, name)
	}
	return nil, "", nil, fmt.Errorf("%w: %v", errNoParams, last)
}

// prefillOnce is one prefill leg: its params, or res (a 4xx for the client), or an error and the
// endpoint that failed (empty when the failure was not one endpoint's).
func (s *Stage) prefillOnce(ctx context.Context, next pipeline.Handler, out *pipeline.Request, tried []string) (json.RawMessage, string, *pipeline.Response, error) {
	res, err := s.leg(ctx, next, out, s.prefill, tried, "prefill")
	if err != nil {
		return nil, "", nil, err // no endpoint left (every one tried, unhealthy or cut off)
	}
	raw, readErr := io.ReadAll(io.LimitReader(res, maxPrefillAnswer+1))
	res.Body.Finish(nil)
	switch {
	case res.StatusCode >= 400 && res.StatusCode < 500 && res.StatusCode != http.StatusTooManyRequests:
		return nil, "", &pipeline.Response{StatusCode: res.StatusCode, Header: res.Header, Endpoint: res.Endpoint,
			Model: res.Model, BackendType: res.BackendType, Body: pipeline.NewBody(raw, pipeline.Usage{Status: res.StatusCode})}, nil
	case res.StatusCode != http.StatusOK:
		return nil, res.Endpoint, nil, fmt.Errorf("prefill endpoint %s answered %d", res.Endpoint, res.StatusCode)
	case readErr != nil:
		return nil, res.Endpoint, nil, fmt.Errorf("reading prefill endpoint %s's answer: %w", res.Endpoint, readErr)
	case len(raw) > maxPrefillAnswer:
		return nil, res.Endpoint, nil, fmt.Errorf("prefill endpoint %s's answer is over %d bytes", res.Endpoint, maxPrefillAnswer)
	}
	var answer struct {
		Params json.RawMessage `json:"kv_transfer_params"`
	}
	if json.Unmarshal(raw, &answer) != nil {
		return nil, res.Endpoint, nil, fmt.Errorf("prefill endpoint %s's answer is not JSON", res.Endpoint)
	}
	if p := bytes.TrimSpace(answer.Params); len(p) == 0 || p[0] != '{' {
		return nil, res.Endpoint, nil, fmt.Errorf("prefill endpoint %s answered without kv_transfer_params (is it started with a KV connector?)", res.Endpoint)
	}
	return answer.Params, res.Endpoint, nil, nil
}

// decodeLeg sends the client's request with the transfer's params to the decode pool.
func (s *Stage) decodeLeg(ctx context.Context, next pipeline.Handler, req *pipeline.Request, params json.RawMessage, tried []string) (*pipeline.Response, error) {
	out := req.Clone()
	if err := out.Edit(func(b *openaiwire.Body) error {
		b.Set("kv_transfer_params", params)
		return nil
	}); err != nil {
		return nil, err
	}
	return s.leg(ctx, next, out, s.decode, tried, "decode")
}

// remoteDecode is the prefill leg's kv_transfer_params.
var remoteDecode = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// prefillEdit makes leg 1's body of the client's: a remote decode of one token.
func prefillEdit(b *openaiwire.Body) error {
	b.Set("kv_transfer_params", remoteDecode)
	b.Set("stream", []byte("false"))
	b.Set("max_tokens", []byte("1"))
	if b.Has("max_completion_tokens") {
		b.Set("max_completion_tokens", []byte("1"))
	}
	b.Drop("stream_options", "min_tokens", "min_completion_tokens")
	return nil
}

// clientHeaders are the request headers disaggregating proxies route by (llm-d's sidecar, the
// vLLM router): a client must not choose workers or KV sources with them.
var clientHeaders = []string{"X-Prefiller-Host-Port", "X-Encoder-Hosts-Ports", "X-Data-Parallel-Host-Port", "X-Data-Parallel-Rank"}

// DropClientParams is the interceptor that removes a client's kv_transfer_params (a body member
// telling a vLLM engine where to pull KV blocks from) and the headers of clientHeaders before any
// stage or upstream sees them. A body without the member is passed on untouched (one search of
// its bytes).
func DropClientParams(next pipeline.Handler) pipeline.Handler {
	return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
		for _, h := range clientHeaders {
			if _, ok := req.Header[h]; ok {
				req.Header = req.Header.Clone()
				for _, h := range clientHeaders {
					req.Header.Del(h)
				}
				break
			}
		}
		has, err := req.Has("kv_transfer_params")
		if err != nil {
			return nil, err
		}
		if has {
			if err := req.Edit(func(b *openaiwire.Body) error {
				b.Drop("kv_transfer_params")
				return nil
			}); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

// Metrics count disaggregated requests, for every model.
type Metrics struct {
	requests   *prometheus.CounterVec
	fallbacks  *prometheus.CounterVec
	prefill    *prometheus.HistogramVec
	decodeTTFT *prometheus.HistogramVec
	inflight   *prometheus.GaugeVec
}

// NewMetrics makes the metrics; register Collectors once.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_disagg_requests_total",
			Help: "Requests of disaggregated models by path: disaggregated (prefill then decode), or decoded locally because the prompt was short, the prefill queue deep, or every prefill endpoint failed."},
			[]string{"model", "path"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_disagg_fallbacks_total",
			Help: "Disaggregated requests whose leg failed: prefill (decoded locally, or 502) or decode (redone from the prefill step)."},
			[]string{"model", "leg"}),
		prefill: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "infergate_disagg_prefill_seconds",
			Help: "Time of the prefill leg until its transfer params were read.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)},
			[]string{"model"}),
		decodeTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "infergate_disagg_decode_first_byte_seconds",
			Help: "Time from the decode leg's start to the first byte of its answer (the first token of a stream).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)},
			[]string{"model"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "infergate_disagg_inflight",
			Help: "Legs in flight per pool (prefill, decode)."}, []string{"model", "pool"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.fallbacks, m.prefill, m.decodeTTFT, m.inflight}
}

// meteredBody keeps a leg counted in flight until its body is finished, and times a decode's
// first byte.
type meteredBody struct {
	pipeline.Body
	gauge  prometheus.Gauge
	ttft   prometheus.Observer
	start  time.Time
	decode bool
	seen   bool
	done   atomic.Bool
}

func (b *meteredBody) Read(p []byte) (int, error) {
	n, err := b.Body.Read(p)
	if n > 0 && !b.seen {
		b.seen = true
		if b.decode {
			b.ttft.Observe(time.Since(b.start).Seconds())
		}
	}
	return n, err
}

func (b *meteredBody) Finish(clientErr error) pipeline.Usage {
	u := b.Body.Finish(clientErr)
	if b.done.CompareAndSwap(false, true) {
		b.gauge.Dec()
	}
	return u
}
