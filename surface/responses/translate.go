package responses

import (
	"errors"
	"net/http"
	"strings"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/openaiwire"
)

// Bounds on what the translation holds: one streamed event, a whole answer, an error's body.
const (
	maxEvent     = 4 << 20
	maxAnswer    = 16 << 20
	maxErrorBody = 64 << 10
)

// translateWriter is the http.ResponseWriter the gateway's chat handler answers a translated
// turn into: a 200 stream is translated chunk by chunk and flushed as it comes; a whole answer
// or an error is held (bounded) and translated when the handler returns.
type translateWriter struct {
	relay
	t    *turn
	hd   *Handler
	meta openaiwire.ResponsesMeta
	st   *openaiwire.ResponsesStream
	tap  *pipeline.EventTap
	serr error // why the stream's translation stopped
}

func (c *translateWriter) WriteHeader(status int) {
	if c.status != 0 || status < 200 {
		return
	}
	c.status = status
	if status == http.StatusOK && c.meta.Stream && strings.HasPrefix(c.h.Get("Content-Type"), "text/event-stream") {
		c.st = openaiwire.NewResponsesStream(c.meta)
		c.tap = pipeline.NewEventTap(maxEvent, c.event)
		c.startStream()
		c.out = c.st.Start(c.out)
		_ = c.send()
	}
}

func (c *translateWriter) event(data []byte) error {
	var err error
	c.out, err = c.st.Chunk(c.out, data)
	if err != nil {
		c.serr = err
	}
	return err
}

func (c *translateWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	if c.st == nil {
		c.hold(p)
		return len(p), nil
	}
	if c.serr == nil {
		c.tap.Write(p)
		if err := c.tap.Err(); err != nil && c.serr == nil && !errors.Is(err, pipeline.ErrAfterDone) {
			c.serr = err
		}
	}
	if err := c.send(); err != nil {
		return 0, err // the client went away: the chat handler stops and counts it so
	}
	return len(p), nil
}

// finish ends the answer once the chat handler returned; aborted: it gave up mid-answer.
func (c *translateWriter) finish(aborted bool) {
	switch {
	case c.st != nil:
		err := c.serr
		if err == nil && aborted {
			err = errors.New("the upstream failed mid-stream")
		}
		c.endStream(err)
	case c.settled(aborted):
	case strings.HasPrefix(c.h.Get("Content-Type"), "text/event-stream"):
		c.fail(badUpstream("The upstream streamed an answer that was asked for whole."))
	case c.meta.Stream:
		c.wholeAsStream()
	default:
		c.whole()
	}
}

// endStream ends a translated stream: the final Response is stored, then its events go out.
func (c *translateWriter) endStream(err error) {
	c.st.SetCompletedAt(c.hd.opts.Now().Unix())
	var response []byte
	c.out, response = c.st.Finish(c.out, err)
	c.hd.save(c.t.r.Context(), c.t, response)
	_ = c.send()
	c.outcome = "ok"
	if err != nil {
		c.outcome = "stream_error"
	}
}

// whole translates a whole chat completion to a Response.
func (c *translateWriter) whole() {
	c.meta.CompletedAt = c.hd.opts.Now().Unix()
	resp, err := openaiwire.ChatToResponse(c.buf, c.meta)
	if err != nil {
		c.fail(badUpstream("The upstream's answer could not be read: " + err.Error()))
		return
	}
	c.hd.save(c.t.r.Context(), c.t, resp)
	c.answer(resp)
}

// wholeAsStream answers a stream request whose answer came whole (the response cache's): the
// answer as one chunk, through the same stream translation.
func (c *translateWriter) wholeAsStream() {
	chunk, err := openaiwire.ChunkOfCompletion(c.buf)
	if err != nil {
		c.fail(badUpstream("The upstream's answer could not be read: " + err.Error()))
		return
	}
	c.st = openaiwire.NewResponsesStream(c.meta)
	c.startStream()
	c.out = c.st.Start(c.out)
	c.out, c.serr = c.st.Chunk(c.out, chunk)
	c.endStream(c.serr)
}
