package httpapi

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// WriteJSON answers with status and v encoded as JSON (a 500 error object if v does not encode).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// CeilSeconds is d in whole seconds for Retry-After: rounded up (waiting less would be refused
// again), at least 1.
func CeilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return max(1, s)
}

// RetryAfter reads a Retry-After header given in seconds; 0 when absent or a date.
func RetryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After")))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// Truncate shortens s to at most n bytes, without cutting a character, marking the cut with
// "...": for upstream text quoted in an error message.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) { // do not cut a character in two
		s = s[:len(s)-1]
	}
	return s + "..."
}

// ReadBody reads an HTTP request's whole body, at most limit bytes (an *http.MaxBytesError
// beyond), in one allocation when the length is declared: the server's body reader stops at the
// declared length, which is checked against the limit first.
func ReadBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if r.ContentLength > 0 {
		b := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
}

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1), in canonical form.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// RemoveHopHeaders deletes from h the connection-scoped headers, including those src's
// Connection header names: what a proxy passing src's headers on must not pass.
func RemoveHopHeaders(h, src http.Header) {
	for _, f := range src["Connection"] {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		delete(h, k) // already canonical: no need for Del's canonicalization
	}
}

// IsHopHeader reports whether a canonical header name is a connection-scoped one.
func IsHopHeader(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// HeaderRequestID carries a request's id: the client's, passed upstream, or one the gateway made.
const HeaderRequestID = "X-Request-Id"

// WriteRawJSON answers with body, JSON already encoded, and its length.
func WriteRawJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// CopyForNewBody copies an answer's headers from src to dst (sharing the values), less those
// that describe its body: for a surface that answers with a body of its own, translated from
// the one src came with (X-Request-Id, X-Infergate-*, rate limits and Retry-After pass).
func CopyForNewBody(dst, src http.Header) {
	for k, vv := range src {
		switch k {
		case "Content-Length", "Content-Type", "Content-Encoding", "Transfer-Encoding", "Etag", "Last-Modified":
			continue
		}
		dst[k] = vv
	}
}

// ServeInProcess runs h for a request the gateway makes of itself (a surface calling the chat
// handler in-process). aborted is true when h gave up mid-answer by panicking with
// http.ErrAbortHandler (its upstream failed), which the caller then answers for; any other
// panic goes on up.
func ServeInProcess(h http.Handler, w http.ResponseWriter, r *http.Request) (aborted bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler { //nolint:errorlint // the sentinel is panicked as is
				panic(v)
			}
			aborted = true
		}
	}()
	h.ServeHTTP(w, r)
	return false
}
