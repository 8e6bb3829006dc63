package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
)

// Response headers naming what served a request (Olla's X-Olla-* equivalents).
const (
	HeaderEndpoint     = "X-Infergate-Endpoint"
	HeaderModel        = "X-Infergate-Model"
	HeaderBackendType  = "X-Infergate-Backend-Type"
	HeaderResponseTime = "X-Infergate-Response-Time"
	HeaderRequestID    = httpapi.HeaderRequestID
)

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// proxy serves one POST of the OpenAI API: the HTTP adapter onto the request pipeline.
func (p *Proxy) proxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	req, done, perr := p.readRequest(r)
	if perr != nil {
		p.reject(w, perr)
		return
	}
	defer done()
	req.RawQuery, req.Header, req.RemoteAddr, req.Start = r.URL.RawQuery, r.Header, r.RemoteAddr, start
	if req.ID = r.Header.Get(HeaderRequestID); req.ID == "" {
		req.ID = pipeline.NewRequestID()
	}
	ctx, stuck := p.sticky(r.Context(), r.Header, req)
	res, err := p.Handle(ctx, req)
	if err != nil {
		var gwErr *pipeline.Error
		if errors.As(err, &gwErr) && gwErr.Status != pipeline.StatusClientClosed {
			gwErr.Write(w)
			return
		}
		// The client went away, or half-closed its side, which net/http reads the same way.
		// Returning with nothing written would send net/http's empty 200, a false answer to a
		// client still reading: end the connection (or the HTTP/2 stream) unanswered instead,
		// as nginx does with its 499.
		panic(http.ErrAbortHandler)
	}

	h := w.Header()
	for k, vv := range res.GatewayHeader {
		h[k] = vv
	}
	for k, vv := range res.Header {
		// Not the upstream's connection-scoped fields, nor its Date and Server: the answer's
		// date and server are the gateway's (nginx's proxy_hide_header leaves them out too).
		// Left out as they are copied, they also keep a vLLM answer's header (uvicorn's date,
		// server, content-type and content-length, and the gateway's five) within the 8
		// fields a Go map holds before it becomes a table: 3 allocations fewer.
		if httpapi.IsHopHeader(k) || k == "Date" || k == "Server" {
			continue
		}
		h[k] = vv // the upstream response is ours alone: share its values
	}
	if len(res.Header["Connection"]) > 0 {
		httpapi.RemoveHopHeaders(h, res.Header) // and the fields its Connection names
	}
	// The gateway's own headers share one backing array (keys already canonical).
	vals := []string{req.ID, res.Endpoint, res.Model, res.BackendType, durationHeader(time.Since(start))}
	h[HeaderRequestID] = vals[0:1:1]
	if res.Endpoint != "" {
		h[HeaderEndpoint] = vals[1:2:2]
		h[HeaderModel] = vals[2:3:3]
		h[HeaderBackendType] = vals[3:4:4]
	}
	h[HeaderResponseTime] = vals[4:5:5]
	if p.opts.OllaHeaders {
		// Olla's names for the same values, for its clients and dashboards.
		h["X-Olla-Request-Id"] = vals[0:1:1]
		if res.Endpoint != "" {
			h["X-Olla-Endpoint"] = vals[1:2:2]
			h["X-Olla-Model"] = []string{strings.ToLower(req.Model())} // Olla's: the request's name
			h["X-Olla-Backend-Type"] = vals[3:4:4]
		}
		h["X-Olla-Response-Time"] = vals[4:5:5]
	}
	if res.Stream || req.Stream() {
		h.Del("Content-Length")
	}
	if stuck != nil {
		stuck(h, res.Endpoint)
	}
	w.WriteHeader(res.StatusCode)

	writeErr := copyBody(w, res)
	res.Body.Finish(writeErr)
	if uerr := res.Body.Err(); uerr != nil && writeErr == nil {
		if res.Stream {
			// Tell an SSE client in-band (openai-go surfaces an "error" event as the stream's
			// error), then cut the connection so any client sees a truncated response, not a
			// clean end it could mistake for a complete answer.
			_, _ = io.WriteString(w, "\n\ndata: "+midStreamError(res.Endpoint, uerr)+"\n\n")
			_ = http.NewResponseController(w).Flush()
		}
		panic(http.ErrAbortHandler)
	}
}

// readRequest reads the client's request: a JSON body held in memory, or, on the audio routes,
// a multipart form (readForm). done frees what it holds, once the answer is written.
func (p *Proxy) readRequest(r *http.Request) (req *pipeline.Request, done func(), _ *pipeline.Error) {
	unreadable := func(err error) *pipeline.Error {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return pipeline.TooLarge(tooBig.Limit)
		}
		return pipeline.InvalidRequest("", "", "Could not read the request body: "+err.Error())
	}
	if isForm(r) && slices.Contains(AudioPaths, r.URL.Path) {
		return p.readForm(r, unreadable)
	}
	body, err := httpapi.ReadBody(r, p.opts.MaxBodyBytes)
	if err != nil {
		return nil, nil, unreadable(err)
	}
	req, err = pipeline.NewRequest(r.URL.Path, body)
	if err != nil {
		return nil, nil, err.(*pipeline.Error)
	}
	return req, func() {}, nil
}

// Handle runs a request through its model's pipeline: the stages configured for it (the guard
// first), then the upstream exchange. Errors are *pipeline.Error for the gateway's own answers
// (an unknown model, a refusal, no healthy endpoint), or the context's when the caller went away.
// The caller reads the response's body and finishes it.
func (p *Proxy) Handle(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	h := (*p.chains.Load())[req.Model()]
	if h == nil {
		p.CountRejected(http.StatusNotFound)
		return nil, pipeline.ModelNotFound(req.Model())
	}
	if req.Start.IsZero() {
		req.Start = time.Now()
	}
	if req.ID == "" {
		req.ID = pipeline.RequestID(ctx)
	}
	ctx, err := p.Scope(ctx, req.Model())
	if err != nil {
		p.CountRejected(http.StatusNotFound)
		return nil, err
	}
	res, err := h(ctx, req)
	if err != nil {
		return nil, p.refusal(err)
	}
	return res, nil
}

// refusal counts a pipeline.Admit refusal as a request the gateway refused before routing and
// returns the *pipeline.Error to answer with; other errors pass as they are (the terminal
// handler counted its own). Apart from Handle, so its variable stays off the heap of a request
// that succeeded.
func (p *Proxy) refusal(err error) error {
	var refused *pipeline.Refused
	if errors.As(err, &refused) {
		p.CountRejected(refused.Err.Status)
		return refused.Err
	}
	return err
}

// durationHeader writes d as Duration.String does, but in ASCII ("412us", not "412µs"): a
// header value outside ASCII reaches many clients mangled (Python's decode it as Latin-1).
// time.ParseDuration reads either.
func durationHeader(d time.Duration) string {
	s := d.String()
	if u, ok := strings.CutSuffix(s, "µs"); ok {
		return u + "us"
	}
	return s
}

// reject answers a request refused before routing.
func (p *Proxy) reject(w http.ResponseWriter, e *pipeline.Error) {
	p.CountRejected(e.Status)
	e.Write(w)
}

// copyBody passes the upstream body to the client and returns the client-side write error, if
// any. Streams are flushed after every read, so each chunk leaves as soon as it arrived.
func copyBody(w http.ResponseWriter, x *pipeline.Response) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var rc *http.ResponseController
	if x.Stream {
		rc = http.NewResponseController(w)
	}
	for {
		n, err := x.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if rc != nil {
				if ferr := rc.Flush(); ferr != nil {
					return ferr
				}
			}
		}
		if err != nil {
			return nil // io.EOF, or the upstream's failure, which x recorded
		}
	}
}

func midStreamError(endpoint string, err error) string {
	return string(pipeline.ServerError(0, "upstream_stream_error", fmt.Sprintf("upstream %s failed mid-stream: %v", endpoint, err)).JSON())
}
