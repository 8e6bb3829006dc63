package openai

import (
	"encoding/json"
	"net/http"
	"time"
)

// What other OpenAI-speaking surfaces of the gateway (the batch API) share with the proxy.

// Write answers an HTTP request with the error: its status, its headers and OpenAI's error object.
func (e *Error) Write(w http.ResponseWriter) { writeError(w, e) }

// JSON returns OpenAI's error object for e, {"error":{"message":...,"type":...,"param":...,"code":...}},
// as a response body carries it.
func (e *Error) JSON() []byte {
	b, err := json.Marshal(newErrorBody(e))
	if err != nil { // a struct of strings always encodes
		panic(err)
	}
	return b
}

// WriteJSON answers with status and v encoded as JSON (a 500 error object if v does not encode).
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// RetryAfter reads a Retry-After header given in seconds; 0 when absent or a date.
func RetryAfter(h http.Header) time.Duration { return retryAfter(h) }

// ScanModel reads a request body's top-level "model" and "stream" without decoding anything
// else, rejecting malformed JSON, as the proxy does when it routes.
func ScanModel(body []byte) (model string, stream bool, err error) {
	r, err := scanRouting(body)
	return r.Model, r.Stream, err
}

// NewRequestID returns a fresh request id (32 random hex digits), as X-Request-Id carries.
func NewRequestID() string { return newRequestID() }

// Truncate shortens s to at most n bytes, without cutting a character, marking the cut with "...".
func Truncate(s string, n int) string { return truncate(s, n) }
