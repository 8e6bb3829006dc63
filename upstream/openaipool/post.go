package openaipool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
)

// ErrNotServed is Post's error when no endpoint of the type asked for serves the model.
var ErrNotServed = errors.New("no endpoint of that type serves the model")

// maxPostAnswer bounds the answer Post reads into memory, whatever length the upstream declares.
const maxPostAnswer = 16 << 20

// Post sends body, a JSON object naming model, as a POST to path at the root of an endpoint of
// type typ serving model (an upstream's own API beside OpenAI's, such as vLLM's /tokenize), with
// the model renamed to the endpoint's name for it, and returns the endpoint's status and answer
// (at most 16 MiB). The endpoint is picked as for the OpenAI API, among those of typ: the highest
// healthy tier, the least outstanding, skipping open breakers, failing over on a connection error
// or a 5xx. The model's stages (the guard's budgets) are not passed, as these calls generate
// nothing, and nothing is metered. Errors: ErrNotServed, wrapped, when no endpoint of typ serves
// model; *pipeline.Error for the gateway's own answers (a body naming another model, no healthy
// endpoint, every endpoint failing, an answer over the bound); the context's when ctx ended.
func (u *Pool) Post(ctx context.Context, typ, model, path string, body []byte) (status int, answer []byte, err error) {
	var routes []*route
	for _, r := range u.table.Load().routes[model] {
		if r.ep.cfg.Type == typ {
			routes = append(routes, r)
		}
	}
	if len(routes) == 0 {
		return 0, nil, fmt.Errorf("model %s, type %s: %w", model, typ, ErrNotServed)
	}
	req, err := pipeline.NewRequest(path, body)
	if err != nil {
		return 0, nil, err
	}
	if req.Model() != model {
		// The caller checked model (its visibility, its tokenizer); the body must not route
		// elsewhere, nor name another model to the upstream.
		return 0, nil, pipeline.InvalidRequest("model", "invalid_value",
			fmt.Sprintf("The request names model `%s`, not `%s`.", req.Model(), model))
	}
	res := upstream.Failover(ctx, &u.router, routes, nil, func(ctx context.Context, r *route, t breaker.Ticket, last bool) (bool, error) {
		var next bool
		status, answer, next, err = u.post(ctx, r, req, t, last)
		return next, err
	})
	switch {
	case res.OK:
		return status, answer, nil
	case ctx.Err() != nil:
		return 0, nil, ctx.Err()
	case res.Stopped:
		return 0, nil, res.Err
	case res.Failure != nil:
		return 0, nil, pipeline.ServerError(http.StatusBadGateway, "upstream_unreachable",
			fmt.Sprintf("Every endpoint serving model `%s` failed: %v", model, res.Failure))
	}
	return 0, nil, unavailable(model, res)
}

// post is one attempt of Post, on route's endpoint with the breaker's ticket t. next is whether
// a failure may be tried on another endpoint.
func (u *Pool) post(ctx context.Context, r *route, req *pipeline.Request, t breaker.Ticket, last bool) (status int, answer []byte, next bool, err error) {
	ep := r.ep
	ep.AddOutstanding(1)
	defer ep.AddOutstanding(-1)
	body := req.Body()
	if r.upstream != r.public {
		body = req.BodyWithModel(r.upstream)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.urlFor(req.Path).String(), bytes.NewReader(body))
	if err != nil {
		t.Done(breaker.Ignored)
		return 0, nil, false, fmt.Errorf("%s: %w", ep.cfg.Name, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(httpapi.HeaderRequestID, pipeline.RequestID(ctx))
	ep.setHeaders(hreq.Header)
	_, span := tracing.StartUpstream(ctx, ep.cfg.Name, hreq.Header)
	defer func() { tracing.End(span, err) }()
	// failed ends the attempt on a connection error (down: the endpoint leaves rotation, as the
	// OpenAI API's requests take it out) or an answer cut short: the endpoint's fault unless the
	// caller went away.
	failed := func(err error, down bool) (int, []byte, bool, error) {
		switch {
		case ctx.Err() != nil:
			t.Done(breaker.Ignored)
		case down:
			ep.Failed(err)
			fallthrough
		default:
			t.Done(breaker.Failure)
		}
		return 0, nil, true, fmt.Errorf("%s: %w", ep.cfg.Name, err)
	}
	res, err := ep.client.Do(hreq)
	if err != nil {
		return failed(err, true)
	}
	defer res.Body.Close()
	if res.StatusCode >= 500 && !last {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		t.Done(breaker.Failure)
		return 0, nil, true, fmt.Errorf("%s: HTTP %d", ep.cfg.Name, res.StatusCode)
	}
	answer, err = io.ReadAll(io.LimitReader(res.Body, maxPostAnswer+1))
	if err != nil {
		return failed(err, false)
	}
	if len(answer) > maxPostAnswer {
		t.Done(breaker.Ignored) // the endpoint works; the answer is too large to pass on
		return 0, nil, false, pipeline.ServerError(http.StatusBadGateway, "upstream_response_too_large",
			fmt.Sprintf("Upstream %s answered %s with more than %d bytes.", ep.cfg.Name, req.Path, maxPostAnswer))
	}
	if res.StatusCode == http.StatusTooManyRequests {
		t.Throttle(httpapi.RetryAfter(res.Header))
	} else {
		t.Done(breaker.Classify(res.StatusCode, nil))
	}
	return res.StatusCode, answer, false, nil
}
