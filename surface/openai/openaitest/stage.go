package openaitest

import (
	"bytes"
	"context"
	"net/http"
	"time"

	"github.com/infergate/infergate/core/pipeline"
)

// ClientGoneStage is a stage that answers every request itself with a two-chunk chat stream
// (content "Hel", then "lo" with finish_reason "stop", then [DONE]) whose first read gives the
// first event alone and whose second waits until the request's context ends, for up to 10 s:
// a client that goes away after the first chunk, with the rest of the answer, its [DONE]
// included, read after. finished receives what the answer's body was first finished with: the
// surface's account of the client.
func ClientGoneStage() (stage pipeline.Interceptor, finished <-chan error) {
	ch := make(chan error, 1)
	stage = func(pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			events := pipeline.NewEventBody([][]byte{
				[]byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"` + req.Model() + `","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}`),
				[]byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"` + req.Model() + `","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`),
			}, pipeline.Usage{})
			body := &clientGoneBody{Body: events, ctx: ctx, finished: ch}
			return &pipeline.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Stream: true, Body: body}, nil
		}
	}
	return stage, ch
}

type clientGoneBody struct {
	pipeline.Body
	ctx      context.Context
	reads    int
	pending  []byte // the first event's rest, when a read gave part of it
	finished chan error
}

func (b *clientGoneBody) Read(p []byte) (int, error) {
	b.reads++
	switch b.reads {
	case 1: // the first event alone: the surface passes it on before it reads again
		var first [4096]byte
		n, err := b.Body.Read(first[:])
		end := bytes.Index(first[:n], []byte("\n\n")) + 2
		if end < 2 {
			end = n
		}
		k := copy(p, first[:end])
		b.pending = append(b.pending, first[k:n]...)
		if len(b.pending) > 0 {
			err = nil // the rest comes first
		}
		return k, err
	case 2:
		t := time.NewTimer(10 * time.Second)
		defer t.Stop()
		select {
		case <-b.ctx.Done():
		case <-t.C:
		}
	}
	if len(b.pending) > 0 {
		n := copy(p, b.pending)
		b.pending = b.pending[n:]
		return n, nil
	}
	return b.Body.Read(p)
}

func (b *clientGoneBody) Finish(clientErr error) pipeline.Usage {
	select {
	case b.finished <- clientErr:
	default: // a later call
	}
	return b.Body.Finish(clientErr)
}
