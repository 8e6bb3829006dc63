package openaipool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/core/tracing"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// exchange is an upstream response being read: it meters the body as it passes (time to first
// token, inter-token gaps, usage) and, when finished, releases the endpoint and counts the request.
type exchange struct {
	u      *Pool
	route  *route
	res    *http.Response
	ctx    context.Context
	start  time.Time
	reqID  string
	stream bool // an SSE response with status 200: reads are chunks
	ticket breaker.Ticket
	span   trace.Span // the upstream call's span; nil when the request is not traced
	// req is the request sent upstream, and reqBody its body as the transport reads it, both
	// allocated with the exchange.
	req     http.Request
	reqBody bytes.Reader

	reads    int
	bytes    int64 // the body's bytes read
	chunks   int64 // "data:" lines of a stream, for its usage when it reports none
	lastRead time.Time
	eof      bool
	readErr  error
	finished bool
	usage    pipeline.Usage // what Finish returns, once finished
	// resp is the Response forward returns, allocated with the exchange.
	resp pipeline.Response
	// tail keeps the body's last bytes: the usage object sits at the end of a response, and at the
	// end of a stream (in its last usage chunk), so one scan at EOF finds it whatever the read
	// boundaries were. It comes from tails on the first read and goes back there when finished.
	tail    *[tailSize]byte
	tailLen int
}

const tailSize = 1024

var tails = sync.Pool{New: func() any { return new([tailSize]byte) }}

// tailBytes is what tail holds.
func (x *exchange) tailBytes() []byte {
	if x.tail == nil {
		return nil
	}
	return x.tail[:x.tailLen]
}

// roundTrip routes out to the highest healthy tier, failing over to the next endpoint on a
// connection error or a 5xx before any byte reached the caller (the last endpoint's 5xx is the
// answer). Gateway-side failures are *Error; a cancelled ctx returns ctx's error.
func (u *Pool) roundTrip(ctx context.Context, out *pipeline.Request) (*exchange, error) {
	model := out.Model()
	routes := u.table.Load().routes[model]
	if len(routes) == 0 {
		u.m.requests.WithLabelValues("", "", "404").Inc()
		return nil, pipeline.ModelNotFound(model)
	}
	var x *exchange
	res := upstream.Failover(ctx, &u.router, routes, nil, func(ctx context.Context, route *route, ticket breaker.Ticket, last bool) (bool, error) {
		var err error
		x, err = u.attempt(ctx, route, out, ticket, last)
		return !out.FormSent(), err // a streamed form goes to one endpoint once it has read it
	})
	if res.OK {
		return x, nil
	}
	// Past the answer's return: errors.As's target escapes, and would cost every request an
	// allocation where it is declared.
	var perr *pipeline.Error
	switch {
	case res.Stopped && ctx.Err() != nil: // ctx ended
		u.m.requests.WithLabelValues(model, res.Route.ep.cfg.Name, "499").Inc()
		return nil, ctx.Err()
	case errors.As(res.Failure, &perr): // the client's streamed form failed mid-way
		u.m.requests.WithLabelValues(model, res.Route.ep.cfg.Name, strconv.Itoa(perr.Status)).Inc()
		return nil, perr
	case res.Failure != nil:
		u.m.requests.WithLabelValues(model, "", "502").Inc()
		return nil, pipeline.ServerError(http.StatusBadGateway, "upstream_unreachable",
			fmt.Sprintf("Every endpoint serving model `%s` failed: %v", model, res.Failure))
	}
	u.m.requests.WithLabelValues(model, "", "503").Inc()
	return nil, unavailable(model, res)
}

// unavailable is the answer when no endpoint serving model took the request: each one was out
// of rotation (its health checks failing) or cut off by its breaker, either skipped for being
// open or tried and refused a ticket. When an endpoint that passes its health checks is cut off,
// its breaker is what stands in the way: upstream_circuit_open, with Retry-After when the soonest
// breaker lets a request through again. Otherwise no_healthy_upstream, with Retry-After the
// shortest health check interval: an endpoint that recovers is back in rotation after its next
// check.
func unavailable(model string, res upstream.Result[*route]) *pipeline.Error {
	if res.CircuitOpen {
		return pipeline.Unavailable("upstream_circuit_open", res.RetryAfter,
			fmt.Sprintf("Every endpoint serving model `%s` is cut off by its circuit breaker (failing, or cooling "+
				"down after a 429); retry after %d s.", model, httpapi.CeilSeconds(res.RetryAfter)))
	}
	return pipeline.Unavailable("no_healthy_upstream", res.RetryAfter, fmt.Sprintf("No healthy endpoint serves model `%s` right now.", model))
}

// attempt sends the request to one endpoint, with the breaker's ticket for it. On success the
// endpoint stays counted as busy, and the ticket open, until the exchange is finished. A 5xx is an
// error (so the caller tries the next endpoint) unless last.
func (u *Pool) attempt(ctx context.Context, route *route, out *pipeline.Request, ticket breaker.Ticket, last bool) (*exchange, error) {
	ep := route.ep
	ep.AddOutstanding(1)
	route.inflight.Inc()
	release := func() {
		ep.AddOutstanding(-1)
		route.inflight.Dec()
	}

	body := out.Body()
	if route.upstream != route.public && !out.IsForm() {
		body = out.BodyWithModel(route.upstream)
	}
	target := ep.urlFor(out.Path)
	if out.RawQuery != "" {
		q := *target
		q.RawQuery = out.RawQuery
		target = &q
	}
	h := u.upstreamHeader(ep, out)
	// The upstream call's span, a child of the request's, and its traceparent in h (replacing a
	// client's, which h copied); nothing when the request carries no trace.
	ctx, span := tracing.StartUpstream(ctx, ep.cfg.Name, h)
	// The request is built by hand and sent on the transport itself: http.NewRequest would parse
	// the URL we already hold, and http.Client would copy the headers for redirects we never follow.
	x := &exchange{u: u, route: route, ctx: ctx, start: out.Start, reqID: out.ID, ticket: ticket, span: span}
	x.reqBody.Reset(body)
	req := &x.req
	*req = http.Request{
		Method:     http.MethodPost,
		URL:        target,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		// io.NopCloser over a *bytes.Reader is a body net/http knows to be in memory: it writes
		// the headers and the body in one write instead of flushing the headers first.
		Body:          io.NopCloser(&x.reqBody),
		GetBody:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
		ContentLength: int64(len(body)),
		Host:          target.Host,
	}
	if out.IsForm() {
		// A spooled form may be mostly on disk: it is read from there as it is sent, anew on a
		// resend. A streamed one is read from the client as it is sent, once.
		name := out.Model()
		if route.upstream != route.public {
			name = route.upstream
		}
		form, n, ok := out.FormBody(name)
		if !ok { // a streamed form an earlier attempt read: roundTrip stops before this
			release()
			ticket.Done(breaker.Ignored)
			tracing.End(span, errFormSent)
			return nil, errFormSent
		}
		req.Body, req.ContentLength, req.GetBody = io.NopCloser(form), max(n, 0), nil // 0 with a body: sent chunked
		if out.FormResendable() {
			// The transport sends it again itself when a kept-alive connection it chose turns out
			// to have been closed.
			req.GetBody = func() (io.ReadCloser, error) { form, _, _ := out.FormBody(name); return io.NopCloser(form), nil }
		}
	}
	res, err := ep.rt.roundTrip(ctx, req)
	if err != nil {
		tracing.End(span, err)
		release()
		if ferr := out.FormErr(); ferr != nil {
			// The client's form failed mid-way (it went away, sent too much, or sent what the
			// gateway refuses): the endpoint is not to blame, and nothing is tried again.
			ticket.Done(breaker.Ignored)
			return nil, pipeline.FormError(ferr)
		}
		if ctx.Err() == nil {
			ep.Failed(err)
			ticket.Done(breaker.Failure)
		} else {
			ticket.Done(breaker.Ignored)
		}
		return nil, fmt.Errorf("%s: %w", ep.cfg.Name, err)
	}
	// A streamed form the endpoint has read cannot go to another: its 5xx is the answer.
	if res.StatusCode >= 500 && !last && !out.FormSent() {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		release()
		ticket.Done(breaker.Failure)
		err := fmt.Errorf("%s: HTTP %d", ep.cfg.Name, res.StatusCode)
		tracing.End(span, err)
		return nil, err
	}
	x.res = res
	// Ollama's native API streams newline-delimited JSON, and does when the request says nothing.
	ct := res.Header.Get("Content-Type")
	x.stream = res.StatusCode == http.StatusOK &&
		(out.Stream() || strings.HasPrefix(ct, "text/event-stream") || strings.HasPrefix(ct, "application/x-ndjson"))
	return x, nil
}

// errFormSent is an attempt's error for a streamed form an earlier attempt read (Pool.roundTrip
// makes no such attempt).
var errFormSent = errors.New("the streamed form was sent to another endpoint")

// upstreamHeader is the header sent upstream, built in one map with one backing array for its
// values: the client's headers minus the hop-by-hop ones (and those its Connection header names),
// Content-Length (the transport writes the body's), StripHeaders and the client's credentials
// (upstream.IsCredentialHeader, unless the endpoint forwards them); then X-Request-Id,
// X-Forwarded-For (the client's address appended to any it sent), Accept-Encoding: identity unless
// the client chose one, and last the endpoint's configured headers, which win. An internal call
// (no client headers) sends Content-Type: application/json.
func (u *Pool) upstreamHeader(ep *endpoint, out *pipeline.Request) http.Header {
	src := out.Header
	nv := 0
	for _, vv := range src {
		nv += len(vv)
	}
	h := make(http.Header, len(src)+4+len(ep.cfg.HeaderList))
	vals := make([]string, 0, nv+4+len(ep.cfg.HeaderList))
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if src == nil {
		set("Content-Type", "application/json")
	}
	for k, vv := range src {
		if httpapi.IsHopHeader(k) || k == "Content-Length" || slices.Contains(u.strip, k) ||
			(!ep.cfg.ForwardClientAuth && upstream.IsCredentialHeader(k)) {
			continue
		}
		vals = append(vals, vv...)
		h[k] = vals[len(vals)-len(vv) : len(vals) : len(vals)]
	}
	for _, f := range src["Connection"] {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	set(httpapi.HeaderRequestID, out.ID)
	if ip, _, err := net.SplitHostPort(out.RemoteAddr); err == nil {
		if prior := src["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		set("X-Forwarded-For", ip)
	}
	if ae := h["Accept-Encoding"]; len(ae) == 0 || ae[0] == "" {
		// Without this Go's transport would leave the header off anyway (DisableCompression), but
		// an explicit identity keeps upstreams from compressing what the client cannot read.
		set("Accept-Encoding", "identity")
	}
	for _, kv := range ep.cfg.HeaderList {
		set(textproto.CanonicalMIMEHeaderKey(kv[0]), kv[1])
	}
	return h
}

// Read reads the upstream body, metering it.
func (x *exchange) Read(b []byte) (int, error) {
	if x.finished {
		return 0, errClosed
	}
	n, err := x.res.Body.Read(b)
	if n > 0 {
		now := time.Now()
		if x.stream {
			if x.reads == 0 {
				x.route.ttft.Observe(now.Sub(x.start).Seconds())
			} else {
				x.route.itl.Observe(now.Sub(x.lastRead).Seconds())
			}
		}
		x.reads++
		x.bytes += int64(n)
		x.lastRead = now
		x.keepTail(b[:n])
		if x.stream {
			x.chunks += int64(bytes.Count(b[:n], dataPrefix))
		}
	}
	switch {
	case err == io.EOF:
		x.eof = true
	case err != nil:
		x.readErr = err
	}
	return n, err
}

func (x *exchange) keepTail(b []byte) {
	if x.tail == nil {
		x.tail = tails.Get().(*[tailSize]byte)
	}
	if len(b) >= tailSize {
		x.tailLen = copy(x.tail[:], b[len(b)-tailSize:])
		return
	}
	if drop := x.tailLen + len(b) - tailSize; drop > 0 {
		x.tailLen = copy(x.tail[:], x.tail[drop:x.tailLen])
	}
	x.tailLen += copy(x.tail[x.tailLen:], b)
}

// Finish releases the endpoint, records the request and returns its usage, once. writeErr is the
// caller's failure to pass the body on (its client went away); the status label says how the
// request ended: the upstream's status when the body was read to its end, 499 when the caller
// stopped early or went away, 0 when the upstream failed mid-body (which is logged, throttled per
// endpoint).
func (x *exchange) Finish(writeErr error) pipeline.Usage {
	if x.finished {
		return x.usage
	}
	x.finished = true
	x.res.Body.Close()
	x.route.ep.AddOutstanding(-1)
	x.route.inflight.Dec()
	now := time.Now()
	took := now.Sub(x.start)
	x.route.latency.Observe(took.Seconds())
	// A stream is complete once its [DONE] event has been read, even if the body's own end has
	// not been (reading on could wait on a server that keeps the body open).
	complete := x.eof || x.stream && x.readErr == nil && endsWithDone(x.tailBytes())
	status := codeLabel(x.res.StatusCode)
	switch {
	case x.readErr != nil && x.ctx.Err() == nil && writeErr == nil:
		status = "0"
	case x.readErr != nil || writeErr != nil || !complete:
		status = "499"
	}
	if status == "200" {
		x.route.ok.get(x.u.m.requests, x.route.public, x.route.ep.cfg.Name, status).Inc()
	} else {
		x.u.m.requests.WithLabelValues(x.route.public, x.route.ep.cfg.Name, status).Inc()
	}
	failed := status == "0" || status != "499" && x.res.StatusCode >= 500
	ok := status != "0" && status != "499" && !failed
	x.route.ep.stats.record(ok, failed, took, x.bytes, now)
	x.route.stats.record(ok, failed, took, x.bytes, now)
	switch {
	case x.readErr != nil && x.ctx.Err() == nil && writeErr == nil:
		x.ticket.Done(breaker.Failure) // the upstream failed mid-body
	case x.res.StatusCode == http.StatusTooManyRequests:
		x.ticket.Throttle(httpapi.RetryAfter(x.res.Header))
	case x.readErr != nil || writeErr != nil || !complete:
		x.ticket.Done(breaker.Ignored) // the caller went away: says nothing of the upstream
	default:
		x.ticket.Done(breaker.Classify(x.res.StatusCode, nil))
	}
	var usage pipeline.Usage
	if complete && x.res.StatusCode == http.StatusOK {
		usage = x.u.countUsage(x.route, x.tailBytes())
	}
	if x.tail != nil {
		tails.Put(x.tail)
		x.tail, x.tailLen = nil, 0
	}
	if x.stream && usage.PromptTokens == 0 && usage.CompletionTokens == 0 {
		usage.Chunks = x.chunks
	}
	usage.Status = x.res.StatusCode
	x.usage = usage
	if x.span != nil {
		x.span.SetAttributes(attribute.Int("http.response.status_code", x.res.StatusCode))
		err := x.readErr
		if err == nil && x.res.StatusCode >= 500 {
			err = fmt.Errorf("HTTP %d", x.res.StatusCode)
		}
		tracing.End(x.span, err)
	}
	if x.readErr != nil && x.ctx.Err() == nil && writeErr == nil {
		x.route.ep.warn.Warn(warnMidResponse, warnMidResponse, "model", x.route.public, "request_id", x.reqID, "err", x.readErr)
	}
	return usage
}

// endsWithDone reports whether the last event in tail is OpenAI's "data: [DONE]".
func endsWithDone(tail []byte) bool {
	tail = bytes.TrimRight(tail, "\r\n")
	i := bytes.LastIndexByte(tail, '\n') + 1
	data, ok := bytes.CutPrefix(tail[i:], []byte("data:"))
	return ok && string(bytes.TrimSpace(data)) == "[DONE]"
}

var (
	usageKey   = []byte(`"usage":`)
	usageKeyG  = bytes.IndexByte(usageKey, 'g') // the key's rare byte, which lastIndexUsage seeks
	dataPrefix = []byte("data:")
)

// countUsage adds the tokens of the last usage object in the body's tail: a response's own, or a
// stream's last usage chunk (sent when the client asks for stream_options.include_usage). It reads
// just the two counts, without a JSON decoder: this runs once per request.
func (u *Pool) countUsage(route *route, tail []byte) pipeline.Usage {
	i := lastIndexUsage(tail)
	if i < 0 {
		return pipeline.Usage{}
	}
	obj := tail[i+len(usageKey):]
	if end := bytes.IndexByte(obj, '}'); end >= 0 {
		obj = obj[:end] // usage's counts are plain numbers, before any nested object closes
	}
	var usage pipeline.Usage
	if n := jsonCount(obj, `"prompt_tokens"`); n > 0 {
		route.tokIn.get(u.m.tokens, route.public, route.ep.cfg.Name, "in").Add(float64(n))
		usage.PromptTokens = n
	}
	if n := jsonCount(obj, `"completion_tokens"`); n > 0 {
		route.tokOut.get(u.m.tokens, route.public, route.ep.cfg.Name, "out").Add(float64(n))
		usage.CompletionTokens = n
	}
	return usage
}

// lastIndexUsage is bytes.LastIndex(tail, usageKey), which hashes its way back from the end
// (Rabin-Karp: a quarter of a microsecond a request in the proxy's profile): the key's 'g'
// is rare in JSON, and each one found is checked in place.
func lastIndexUsage(tail []byte) int {
	g := usageKeyG
	for end := len(tail); ; {
		j := bytes.LastIndexByte(tail[:end], 'g')
		if j < g {
			return -1
		}
		if bytes.HasPrefix(tail[j-g:], usageKey) {
			return j - g
		}
		end = j
	}
}

// jsonCount reads the non-negative integer after key and a colon in obj; -1 when absent or not an
// integer.
func jsonCount(obj []byte, key string) int64 {
	i := bytes.Index(obj, []byte(key))
	if i < 0 {
		return -1
	}
	rest := bytes.TrimLeft(obj[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return -1
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	var n int64
	digits := 0
	for _, c := range rest {
		if c < '0' || c > '9' || n > 1<<50 {
			break
		}
		n = n*10 + int64(c-'0')
		digits++
	}
	if digits == 0 {
		return -1
	}
	return n
}

// Err is the upstream's failure that ended the body short; nil when the body ended, or when the
// caller's context did.
func (x *exchange) Err() error {
	if x.readErr != nil && x.ctx.Err() == nil {
		return x.readErr
	}
	return nil
}

var errClosed = errors.New("openai: response already closed")

// forward is the terminal Handler: the metered exchange with the upstream the routing picks.
func (u *Pool) forward(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	x, err := u.roundTrip(ctx, req)
	if err != nil {
		return nil, err
	}
	ep := x.route.ep
	x.resp = pipeline.Response{StatusCode: x.res.StatusCode, Header: x.res.Header, Stream: x.stream,
		Endpoint: ep.cfg.Name, Model: x.route.upstream, BackendType: ep.cfg.Type, Body: x}
	return &x.resp, nil
}

// warnMidResponse is logged, per endpoint, once per interval however many responses it cuts
// short: the lines name the first request of each interval and count the others.
const warnMidResponse = "upstream failed mid-response"
