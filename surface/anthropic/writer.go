package anthropic

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/infergate/infergate/core/httpapi"
)

// chatWriter is the http.ResponseWriter the gateway's chat completions handler answers into:
// it translates the answer for the Anthropic client on w as it comes. A stream is translated
// chunk by chunk and flushed whenever the chat handler flushes (after each upstream read); a
// whole answer or an error is held (bounded) and translated when the handler returns.
type chatWriter struct {
	w      http.ResponseWriter
	h      http.Header // the chat handler's headers
	status int
	stream bool // the client asked for a stream

	id, model string
	estimate  int
	reqID     string

	st     *streamer // set once the answer is a 200 stream
	buf    []byte    // a whole answer, or an error's body
	pool   *buffer   // when set, where buf comes from (its owner releases it)
	over   bool      // buf passed maxAnswer
	sent   bool      // headers went to the client
	out    outcome
	client httpapi.EventSender // w, flushed at each event; its error is the client's
}

// maxAnswer bounds a whole answer held for translation; maxErrorBody an error's body.
const (
	maxAnswer    = 16 << 20
	maxErrorBody = 64 << 10
)

func (c *chatWriter) Header() http.Header { return c.h }

func (c *chatWriter) WriteHeader(status int) {
	if c.status != 0 || status < 200 {
		return // 1xx informational answers are not passed on
	}
	c.status = status
	if status == http.StatusOK && strings.HasPrefix(c.h.Get("Content-Type"), "text/event-stream") && c.stream {
		c.st = newStreamer(c.id, c.model, c.estimate)
		c.copyHeaders()
		h := c.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		c.w.WriteHeader(http.StatusOK)
		c.sent = true
		c.st.start()
		_ = c.send()
	}
}

// copyHeaders passes the chat handler's headers (X-Request-Id, X-Infergate-*, rate limits,
// Retry-After, the upstream's own) to the client, less those describing a body it does not get.
func (c *chatWriter) copyHeaders() {
	httpapi.CopyForNewBody(c.w.Header(), c.h)
	if c.reqID != "" {
		c.w.Header().Set("Request-Id", c.reqID)
	}
}

func (c *chatWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.st != nil {
		c.st.write(p)
		if err := c.send(); err != nil {
			return 0, err // the client went away: the chat handler stops and counts it so
		}
		return len(p), nil
	}
	limit := maxAnswer
	if c.status != http.StatusOK {
		limit = maxErrorBody
	}
	if len(c.buf)+len(p) > limit {
		c.over = true
		p = p[:max(0, limit-len(c.buf))]
	}
	if c.buf == nil && c.pool != nil {
		c.pool.b = c.pool.grow(len(p))
		c.buf = c.pool.b
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// send writes the translated events out, flushed: each reaches the client as soon as it exists.
// Its error is the client's: once it failed, nothing more is written.
func (c *chatWriter) send() error {
	err := c.client.Send(c.w, c.st.out)
	c.st.out = c.st.out[:0]
	return err
}

// Flush is the chat handler's flush: events are already flushed as they are written.
func (c *chatWriter) Flush() {}

// finish ends the answer once the chat handler returned. aborted is true when it gave up
// mid-answer (http.ErrAbortHandler: its upstream failed).
func (c *chatWriter) finish(aborted bool) {
	if c.st != nil {
		if aborted {
			c.st.fail("api_error", "The upstream failed mid-stream.")
		}
		c.st.end()
		_ = c.send()
		c.out = outcomeOK
		if c.st.failed {
			c.out = outcomeStreamError
		}
		return
	}
	if c.sent {
		return
	}
	switch {
	case c.status == 0 && aborted:
		c.fail(badUpstream("The upstream failed before answering."))
	case c.status == 0:
		c.fail(badUpstream("The gateway's chat handler gave no answer."))
	case c.status >= 300:
		c.upstreamError()
	case aborted:
		c.fail(badUpstream("The upstream failed mid-answer."))
	case c.over:
		c.fail(badUpstream("The upstream's answer is over " + strconv.Itoa(maxAnswer) + " bytes."))
	case strings.HasPrefix(c.h.Get("Content-Type"), "text/event-stream"):
		c.fail(badUpstream("The upstream streamed an answer that was asked for whole."))
	default:
		c.answer()
	}
}

// fail answers with e, keeping the chat handler's headers (Retry-After, X-Infergate-*).
func (c *chatWriter) fail(e *apiError) {
	c.copyHeaders()
	c.sent = true
	e.write(c.w, c.reqID)
	c.out = outcomeOf(e.status)
}

// upstreamError translates the chat handler's error answer (OpenAI's error object, the gateway's
// or an upstream's) to Anthropic's, with its status.
func (c *chatWriter) upstreamError() {
	obj, ok := httpapi.ParseBody(c.status, c.buf)
	msg := obj.Message
	if !ok {
		msg = http.StatusText(c.status)
		if msg == "" {
			msg = "HTTP " + strconv.Itoa(c.status)
		}
	}
	c.fail(&apiError{status: c.status, typ: errorType(c.status), msg: msg})
}

// answer translates a whole chat completion to a message, or to its event stream when the
// client asked for one and the answer came whole anyway (a cached answer).
func (c *chatWriter) answer() {
	m, err := decodeCompletion(c.buf)
	// The translation is written out and forgotten (a Writer keeps nothing of what it is
	// given): its buffer is pooled.
	out := getBuffer()
	defer out.release()
	if err != nil {
		c.fail(err)
		c.out = outcomeTranslateError
		return
	}
	c.copyHeaders()
	h := c.w.Header()
	var body []byte
	if c.stream {
		body = appendMessageEvents(out.grow(len(c.buf)+512), c.id, c.model, m, c.estimate)
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	} else {
		body = appendMessage(out.grow(len(c.buf)+256), c.id, c.model, m)
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	c.sent = true
	c.w.WriteHeader(http.StatusOK)
	_, _ = c.w.Write(body)
	out.b = body
	c.out = outcomeOK
}
