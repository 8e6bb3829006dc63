package responses

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/infergate/infergate/internal/jsonwire"
	"github.com/infergate/infergate/lib/openaiwire"
)

// apiError is an answer in OpenAI's error shape with its status; a bare
// *openaiwire.ResponsesError is a 400.
type apiError struct {
	status int
	openaiwire.ResponsesError
}

func (e *apiError) Error() string { return e.ResponsesError.Error() }

func notFound(id string) *apiError {
	return &apiError{status: http.StatusNotFound, ResponsesError: openaiwire.ResponsesError{
		Message: fmt.Sprintf("Response with id '%s' not found.", id), Type: "invalid_request_error"}}
}

func notFoundPath(r *http.Request) *apiError {
	return &apiError{status: http.StatusNotFound, ResponsesError: openaiwire.ResponsesError{
		Message: fmt.Sprintf("Not found: %s %s", r.Method, r.URL.Path), Type: "invalid_request_error"}}
}

// previousNotFound is OpenAI's answer to a previous_response_id it cannot continue: unknown,
// expired, another key's, or made with store false.
func previousNotFound(id string) *openaiwire.ResponsesError {
	return &openaiwire.ResponsesError{Message: fmt.Sprintf("Previous response with id '%s' not found.", id),
		Type: "invalid_request_error", Param: "previous_response_id", Code: "previous_response_not_found"}
}

func storeDown(err error) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, ResponsesError: openaiwire.ResponsesError{
		Message: "The gateway's response store is unavailable; try again.", Type: "server_error"}}
}

func badUpstream(msg string) *apiError {
	return &apiError{status: http.StatusBadGateway, ResponsesError: openaiwire.ResponsesError{Message: msg, Type: "server_error"}}
}

func tooLarge(limit int64) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, ResponsesError: openaiwire.ResponsesError{
		Message: fmt.Sprintf("The request body is over %d bytes.", limit), Type: "invalid_request_error"}}
}

// writeError answers err: an *apiError with its status, a *openaiwire.ResponsesError as a 400,
// anything else as a 500 (a bug: never a client's fault).
func writeError(w http.ResponseWriter, err error) {
	var (
		ae *apiError
		re *openaiwire.ResponsesError
	)
	switch {
	case errors.As(err, &ae):
		writeErrorStatus(w, ae.status, &ae.ResponsesError)
	case errors.As(err, &re):
		writeErrorStatus(w, http.StatusBadRequest, re)
	default:
		writeErrorStatus(w, http.StatusInternalServerError, &openaiwire.ResponsesError{Message: "The gateway failed: " + err.Error(), Type: "server_error"})
	}
}

func writeErrorStatus(w http.ResponseWriter, status int, e *openaiwire.ResponsesError) {
	body := e.AppendJSON(make([]byte, 0, 128+len(e.Message)))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	if status == http.StatusBadRequest {
		// The SDKs retry 408, 409, 429 and 5xx unless told otherwise.
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func quote(s string) []byte { return jsonwire.AppendString(nil, s, jsonwire.EncodingJSON) }
