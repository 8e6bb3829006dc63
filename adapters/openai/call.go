package openai

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

// Response is an upstream's answer to a Call. Read its body from it and Close it when done: until
// then the endpoint counts the request as outstanding.
type Response struct {
	StatusCode int
	Header     http.Header
	// Endpoint names the endpoint that answered, Model the name it knows the model by.
	Endpoint, Model string
	// Stream reports a successful server-sent-events response; Events reads it.
	Stream bool

	x *exchange
}

// Call sends an OpenAI API request body (chat completion, completion or embedding) to POST path
// (/v1/chat/completions, ...) for the model the body names, with the routing, failover and metrics
// HTTP clients get: the gRPC, Connect and KServe surfaces use it to reach the same upstreams.
// Failures before an upstream answered are *Error (an unknown model, a body without one, no
// healthy endpoint); an upstream's own error status comes back as a Response, with its body.
// Cancelling ctx cancels the upstream request.
func (p *Proxy) Call(ctx context.Context, path string, body []byte) (*Response, error) {
	start := time.Now()
	rt, rerr := p.routingOf(body)
	if rerr != nil {
		p.m.requests.WithLabelValues("", "", codeLabel(rerr.Status)).Inc()
		return nil, rerr
	}
	adm, aerr := p.admit(ctx, path, rt, body)
	if aerr != nil {
		return nil, aerr
	}
	reqID := requestIDFrom(ctx)
	x, err := p.roundTrip(adm.Context, &outbound{path: path, body: body, rt: rt, reqID: reqID, start: start})
	if err != nil {
		if adm.Done != nil {
			adm.Done(Usage{})
		}
		return nil, err
	}
	x.done = adm.Done
	return &Response{StatusCode: x.res.StatusCode, Header: x.res.Header, Endpoint: x.route.ep.cfg.Name,
		Model: x.route.upstream, Stream: x.stream, x: x}, nil
}

// Read reads the upstream's response body as it arrives.
func (r *Response) Read(b []byte) (int, error) {
	if r.x.finished {
		return 0, errClosed
	}
	return r.x.Read(b)
}

// Close ends the exchange; closing before the body's end cancels the rest of it.
func (r *Response) Close() error {
	r.x.finish(nil)
	return nil
}

// UpstreamFailed reports whether reading stopped because the upstream failed mid-body, rather than
// at the body's end or because the caller's context ended.
func (r *Response) UpstreamFailed() bool { return r.x.upstreamFailed() }

type requestIDKey struct{}

// WithRequestID returns a context whose Calls send id as X-Request-Id (one is generated otherwise).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

func requestIDFrom(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok && id != "" {
		return id
	}
	return newRequestID()
}

// Events reads server-sent events as OpenAI streams them: each Next returns one event's data (the
// JSON of one chunk), until the "[DONE]" event or the end of the body, which are io.EOF. An event
// of type "error", or a data line holding an error object, is returned as the data it carries:
// the caller decodes the chunk and finds the error in it.
type Events struct {
	r    *bufio.Reader
	data []byte
	done bool
}

// NewEvents reads events from r.
func NewEvents(r io.Reader) *Events {
	return &Events{r: bufio.NewReaderSize(r, 16<<10)}
}

var errEventTooLong = errors.New("openai: server-sent event longer than 16 MiB")

// Next returns the next event's data; it is valid until the following call.
func (e *Events) Next() ([]byte, error) {
	e.data = e.data[:0]
	have := false
	for {
		line, err := e.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: collect it whole, bounded.
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = e.r.ReadSlice('\n')
				long = append(long, line...)
				if len(long) > 16<<20 {
					return nil, errEventTooLong
				}
			}
			line = long
		}
		if err != nil && !(err == io.EOF && len(line) > 0) {
			if err == io.EOF && have {
				return e.end()
			}
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if have {
				return e.end()
			}
		case line[0] == ':': // a comment, such as a keep-alive
		default:
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(field) == "data" {
				if have {
					e.data = append(e.data, '\n')
				}
				e.data = append(e.data, value...)
				have = true
			}
		}
		if err == io.EOF {
			if have {
				return e.end()
			}
			return nil, io.EOF
		}
	}
}

// Done reports whether the events ended with the "[DONE]" event, rather than with the body.
func (e *Events) Done() bool { return e.done }

func (e *Events) end() ([]byte, error) {
	if string(e.data) == "[DONE]" {
		e.done = true
		return nil, io.EOF
	}
	return e.data, nil
}
