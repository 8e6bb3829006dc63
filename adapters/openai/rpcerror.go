package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/adapters/pipeline"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rpcError is a failed OpenAIService call: a status code and OpenAI's error object, whose message
// is the status message and which travels as the status's detail. grpc-go reads it through
// GRPCStatus; the Connect handlers convert it with connectError.
type rpcError struct {
	code connect.Code
	obj  *openaiv1.Error
	// header is sent along: as response headers to Connect and gRPC-Web clients, as trailers to
	// gRPC clients (the guard's Retry-After and X-RateLimit-*).
	header http.Header
}

func (e *rpcError) Error() string { return e.obj.GetMessage() }

// GRPCStatus is the status grpc-go sends for e.
func (e *rpcError) GRPCStatus() *status.Status {
	st := status.New(codes.Code(e.code), e.obj.GetMessage())
	if withDetail, err := st.WithDetails(e.obj); err == nil {
		return withDetail
	}
	return st
}

// connectError converts errors of the service for connect-go, which reads only *connect.Error.
func connectError(err error) error {
	var e *rpcError
	if !errors.As(err, &e) {
		return err
	}
	ce := connect.NewError(e.code, errors.New(e.obj.GetMessage()))
	if d, derr := connect.NewErrorDetail(e.obj); derr == nil {
		ce.AddDetail(d)
	}
	for k, vv := range e.header {
		ce.Meta()[k] = vv
	}
	return ce
}

func invalidArgument(param, msg string) *rpcError {
	return &rpcError{code: connect.CodeInvalidArgument, obj: &openaiv1.Error{Message: msg, Type: "invalid_request_error", Param: param}}
}

func serverError(code connect.Code, errCode, msg string) *rpcError {
	return &rpcError{code: code, obj: &openaiv1.Error{Message: msg, Type: "server_error", Code: errCode}}
}

// fromGatewayError converts what Proxy.Call returns before an upstream answered.
func fromGatewayError(ctx context.Context, err error) *rpcError {
	var gw *pipeline.Error
	if errors.As(err, &gw) {
		if len(gw.Header) > 0 {
			md := metadata.MD{}
			for k, vv := range gw.Header {
				md.Append(k, vv...)
			}
			_ = grpc.SetTrailer(ctx, md) // a no-op outside grpc-go's transport
		}
		return &rpcError{codeForStatus(gw.Status), &openaiv1.Error{Message: gw.Message, Type: gw.Type, Param: gw.Param, Code: gw.Code}, gw.Header}
	}
	return fromContext(ctx, err)
}

// fromContext is the error of a call that stopped because its context ended, or, failing that,
// because of err.
func fromContext(ctx context.Context, err error) *rpcError {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return serverError(connect.CodeDeadlineExceeded, "", "the call's deadline passed")
	case ctx.Err() != nil:
		return serverError(connect.CodeCanceled, "", "the call was canceled")
	}
	return serverError(connect.CodeInternal, "", err.Error())
}

// codeForStatus maps an OpenAI HTTP status to a status code. 409 is ABORTED: OpenAI answers it to
// a request that conflicts with one in progress, which a client may retry. 413 joins 429 as
// RESOURCE_EXHAUSTED, as gRPC reports messages over its size limit.
func codeForStatus(s int) connect.Code {
	switch s {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusRequestTimeout:
		return connect.CodeDeadlineExceeded
	case http.StatusConflict:
		return connect.CodeAborted
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusNotImplemented:
		return connect.CodeUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return connect.CodeUnavailable
	}
	switch {
	case s >= 500:
		return connect.CodeInternal
	case s >= 400:
		return connect.CodeInvalidArgument
	}
	return connect.CodeUnknown
}

// errorShape holds the error bodies OpenAI-compatible servers send: OpenAI's {"error": {...}},
// vLLM's flat {"object": "error", "message": ..., "code": 404}, a plain {"error": "text"}
// (Ollama's native API), FastAPI's {"detail": ...}.
type errorShape struct {
	Error  json.RawMessage `json:"error"`
	Object string          `json:"object"`
	Detail json.RawMessage `json:"detail"`
	errorFields
}

type errorFields struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   json.RawMessage `json:"param"`
	Code    json.RawMessage `json:"code"`
}

// parseErrorBody reads OpenAI's error object from an upstream's error body (at most a few KiB are
// passed in). ok is false when the body holds none; the object then says only what status came.
func parseErrorBody(status int, body []byte) (obj *openaiv1.Error, ok bool) {
	var s errorShape
	if json.Unmarshal(body, &s) == nil {
		var f errorFields
		var text string
		switch {
		case json.Unmarshal(s.Error, &text) == nil && text != "":
			return &openaiv1.Error{Message: text, Type: errorType(status)}, true
		case json.Unmarshal(s.Error, &f) == nil && f.Message != "":
		case s.Message != "":
			f = s.errorFields
		case json.Unmarshal(s.Detail, &text) == nil && text != "":
			return &openaiv1.Error{Message: text, Type: errorType(status)}, true
		case len(s.Detail) > 0 && string(s.Detail) != "null":
			return &openaiv1.Error{Message: string(s.Detail), Type: errorType(status)}, true
		}
		if f.Message != "" {
			if f.Type == "" {
				f.Type = errorType(status)
			}
			return &openaiv1.Error{Message: f.Message, Type: f.Type, Param: scalarText(f.Param), Code: scalarText(f.Code)}, true
		}
	}
	msg := fmt.Sprintf("upstream answered HTTP %d", status)
	if t := bytes.TrimSpace(body); len(t) > 0 && utf8.Valid(t) {
		msg += ": " + pipeline.Truncate(string(t), 512)
	}
	return &openaiv1.Error{Message: msg, Type: errorType(status)}, false
}

func errorType(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

// scalarText is a JSON string's text or a number's digits; "" for null and anything else.
func scalarText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	if _, err := strconv.ParseFloat(string(raw), 64); err == nil {
		return string(raw)
	}
	return ""
}

var errorKey = []byte(`"error"`)

// eventError reads an error a stream carries in band, as an event holding an error object
// instead of a chunk; nil if data is not one. A numeric code that is an HTTP error status gives
// the status code (vLLM sends its errors' statuses); other errors are INTERNAL.
func eventError(data []byte) *rpcError {
	// A chunk's text cannot hold `"error"` unescaped, so only error objects (and a chunk whose
	// object or finish reason is literally "error") pass this test.
	if !bytes.Contains(data, errorKey) {
		return nil
	}
	var s errorShape
	if json.Unmarshal(data, &s) != nil {
		return nil
	}
	if len(s.Error) == 0 && s.Object != "error" {
		return nil
	}
	obj, _ := parseErrorBody(http.StatusInternalServerError, data)
	code := connect.CodeInternal
	if n, err := strconv.Atoi(obj.GetCode()); err == nil && n >= 400 && n <= 599 {
		code = codeForStatus(n)
	}
	return &rpcError{code: code, obj: obj}
}
