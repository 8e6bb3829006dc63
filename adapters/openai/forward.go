package openai

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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
			p.reject(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large",
				fmt.Sprintf("Request body exceeds %d bytes.", tooBig.Limit))
			return
		}
		p.reject(w, http.StatusBadRequest, "invalid_request_error", "", "", "Could not read the request body: "+err.Error())
		return
	}
	rt, err := scanRouting(body)
	if err != nil {
		p.reject(w, http.StatusBadRequest, "invalid_request_error", "", "invalid_json",
			"We could not parse the JSON body of your request: "+err.Error())
		return
	}
	if rt.Model == "" {
		p.reject(w, http.StatusBadRequest, "invalid_request_error", "model", "missing_required_parameter",
			"you must provide a model parameter")
		return
	}
	routes := p.table.Load().routes[rt.Model]
	if len(routes) == 0 {
		p.m.requests.WithLabelValues("", "", "404").Inc()
		writeModelNotFound(w, rt.Model)
		return
	}

	reqID := r.Header.Get(HeaderRequestID)
	if reqID == "" {
		reqID = newRequestID()
	}
	var tried []*endpoint
	var lastErr error
	for {
		route := p.pick(routes, tried)
		if route == nil {
			break
		}
		tried = append(tried, route.ep)
		last := len(tried) == len(routes) || p.pick(routes, tried) == nil
		done, err := p.attempt(w, r, route, rt, body, reqID, start, last)
		if done {
			return
		}
		lastErr = err
		if r.Context().Err() != nil {
			p.m.requests.WithLabelValues(rt.Model, route.ep.cfg.Name, "499").Inc()
			return
		}
	}
	if lastErr == nil {
		p.m.requests.WithLabelValues(rt.Model, "", "503").Inc()
		writeError(w, http.StatusServiceUnavailable, "server_error", "", "no_healthy_upstream",
			fmt.Sprintf("No healthy endpoint serves model `%s` right now.", rt.Model))
		return
	}
	p.m.requests.WithLabelValues(rt.Model, "", "502").Inc()
	writeError(w, http.StatusBadGateway, "server_error", "", "upstream_unreachable",
		fmt.Sprintf("Every endpoint serving model `%s` failed: %v", rt.Model, lastErr))
}

// reject answers a request refused before routing.
func (p *Proxy) reject(w http.ResponseWriter, status int, typ, param, code, msg string) {
	p.m.requests.WithLabelValues("", "", codeLabel(status)).Inc()
	writeError(w, status, typ, param, code, msg)
}

// attempt sends the request to one endpoint. It returns done=true once it has answered the client
// (the response, successful or not, is then this endpoint's); otherwise err says why the endpoint
// failed, and nothing has been written, so the caller may try the next one. A 5xx is passed
// through rather than retried when last is set.
func (p *Proxy) attempt(w http.ResponseWriter, r *http.Request, route *route, rt routing, body []byte, reqID string, start time.Time, last bool) (done bool, err error) {
	ep := route.ep
	ep.outstanding.Add(1)
	route.inflight.Inc()
	defer func() {
		ep.outstanding.Add(-1)
		route.inflight.Dec()
	}()

	if route.upstream != route.public {
		body = replaceModel(body, rt, route.upstream)
	}
	u := *ep.cfg.base
	u.Path = ep.cfg.base.Path + r.URL.Path
	u.RawQuery = r.URL.RawQuery
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	copyHeader(req.Header, r.Header)
	req.Header.Del("Content-Length")
	req.Header.Set(HeaderRequestID, reqID)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header.Values("X-Forwarded-For"); len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		req.Header.Set("X-Forwarded-For", ip)
	}
	if req.Header.Get("Accept-Encoding") == "" {
		// Without this Go's transport would leave the header off anyway (DisableCompression), but
		// an explicit identity keeps upstreams from compressing what the client cannot read.
		req.Header.Set("Accept-Encoding", "identity")
	}
	ep.setHeaders(req.Header)

	res, err := ep.client.Do(req)
	if err != nil {
		if r.Context().Err() == nil {
			ep.failed(err)
		}
		return false, fmt.Errorf("%s: %w", ep.cfg.Name, err)
	}
	defer res.Body.Close()
	if res.StatusCode >= 500 && !last {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		return false, fmt.Errorf("%s: HTTP %d", ep.cfg.Name, res.StatusCode)
	}

	h := w.Header()
	copyHeader(h, res.Header)
	h.Set(HeaderRequestID, reqID)
	h.Set(HeaderEndpoint, ep.cfg.Name)
	h.Set(HeaderModel, route.upstream)
	h.Set(HeaderBackendType, ep.cfg.Type)
	h.Set(HeaderResponseTime, time.Since(start).String())
	streaming := rt.Stream || strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream")
	if streaming {
		h.Del("Content-Length")
	}
	w.WriteHeader(res.StatusCode)

	status := codeLabel(res.StatusCode)
	copyErr := p.copyBody(w, res.Body, route, start, streaming && res.StatusCode == http.StatusOK)
	route.latency.Observe(time.Since(start).Seconds())
	switch {
	case copyErr == nil:
	case r.Context().Err() != nil:
		status = "499"
	default:
		status = "0"
	}
	p.m.requests.WithLabelValues(route.public, ep.cfg.Name, status).Inc()
	if copyErr != nil && r.Context().Err() == nil {
		ep.log.Warn("upstream failed mid-response", "model", route.public, "request_id", reqID, "err", copyErr)
		if streaming {
			// Tell an SSE client in-band (openai-go surfaces an "error" event as the stream's
			// error), then cut the connection so any client sees a truncated response, not a
			// clean end it could mistake for a complete answer.
			_, _ = io.WriteString(w, "\n\ndata: "+midStreamError(ep.cfg.Name, copyErr)+"\n\n")
			_ = http.NewResponseController(w).Flush()
		}
		panic(http.ErrAbortHandler)
	}
	return true, nil
}

// copyBody copies the upstream response to the client. Streams are flushed after every read, so
// each chunk leaves as soon as it arrived; the first one marks time to first token.
func (p *Proxy) copyBody(w http.ResponseWriter, body io.Reader, route *route, start time.Time, stream bool) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	if !stream {
		_, err := io.CopyBuffer(writerOnly{w}, body, buf)
		return err
	}
	rc := http.NewResponseController(w)
	first := true
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil {
				return ferr
			}
			if first {
				route.ttft.Observe(time.Since(start).Seconds())
				first = false
			}
			p.countUsage(route, buf[:n])
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

var usageKey = []byte(`"usage":{`)

// countUsage adds the tokens of a stream's usage chunk (sent when the client asks for
// stream_options.include_usage). Only a chunk containing a usage object is decoded, and only its
// event line: one small decode per stream. A usage event split across two reads is missed.
func (p *Proxy) countUsage(route *route, chunk []byte) {
	i := bytes.Index(chunk, usageKey)
	if i < 0 {
		return
	}
	lineStart := bytes.LastIndexByte(chunk[:i], '\n') + 1
	line := chunk[lineStart:]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	var ev struct {
		Usage struct {
			PromptTokens     float64 `json:"prompt_tokens"`
			CompletionTokens float64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if ev.Usage.PromptTokens > 0 {
		p.m.tokens.WithLabelValues(route.public, route.ep.cfg.Name, "in").Add(ev.Usage.PromptTokens)
	}
	if ev.Usage.CompletionTokens > 0 {
		p.m.tokens.WithLabelValues(route.public, route.ep.cfg.Name, "out").Add(ev.Usage.CompletionTokens)
	}
}

func midStreamError(endpoint string, err error) string {
	b, _ := json.Marshal(newErrorBody("server_error", "", "upstream_stream_error",
		fmt.Sprintf("upstream %s failed mid-stream: %v", endpoint, err)))
	return string(b)
}

// writerOnly hides the ResponseWriter's ReadFrom, which would otherwise read into its own buffer
// and ignore ours.
type writerOnly struct{ io.Writer }

// replaceModel returns body with the model's string value replaced by name; everything else stays
// byte for byte (a copy: the client's body is kept for a retry on another endpoint).
func replaceModel(body []byte, rt routing, name string) []byte {
	q, _ := json.Marshal(name)
	out := make([]byte, 0, len(body)-(rt.ModelEnd-rt.ModelStart)+len(q))
	out = append(out, body[:rt.ModelStart]...)
	out = append(out, q...)
	return append(out, body[rt.ModelEnd:]...)
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = append(dst[k][:0:0], vv...)
	}
	for _, k := range hopHeaders {
		dst.Del(k)
	}
	// Headers named in Connection are hop-by-hop too.
	for _, f := range src.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			dst.Del(strings.TrimSpace(k))
		}
	}
}

// readBody reads the whole request body, in one allocation when the length is declared.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	rd := http.MaxBytesReader(nil, r.Body, limit)
	if r.ContentLength > 0 {
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(rd, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(rd)
}

// newRequestID is 128 random bits in hex.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
