package responses

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/openaiwire"
)

// headerEndpoint names the upstream endpoint that answered (set by the gateway's proxy).
const headerEndpoint = "X-Infergate-Endpoint"

// native passes the turn to the upstreams' own /v1/responses. The gateway keeps the state, not
// the upstream (vLLM keeps it per process, and only when told to): the request goes with store
// false, without previous_response_id, and with the conversation it continues written out as
// input items; the answer says what the client asked (store, previous_response_id) and is
// stored here before its end is sent. It reports fellBack, having answered nothing, when the
// endpoint turned out to have no /v1/responses (in Auto mode, remembered): the caller
// translates the turn instead.
func (h *Handler) native(w http.ResponseWriter, t *turn, ctx context.Context) (fellBack bool) {
	body, err := nativeBody(t)
	if err != nil {
		h.refuse(w, err)
		return false
	}
	nw := &nativeWriter{relay: newRelay(w), t: t, hd: h}
	aborted := httpapi.ServeInProcess(h.opts.NativeHandler, nw, inProcess(t.r.WithContext(ctx), apiPath, body, t.reqID))
	if !nw.sent && !aborted && h.opts.Mode(t.model) != Native && noResponsesRoute(nw.status, nw.buf) {
		if ep := nw.h.Get(headerEndpoint); ep != "" {
			h.chatOnly.add(ep)
			h.log.Info("responses: an upstream endpoint has no /v1/responses; translating onto its chat completions",
				"endpoint", ep, "model", t.model)
		}
		return true
	}
	if aborted && !nw.sent && t.r.Context().Err() != nil {
		// The client went away before any answer: end unanswered (see the chat handler).
		h.m.requests.WithLabelValues("create", "canceled").Inc()
		panic(http.ErrAbortHandler)
	}
	nw.finish(aborted)
	h.m.requests.WithLabelValues("create", nw.outcome).Inc()
	h.m.observe("native", nw.outcome, nw.stream, t.start, h.opts.Now())
	if aborted && nw.sent {
		panic(http.ErrAbortHandler)
	}
	return false
}

// nativeBody is the request as the upstream gets it (see native).
func nativeBody(t *turn) ([]byte, error) {
	b := t.view.Clone()
	b.Set("store", []byte("false"))
	b.Drop("previous_response_id", "background") // the gateway runs a background turn itself
	if len(t.context) > 0 {
		in, err := openaiwire.ResponsesTurnItems(t.body, []byte(`{"output":[]}`))
		if err != nil {
			return nil, &openaiwire.ResponsesError{Message: "input must be a string or an array of items.",
				Type: "invalid_request_error", Param: "input", Code: "invalid_type"}
		}
		v := []byte{'['}
		for i, it := range t.context {
			if i > 0 {
				v = append(v, ',')
			}
			v = append(v, it...)
		}
		for _, it := range in {
			v = append(v, ',')
			v = append(v, it...)
		}
		b.Set("input", append(v, ']'))
	}
	if !b.Dirty() {
		return t.body, nil
	}
	return b.AppendJSON(nil), nil
}

// patchResponse makes an upstream's Response say what the client asked: its store and
// previous_response_id, which the upstream did not see. It returns the response's id too.
func patchResponse(resp []byte, t *turn) ([]byte, string, error) {
	b, err := openaiwire.Parse(resp)
	if err != nil {
		return nil, "", err
	}
	b.Set("store", strconv.AppendBool(nil, t.store))
	if t.background {
		b.Set("id", quote(t.id))
		b.Set("background", []byte("true"))
	}
	if t.prevID != "" {
		b.Set("previous_response_id", quote(t.prevID))
	} else {
		b.Set("previous_response_id", []byte("null"))
	}
	return b.AppendJSON(nil), stringMember(b, "id"), nil
}

// nativeWriter is the http.ResponseWriter the proxy answers a native turn into: a 200 stream
// goes on event by event (lifecycle events patched, the final one stored first), a whole answer
// or an error is held (bounded) and answered when the proxy returns.
type nativeWriter struct {
	relay
	t      *turn
	hd     *Handler
	stream bool
	tap    *pipeline.EventTap
	serr   error
	ended  bool // a terminal event went out
}

func (c *nativeWriter) WriteHeader(status int) {
	if c.status != 0 || status < 200 {
		return
	}
	c.status = status
	if status == http.StatusOK && strings.HasPrefix(c.h.Get("Content-Type"), "text/event-stream") {
		c.stream = true
		c.tap = pipeline.NewEventTap(maxEvent, c.event)
		c.startStream()
	}
}

// event passes one event of the upstream's stream on, as "event: <type>" and its data.
func (c *nativeWriter) event(data []byte) error {
	b, err := openaiwire.Parse(data)
	if err != nil {
		return err
	}
	typ := stringMember(b, "type")
	if resp, ok := b.Get("response"); ok && len(resp) > 0 && resp[0] == '{' {
		patched, id, err := patchResponse(resp, c.t)
		if err != nil {
			return err
		}
		e := b.Clone()
		e.Set("response", patched)
		data = e.AppendJSON(nil)
		switch typ {
		case "response.completed", "response.incomplete", "response.failed":
			if id != "" {
				c.t.id = id
			}
			c.hd.save(c.t.r.Context(), c.t, patched)
			c.ended = true
		}
	}
	c.out = append(c.out, "event: "...)
	c.out = append(c.out, typ...)
	c.out = append(c.out, "\ndata: "...)
	c.out = append(c.out, data...)
	c.out = append(c.out, "\n\n"...)
	return nil
}

func (c *nativeWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if !c.stream {
		c.hold(p)
		return len(p), nil
	}
	if c.serr == nil {
		c.tap.Write(p)
		if err := c.tap.Err(); err != nil {
			c.serr = err
		}
	}
	if err := c.send(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// streamError ends a stream the upstream broke off with the Responses API's error event.
func (c *nativeWriter) streamError(msg string) {
	c.out = append(c.out, "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":"...)
	c.out = append(c.out, quote(msg)...)
	c.out = append(c.out, ",\"param\":null}\n\n"...)
	_ = c.send()
	c.outcome = "stream_error"
}

func (c *nativeWriter) finish(aborted bool) {
	switch {
	case c.stream:
		c.outcome = "ok"
		switch {
		case c.ended:
		case c.serr != nil:
			c.streamError("The upstream's stream could not be read: " + c.serr.Error())
		case aborted:
			c.streamError("The upstream failed mid-stream.")
		default:
			c.streamError("The upstream's stream ended before the response did.")
		}
	case c.settled(aborted):
	default:
		patched, id, err := patchResponse(c.buf, c.t)
		if err != nil {
			c.fail(badUpstream("The upstream's response could not be read: " + err.Error()))
			return
		}
		if id != "" {
			c.t.id = id
		}
		c.hd.save(c.t.r.Context(), c.t, patched)
		c.answer(patched)
	}
}
