package anthropic

import (
	"net/http"
	"strconv"
)

// apiError is an answer in Anthropic's error shape: {"type":"error","error":{"type","message"}}.
type apiError struct {
	status int
	typ    string
	msg    string
}

// invalid is Anthropic's 400 for a request it, or its translation, cannot serve.
func invalid(msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: msg}
}

func (e *apiError) Error() string { return e.typ + ": " + e.msg }

// errorType is Anthropic's error type for an HTTP status, as its API answers them: other 4xx are
// invalid_request_error; 503 is overloaded_error (Anthropic's own overload status is 529, and its
// SDKs retry both); other 5xx are api_error.
func errorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusPaymentRequired:
		return "billing_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// appendError appends the error envelope; requestID, when set, is echoed as Anthropic does.
func appendError(b []byte, typ, msg, requestID string) []byte {
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendString(b, typ)
	b = append(b, `,"message":`...)
	b = appendString(b, msg)
	b = append(b, '}')
	if requestID != "" {
		b = append(b, `,"request_id":`...)
		b = appendString(b, requestID)
	}
	return append(b, '}')
}

// write answers with the error. Headers already set on w (Retry-After, X-Infergate-*) stay.
func (e *apiError) write(w http.ResponseWriter, requestID string) {
	body := appendError(make([]byte, 0, 96+len(e.msg)), e.typ, e.msg, requestID)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if requestID != "" {
		h.Set("Request-Id", requestID)
	}
	// The SDKs retry 408, 409, 429 and 5xx unless told otherwise; a translation's refusal is the
	// same whenever it is sent again.
	if e.status == http.StatusBadRequest {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(body)
}
