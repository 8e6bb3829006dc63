package openai

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Response headers naming what served a request (Olla's X-Olla-* equivalents).
const (
	HeaderEndpoint     = "X-Infergate-Endpoint"
	HeaderModel        = "X-Infergate-Model"
	HeaderBackendType  = "X-Infergate-Backend-Type"
	HeaderResponseTime = "X-Infergate-Response-Time"
	HeaderRequestID    = "X-Request-Id"
)

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// proxy forwards one POST to the chosen upstream, failing over before the first response byte.
func (p *Proxy) proxy(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	body, err := readBody(r, p.opts.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			p.reject(w, &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
				Message: fmt.Sprintf("Request body exceeds %d bytes.", tooBig.Limit)})
			return
		}
		p.reject(w, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "Could not read the request body: " + err.Error()})
		return
	}
	rt, rerr := p.routingOf(body)
	if rerr != nil {
		p.reject(w, rerr)
		return
	}
	adm, aerr := p.admit(r.Context(), r.URL.Path, rt, body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	reqID := r.Header.Get(HeaderRequestID)
	if reqID == "" {
		reqID = newRequestID()
	}
	x, err := p.roundTrip(adm.Context, &outbound{path: r.URL.Path, rawQuery: r.URL.RawQuery, header: r.Header,
		remoteAddr: r.RemoteAddr, body: body, rt: rt, reqID: reqID, start: start})
	if err != nil {
		if adm.Done != nil {
			adm.Done(Usage{})
		}
		var gwErr *Error
		if errors.As(err, &gwErr) {
			writeError(w, gwErr)
		}
		return // otherwise the client went away: nobody to answer
	}
	x.done = adm.Done
	for k, vv := range adm.Header {
		w.Header()[k] = vv
	}

	ep := x.route.ep
	h := w.Header()
	for k, vv := range x.res.Header {
		h[k] = vv // the upstream response is ours alone: share its values
	}
	removeHopHeaders(h, x.res.Header)
	// The gateway's own headers share one backing array (keys already canonical).
	vals := []string{reqID, ep.cfg.Name, x.route.upstream, ep.cfg.Type, durationHeader(time.Since(start))}
	h[HeaderRequestID] = vals[0:1:1]
	h[HeaderEndpoint] = vals[1:2:2]
	h[HeaderModel] = vals[2:3:3]
	h[HeaderBackendType] = vals[3:4:4]
	h[HeaderResponseTime] = vals[4:5:5]
	if x.stream || rt.Stream {
		h.Del("Content-Length")
	}
	w.WriteHeader(x.res.StatusCode)

	writeErr := copyBody(w, x)
	x.finish(writeErr)
	if x.upstreamFailed() && writeErr == nil {
		ep.warn.Warn(warnMidResponse, warnMidResponse, "model", x.route.public, "request_id", reqID, "err", x.readErr)
		if x.stream {
			// Tell an SSE client in-band (openai-go surfaces an "error" event as the stream's
			// error), then cut the connection so any client sees a truncated response, not a
			// clean end it could mistake for a complete answer.
			_, _ = io.WriteString(w, "\n\ndata: "+midStreamError(ep.cfg.Name, x.readErr)+"\n\n")
			_ = http.NewResponseController(w).Flush()
		}
		panic(http.ErrAbortHandler)
	}
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

// routingOf reads the routing fields of a request body, or says why the body cannot be routed.
func (p *Proxy) routingOf(body []byte) (routing, *Error) {
	rt, err := scanRouting(body)
	if err != nil {
		return rt, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Code: "invalid_json",
			Message: "We could not parse the JSON body of your request: " + err.Error()}
	}
	if rt.Model == "" {
		return rt, &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: "model", Code: "missing_required_parameter",
			Message: "you must provide a model parameter"}
	}
	return rt, nil
}

// reject answers a request refused before routing.
func (p *Proxy) reject(w http.ResponseWriter, e *Error) {
	p.m.requests.WithLabelValues("", "", codeLabel(e.Status)).Inc()
	writeError(w, e)
}

// copyBody passes the upstream body to the client and returns the client-side write error, if
// any. Streams are flushed after every read, so each chunk leaves as soon as it arrived.
func copyBody(w http.ResponseWriter, x *exchange) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var rc *http.ResponseController
	if x.stream {
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

// warnMidResponse is logged, per endpoint, once per interval however many responses it cuts
// short: the lines name the first request of each interval and count the others.
const warnMidResponse = "upstream failed mid-response"

func midStreamError(endpoint string, err error) string {
	b, _ := json.Marshal(newErrorBody(&Error{Type: "server_error", Code: "upstream_stream_error",
		Message: fmt.Sprintf("upstream %s failed mid-stream: %v", endpoint, err)}))
	return string(b)
}

// replaceModel returns body with the model's string value replaced by name; everything else stays
// byte for byte (a copy: the client's body is kept for a retry on another endpoint).
func replaceModel(body []byte, rt routing, name string) []byte {
	q, _ := json.Marshal(name)
	out := make([]byte, 0, len(body)-(rt.ModelEnd-rt.ModelStart)+len(q))
	out = append(out, body[:rt.ModelStart]...)
	out = append(out, q...)
	return append(out, body[rt.ModelEnd:]...)
}

// removeHopHeaders deletes from h the connection-scoped headers, including those src's
// Connection header names.
func removeHopHeaders(h, src http.Header) {
	for _, f := range src["Connection"] {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		delete(h, k) // already canonical: no need for Del's canonicalization
	}
}

// isHopHeader reports whether a canonical header name is one of hopHeaders.
func isHopHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// readBody reads the whole request body, in one allocation when the length is declared.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.ContentLength > 0 {
		// The server's body reader stops at the declared length, which is within the limit.
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
}

// newRequestID is 128 random bits in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var s [32]byte
	hex.Encode(s[:], b[:])
	return string(s[:])
}
