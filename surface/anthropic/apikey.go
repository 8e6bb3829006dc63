package anthropic

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/infergate/infergate/core/httpapi"
)

type anthropicKey struct{}

// AcceptAPIKey wraps the gateway's whole HTTP handler, outside its API key check: requests that
// look Anthropic's (x-api-key, an anthropic-version header, a Messages API path) get their error
// answers in Anthropic's shape, whoever wrote them (the auth check's 401, the router's 404), and
// WrapModels answers them in Anthropic's shape. The x-api-key header is left as the client sent
// it: the gateway's key check reads it as it reads Authorization, and it is never turned into
// another provider's header (an upstream gets a client's credentials only when configured to,
// and then as sent: see upstream.Endpoint.ForwardClientAuth).
func AcceptAPIKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") == "" && r.Header.Get("Anthropic-Version") == "" && !isMessagesPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), anthropicKey{}, true))
		ew := &errorWriter{w: w, reqID: r.Header.Get("X-Request-Id")}
		defer ew.finish()
		next.ServeHTTP(ew, r)
	})
}

func isMessagesPath(p string) bool {
	p = strings.TrimSuffix(p, "/")
	return strings.HasSuffix(p, pathMessages) || strings.HasSuffix(p, pathCountTokens)
}

// LooksAnthropic reports whether r comes from an Anthropic client: it carries anthropic-version
// or x-api-key, or AcceptAPIKey saw one of those (or a Messages API path) on its way in.
func LooksAnthropic(r *http.Request) bool {
	if v, _ := r.Context().Value(anthropicKey{}).(bool); v {
		return true
	}
	return r.Header.Get("Anthropic-Version") != "" || r.Header.Get("X-Api-Key") != ""
}

// errorWriter passes an answer through, except an error answer (a status of 400 or more) that
// is not already Anthropic's: that one is held (bounded) and rewritten in Anthropic's shape with
// its status and headers when finish is called.
type errorWriter struct {
	w      http.ResponseWriter
	reqID  string
	status int
	hold   bool
	buf    []byte
	done   bool
	flush  func() error
}

func (e *errorWriter) Header() http.Header { return e.w.Header() }

func (e *errorWriter) WriteHeader(status int) {
	if e.status != 0 || status < 200 {
		return
	}
	e.status = status
	if status >= 400 {
		e.hold = true
		return
	}
	e.w.WriteHeader(status)
}

func (e *errorWriter) Write(p []byte) (int, error) {
	if e.status == 0 {
		e.WriteHeader(http.StatusOK)
	}
	if !e.hold {
		return e.w.Write(p)
	}
	if room := maxErrorBody - len(e.buf); room > 0 {
		e.buf = append(e.buf, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (e *errorWriter) Flush() {
	if !e.hold {
		if e.flush == nil {
			e.flush = http.NewResponseController(e.w).Flush
		}
		_ = e.flush()
	}
}

func (e *errorWriter) Unwrap() http.ResponseWriter { return e.w }

// finish writes a held error answer.
func (e *errorWriter) finish() {
	if !e.hold || e.done {
		return
	}
	e.done = true
	var shape struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(e.buf, &shape) == nil && shape.Type == "error" {
		e.w.Header().Set("Content-Length", strconv.Itoa(len(e.buf)))
		e.w.WriteHeader(e.status)
		_, _ = e.w.Write(e.buf)
		return
	}
	obj, ok := httpapi.ParseBody(e.status, e.buf)
	msg := obj.Message
	if !ok {
		msg = http.StatusText(e.status)
	}
	reqID := e.reqID
	if reqID == "" {
		reqID = e.w.Header().Get("X-Request-Id")
	}
	(&apiError{status: e.status, typ: errorType(e.status), msg: msg}).write(e.w, reqID)
}
