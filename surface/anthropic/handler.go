package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/upstream"
)

// Options configures a Handler.
type Options struct {
	// Chat is the gateway's own POST /v1/chat/completions handler: translated requests are
	// served by it in-process, so every stage of the gateway applies to them. Required.
	Chat http.Handler
	// Native, when set, names the models whose upstreams serve /v1/messages themselves (vLLM
	// 0.12 and later): their Messages requests go to NativeHandler unchanged. count_tokens is
	// always answered here (CountTokens is exact where the model has a tokenizer).
	Native func(model string) bool
	// NativeHandler serves a native model's POST /v1/messages (the request's path is rewritten to
	// that): the gateway's upstream proxy for that path. Its OpenAI-shaped errors (the gateway's
	// own) are translated; an upstream's Anthropic-shaped ones pass as they are.
	NativeHandler http.Handler
	// CountTokens, when set, counts a count_tokens request's prompt exactly: model and the
	// request as an OpenAI chat completions body (no max_tokens). It returns an error wrapping
	// ErrNoTokenizer when the model has no tokenizer (the estimate is answered instead), a
	// *pipeline.Error for the gateway's own answers (an unknown model: 404), or another error
	// (a 500).
	CountTokens func(ctx context.Context, model string, openAIChatBody []byte) (tokens int, err error)
	// MaxBodyBytes limits a request body; default 32 MiB, Anthropic's own limit.
	MaxBodyBytes int64
	// Metrics, when set, counts requests (NewMetrics; register its Collectors).
	Metrics *Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// ErrNoTokenizer is what CountTokens' error wraps when the model has no tokenizer.
var ErrNoTokenizer = errors.New("the model has no tokenizer")

// Handler serves Anthropic's Messages API: POST .../v1/messages and POST
// .../v1/messages/count_tokens, matched on the path's suffix, so it can be mounted under any
// prefix (/v1/messages, /olla/anthropic/v1/messages) without stripping it.
type Handler struct {
	opts Options
	m    *Metrics
	log  *slog.Logger
}

// New returns a Handler. It panics without Options.Chat, or with Native but no NativeHandler:
// wiring mistakes, not run-time conditions.
func New(opts Options) *Handler {
	if opts.Chat == nil {
		panic("anthropic: Options.Chat is required")
	}
	if opts.Native != nil && opts.NativeHandler == nil {
		panic("anthropic: Options.Native needs Options.NativeHandler")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 32 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := opts.Metrics
	if m == nil {
		m = NewMetrics() // counted but never exposed: keeps every path free of nil checks
	}
	return &Handler{opts: opts, m: m, log: opts.Logger}
}

const (
	pathMessages    = "/v1/messages"
	pathCountTokens = "/v1/messages/count_tokens"
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	reqID := r.Header.Get("X-Request-Id")
	if reqID == "" {
		reqID = pipeline.NewRequestID()
	}
	p := strings.TrimSuffix(r.URL.Path, "/")
	count := strings.HasSuffix(p, pathCountTokens)
	if !count && !strings.HasSuffix(p, pathMessages) {
		(&apiError{status: http.StatusNotFound, typ: "not_found_error", msg: fmt.Sprintf("Not found: %s %s", r.Method, r.URL.Path)}).write(w, reqID)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		(&apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", msg: "Method " + r.Method + " is not allowed; use POST."}).write(w, reqID)
		return
	}
	mode := modeTranslate
	if count {
		mode = modeCount
	}
	// The body is read into a pooled buffer, released once translated (the translation keeps
	// none of it); a body passed on as it is (native) is not released.
	in := getBuffer()
	body, err := readBody(r, h.opts.MaxBodyBytes, in)
	if err != nil {
		in.release()
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			h.refuse(w, mode, reqID, &apiError{status: http.StatusRequestEntityTooLarge, typ: "request_too_large",
				msg: fmt.Sprintf("Request exceeds the maximum allowed number of bytes (%d).", tooBig.Limit)})
			return
		}
		h.refuse(w, mode, reqID, invalid("Could not read the request body: "+err.Error()))
		return
	}
	if count {
		h.countTokens(w, r, body, in, reqID)
		return
	}
	if h.opts.Native != nil {
		if rt, err := pipeline.Scan(body); err == nil && rt.Model != "" && h.opts.Native(rt.Model) {
			if !h.native(w, r, body, reqID, rt.Stream, start) {
				return
			}
			// The upstream has no /v1/messages: translate, as for any other model.
		}
	}
	t, aerr := translate(body, false)
	in.release()
	if aerr != nil {
		h.m.translationErrors.WithLabelValues("request").Inc()
		h.refuse(w, mode, reqID, aerr)
		return
	}
	out := getBuffer() // for the answer held
	defer out.release()
	// A map for 8 headers is one group of slots; 16 would take a table and a directory.
	cw := &chatWriter{w: w, h: make(http.Header, 8), stream: t.stream, id: "msg_" + reqID, model: t.model, estimate: t.estimate, reqID: reqID, pool: out}
	aborted := httpapi.ServeInProcess(h.opts.Chat, cw, chatRequest(r, t.body, reqID))
	if aborted && !cw.sent && r.Context().Err() != nil {
		// The client went away before any answer: end unanswered (see the chat handler).
		h.m.requests.WithLabelValues(modeTranslate, "canceled").Inc()
		panic(http.ErrAbortHandler)
	}
	cw.finish(aborted)
	if cw.buf != nil {
		out.b = cw.buf // grown past the pooled buffer's size: pool the larger one
	}
	if cw.out == outcomeTranslateError {
		h.m.translationErrors.WithLabelValues("response").Inc()
	} else if cw.out == outcomeStreamError && cw.st != nil && !aborted {
		h.m.translationErrors.WithLabelValues("stream").Inc()
	}
	h.m.requests.WithLabelValues(modeTranslate, string(cw.out)).Inc()
	h.m.message(modeTranslate, cw.out, t.stream, start)
	if aborted && cw.sent {
		// The answer went out partly: end the connection as the chat handler would have, so no
		// client mistakes the cut for a complete answer (the error event went first).
		panic(http.ErrAbortHandler)
	}
}

// Headers that never reach the chat handler: Anthropic's protocol headers, the client's
// credentials (the gateway's key check has read them; an Anthropic client's credential is never
// sent to an OpenAI upstream, even one that forwards its clients' own), Accept-Encoding (the
// answer must come uncompressed to be translated) and the body's length.
func dropHeader(k string) bool {
	switch k {
	case "Accept-Encoding", "Content-Length", "Content-Type":
		return true
	}
	if upstream.IsCredentialHeader(k) {
		return true
	}
	return strings.HasPrefix(k, "Anthropic-")
}

// chatReq is a chat completions request with what it points to, allocated at once.
type chatReq struct {
	r    http.Request
	u    url.URL
	body bodyReader
	vals [2]string // the values of the headers set
}

// bodyReader is io.NopCloser(bytes.NewReader(body)) in one piece: Read, WriteTo and Close.
type bodyReader struct{ r bytes.Reader }

func (b *bodyReader) Read(p []byte) (int, error)         { return b.r.Read(p) }
func (b *bodyReader) WriteTo(w io.Writer) (int64, error) { return b.r.WriteTo(w) }
func (*bodyReader) Close() error                         { return nil }

// chatRequest is the chat completions request for a translated body: the client's context
// (its principal, its cancellation), its headers less dropHeader's, its request id.
func chatRequest(r *http.Request, body []byte, reqID string) *http.Request {
	c := &chatReq{r: *r} // a shallow copy, as r.WithContext(r.Context()) makes
	out := &c.r
	c.u = *r.URL
	c.u.Path, c.u.RawPath, c.u.RawQuery = "/v1/chat/completions", "", ""
	out.URL = &c.u
	out.RequestURI = c.u.Path
	out.Method = http.MethodPost
	out.Header = make(http.Header, len(r.Header)+2)
	for k, vv := range r.Header {
		if !dropHeader(k) {
			out.Header[k] = vv
		}
	}
	// The keys are canonical: set as Header.Set would, with the values' slices in c. The client's
	// x-api-key is not carried over as Authorization: an Anthropic credential never becomes an
	// OpenAI one.
	c.vals[0], c.vals[1] = "application/json", reqID
	out.Header["Content-Type"] = c.vals[0:1:1]
	out.Header["X-Request-Id"] = c.vals[1:2:2]
	c.body.r.Reset(body)
	out.Body = &c.body
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	out.GetBody = nil
	out.Form, out.PostForm, out.MultipartForm = nil, nil, nil
	return out
}

// native passes a request unchanged to the native handler, at /v1/messages. It reports
// fellBack, having answered nothing, when the upstream does not serve that path (vLLM before
// 0.12 answers 404 {"detail":"Not Found"}): the caller translates the request instead.
func (h *Handler) native(w http.ResponseWriter, r *http.Request, body []byte, reqID string, stream bool, start time.Time) (fellBack bool) {
	out := r.WithContext(r.Context())
	u := *r.URL
	u.Path, u.RawPath = pathMessages, ""
	out.URL = &u
	out.RequestURI = u.RequestURI()
	out.Header = r.Header.Clone() // x-api-key included: the upstream decides whether it goes on
	out.Header.Set("X-Request-Id", reqID)
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	out.GetBody = nil
	// The names already set on w, to tell those a failed attempt adds: a handful, held in an
	// array on the stack (no map to build for every request).
	var names [8]string
	had := names[:0]
	for k := range w.Header() {
		had = append(had, k)
	}
	ew := &errorWriter{w: w, reqID: reqID}
	defer func() { // also when the native handler aborts (panics) mid-answer
		if !fellBack {
			ew.finish()
			h.m.requests.WithLabelValues(modeNative, string(outcomeOf(ew.status))).Inc()
			h.m.message(modeNative, outcomeOf(ew.status), stream, start)
		}
	}()
	h.opts.NativeHandler.ServeHTTP(ew, out)
	if ew.hold && !ew.done && noMessagesRoute(ew.status, ew.buf) {
		for k := range w.Header() { // what the attempt set (X-Infergate-Endpoint, ...) is not the answer's
			if !slices.Contains(had, k) {
				delete(w.Header(), k)
			}
		}
		return true
	}
	return false
}

// noMessagesRoute reports whether an error answer to /v1/messages says the upstream has no such
// route (a 404, 405 or 501 without an error object: FastAPI's {"detail":"Not Found"}, or plain
// text), rather than refusing this request (an unknown model, a bad body), which it answers with
// an OpenAI or Anthropic error object.
func noMessagesRoute(status int, body []byte) bool {
	if status != http.StatusNotFound && status != http.StatusMethodNotAllowed && status != http.StatusNotImplemented {
		return false
	}
	var shape struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	return json.Unmarshal(body, &shape) != nil || shape.Type != "error" && len(shape.Error) == 0
}

// countTokens answers count_tokens: the tokenizer's count when CountTokens has one for the
// model, else the estimate (estimateTokens) over the translated request.
func (h *Handler) countTokens(w http.ResponseWriter, r *http.Request, body []byte, in *buffer, reqID string) {
	t, aerr := translate(body, true)
	in.release()
	if aerr != nil {
		h.m.translationErrors.WithLabelValues("request").Inc()
		h.refuse(w, modeCount, reqID, aerr)
		return
	}
	n := t.estimate
	if h.opts.CountTokens != nil {
		c, err := h.opts.CountTokens(r.Context(), t.model, t.body)
		var gwErr *pipeline.Error
		switch {
		case err == nil:
			n = c
		case errors.Is(err, ErrNoTokenizer):
		case errors.As(err, &gwErr):
			for k, vv := range gwErr.Header {
				w.Header()[k] = vv
			}
			h.refuse(w, modeCount, reqID, &apiError{status: gwErr.Status, typ: errorType(gwErr.Status), msg: gwErr.Message})
			return
		case r.Context().Err() != nil:
			h.m.requests.WithLabelValues(modeCount, "canceled").Inc()
			return
		default:
			h.log.Warn("count_tokens failed", "model", t.model, "err", err)
			h.refuse(w, modeCount, reqID, &apiError{status: http.StatusInternalServerError, typ: "api_error", msg: "Counting the tokens failed: " + err.Error()})
			return
		}
	}
	b := append([]byte(`{"input_tokens":`), strconv.Itoa(n)...)
	b = append(b, "}"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", reqID)
	w.Header().Set("X-Request-Id", reqID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	h.m.requests.WithLabelValues(modeCount, string(outcomeOK)).Inc()
}

func (h *Handler) refuse(w http.ResponseWriter, mode, reqID string, e *apiError) {
	w.Header().Set("X-Request-Id", reqID)
	e.write(w, reqID)
	h.m.requests.WithLabelValues(mode, string(outcomeOf(e.status))).Inc()
}

// buffer is a byte buffer used only while a request is served (its body read, the answer held,
// the answer's translation), pooled: these are most of a request's garbage.
type buffer struct{ b []byte }

var buffers = sync.Pool{New: func() any { return new(buffer) }}

// maxPooledBuffer bounds the buffers kept: a large body's is left to the collector.
const maxPooledBuffer = 64 << 10

func getBuffer() *buffer { return buffers.Get().(*buffer) }

// grow returns b's buffer, empty, with room for n bytes.
func (b *buffer) grow(n int) []byte {
	if cap(b.b) < n {
		b.b = make([]byte, 0, max(n, 4<<10))
	}
	return b.b[:0]
}

// release pools b; nothing of its bytes may be used after.
func (b *buffer) release() {
	if cap(b.b) > maxPooledBuffer {
		b.b = nil
	}
	b.b = b.b[:0]
	buffers.Put(b)
}

// readBody is pipeline.ReadBody reading into b when the body's length is known.
func readBody(r *http.Request, limit int64, b *buffer) ([]byte, error) {
	if r.ContentLength <= 0 || r.ContentLength > limit {
		return httpapi.ReadBody(r, limit)
	}
	body := b.grow(int(r.ContentLength))[:r.ContentLength]
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return nil, err
	}
	b.b = body
	return body, nil
}
