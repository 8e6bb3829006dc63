package pipeline

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/infergate/infergate/core/httpapi"
)

// Error is a request the gateway answers itself, before or instead of an upstream: an HTTP status
// and the fields of OpenAI's error object. Each surface turns it into its protocol's error (the
// OpenAI HTTP API writes it as is; Connect and gRPC map the status to a code).
type Error struct {
	Status  int
	Type    string // invalid_request_error, server_error, ...
	Param   string // the request field at fault, if any
	Code    string // model_not_found, no_healthy_upstream, ...
	Message string
	// Header is added to the response (Retry-After, X-RateLimit-* on a refusal).
	Header http.Header
}

func (e *Error) Error() string { return e.Message }

// JSON is OpenAI's error object for e, {"error":{"message":...,"type":...,"param":...,"code":...}},
// as a response body carries it.
func (e *Error) JSON() []byte {
	b, err := json.Marshal(e.object())
	if err != nil { // a struct of strings always encodes
		panic(err)
	}
	return b
}

// Write answers an HTTP request with the error: its status, its headers and OpenAI's error object.
func (e *Error) Write(w http.ResponseWriter) {
	for k, vv := range e.Header {
		w.Header()[k] = vv
	}
	httpapi.WriteJSON(w, e.Status, e.object())
}

// errorObject is OpenAI's error object.
type errorObject struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func (e *Error) object() errorObject {
	var b errorObject
	b.Error.Message, b.Error.Type = e.Message, e.Type
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	if e.Code != "" {
		b.Error.Code = &e.Code
	}
	return b
}

// The gateway's errors, one constructor each, so every surface words them alike.

// InvalidRequest is a 400 for a request the gateway cannot serve as sent.
func InvalidRequest(param, code, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code, Message: msg}
}

// InvalidJSON is the 400 for a body that is not a JSON object.
func InvalidJSON(err error) *Error {
	return InvalidRequest("", "invalid_json", "We could not parse the JSON body of your request: "+err.Error())
}

// MissingModel is the 400 for a body that names no model.
func MissingModel() *Error {
	return InvalidRequest("model", "missing_required_parameter", "you must provide a model parameter")
}

// TooLarge is the 413 for a body over limit bytes.
func TooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
		Message: fmt.Sprintf("Request body exceeds %d bytes.", limit)}
}

// NotFound is a 404 for something the request names (param, when a field of it) that does not
// exist: a URL, a model, a batch or file.
func NotFound(param, code, msg string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: param, Code: code, Message: msg}
}

// ModelNotFound is the 404 for a model nothing serves, or that the caller may not see.
func ModelNotFound(model string) *Error {
	return NotFound("model", "model_not_found", fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model))
}

// RateLimited is the 429 for a request over a rate limit: typ names the budget (requests,
// tokens), as OpenAI's type does; header carries Retry-After and X-RateLimit-*.
func RateLimited(typ, msg string, header http.Header) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: typ, Code: "rate_limit_exceeded", Message: msg, Header: header}
}

// Overloaded is the 429 for a request shed because the gateway is at capacity, with Retry-After
// (whole seconds, rounded up, at least 1).
func Overloaded(retryAfter time.Duration, msg string) *Error {
	return withRetryAfter(ServerError(http.StatusTooManyRequests, "overloaded", msg), retryAfter)
}

// ServerError is a failure of the gateway or of its upstreams, type server_error: a 5xx status,
// or the 429 and 499 of Overloaded and Canceled.
func ServerError(status int, code, msg string) *Error {
	return &Error{Status: status, Type: "server_error", Code: code, Message: msg}
}

// Unavailable is a 503 that says when to retry: Retry-After in whole seconds, rounded up, at
// least 1.
func Unavailable(code string, retryAfter time.Duration, msg string) *Error {
	return withRetryAfter(ServerError(http.StatusServiceUnavailable, code, msg), retryAfter)
}

// StatusClientClosed is nginx's 499, "client closed request": the status of Canceled, which
// metrics count and no client is sent.
const StatusClientClosed = 499

// Canceled is the 499 (StatusClientClosed) for a request whose caller went away before it was
// answered: metrics and logs count it, and the HTTP surfaces end the exchange unanswered rather
// than send it. err is the context's error.
func Canceled(err error) *Error {
	return ServerError(StatusClientClosed, "", err.Error())
}

func withRetryAfter(e *Error, retryAfter time.Duration) *Error {
	e.Header = http.Header{"Retry-After": {strconv.FormatInt(httpapi.CeilSeconds(retryAfter), 10)}}
	return e
}
