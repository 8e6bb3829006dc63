package responses

import (
	"net/http"
	"strconv"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/lib/openaiwire"
)

// relay is what both serving modes' writers share: the in-process handler's headers and status,
// its whole answer or error held (bounded), and the client's side (events flushed as they are
// written; the client's write error, after which nothing more is written).
type relay struct {
	w      http.ResponseWriter
	h      http.Header // the in-process handler's headers
	status int
	buf    []byte // a whole answer, or an error's body
	over   bool   // buf passed its bound
	out    []byte // events not yet written
	sent   bool   // headers went to the client
	client httpapi.EventSender

	outcome string
}

func newRelay(w http.ResponseWriter) relay { return relay{w: w, h: make(http.Header, 8)} }

func (c *relay) Header() http.Header { return c.h }

// Flush is the in-process handler's flush: events are flushed as they are translated.
func (c *relay) Flush() {}

// hold keeps p of a whole answer (maxAnswer) or an error's body (maxErrorBody).
func (c *relay) hold(p []byte) {
	limit := maxAnswer
	if c.status != http.StatusOK {
		limit = maxErrorBody
	}
	if len(c.buf)+len(p) > limit {
		c.over = true
		p = p[:max(0, limit-len(c.buf))]
	}
	c.buf = append(c.buf, p...)
}

// copyHeaders passes the handler's headers (X-Request-Id, X-Infergate-*, rate limits,
// Retry-After) to the client, less those describing a body it does not get.
func (c *relay) copyHeaders() { httpapi.CopyForNewBody(c.w.Header(), c.h) }

// startStream sends the headers of an event stream.
func (c *relay) startStream() {
	c.copyHeaders()
	h := c.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	c.w.WriteHeader(http.StatusOK)
	c.sent = true
}

// send writes out's events, flushed. Its error is the client's: once it failed, nothing more is
// written.
func (c *relay) send() error {
	err := c.client.Send(c.w, c.out)
	c.out = c.out[:0]
	return err
}

// settled answers what needs no translation once the handler returned: no answer, an error, a
// broken or oversized one. It reports false when the held answer is a whole 200 to translate.
func (c *relay) settled(aborted bool) bool {
	switch {
	case c.sent:
	case c.status == 0:
		c.fail(badUpstream("The upstream failed before answering."))
	case c.status >= 300:
		c.upstreamError()
	case aborted:
		c.fail(badUpstream("The upstream failed mid-answer."))
	case c.over:
		c.fail(badUpstream("The upstream's answer is over " + strconv.Itoa(maxAnswer) + " bytes."))
	default:
		return false
	}
	return true
}

// fail answers with e, keeping the handler's headers (Retry-After, X-Infergate-*).
func (c *relay) fail(e *apiError) {
	c.copyHeaders()
	c.sent = true
	writeError(c.w, e)
	c.outcome = "error"
}

// upstreamError answers the handler's error with its status in OpenAI's error shape (the
// gateway's own errors have it already; an upstream's may come in another).
func (c *relay) upstreamError() {
	obj, ok := httpapi.ParseBody(c.status, c.buf)
	if !ok {
		obj.Message = http.StatusText(c.status)
		if obj.Message == "" {
			obj.Message = "HTTP " + strconv.Itoa(c.status)
		}
	}
	c.copyHeaders()
	c.sent = true
	writeErrorStatus(c.w, c.status, &openaiwire.ResponsesError{Message: obj.Message, Type: obj.Type, Param: obj.Param, Code: obj.Code})
	c.outcome = "upstream_error"
}

// answer sends a whole JSON answer.
func (c *relay) answer(body []byte) {
	c.copyHeaders()
	c.sent = true
	writeJSON(c.w, http.StatusOK, body)
	c.outcome = "ok"
}
