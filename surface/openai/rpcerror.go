package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
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

// statusError is the error for an HTTP status and OpenAI's error object: the status's code on
// this service (httpapi's table), the object as its detail, header sent along.
func statusError(status int, obj httpapi.Object, header http.Header) *rpcError {
	return &rpcError{code: httpapi.Code(httpapi.OpenAIService, status),
		obj: &openaiv1.Error{Message: obj.Message, Type: obj.Type, Param: obj.Param, Code: obj.Code}, header: header}
}

// gatewayError is the gateway's own error, as the OpenAI HTTP API would answer it.
func gatewayError(e *pipeline.Error) *rpcError {
	return statusError(e.Status, httpapi.Object{Message: e.Message, Type: e.Type, Param: e.Param, Code: e.Code}, e.Header)
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
		return gatewayError(gw)
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

// upstreamError is the error of an upstream's answer with an error status: the status's code,
// and the error object of its body (at most a few KiB are passed in).
func upstreamError(status int, body []byte) *rpcError {
	obj, ok := httpapi.ParseBody(status, body)
	if !ok {
		obj.Message = unparsedMessage(status, body)
	}
	return statusError(status, obj, nil)
}

// unparsedMessage is the message of an error whose body holds none: the status, and the body if
// it is text.
func unparsedMessage(status int, body []byte) string {
	msg := fmt.Sprintf("upstream answered HTTP %d", status)
	if t := bytes.TrimSpace(body); len(t) > 0 && utf8.Valid(t) {
		msg += ": " + httpapi.Truncate(string(t), 512)
	}
	return msg
}

// eventError reads an error a stream carries in band, as an event holding an error object
// instead of a chunk; nil if data is not one. A numeric code that is an HTTP error status gives
// the status code (vLLM sends its errors' statuses); other errors are INTERNAL.
func eventError(data []byte) *rpcError {
	obj, status, ok := httpapi.ParseEvent(data)
	if !ok {
		return nil
	}
	if obj.Message == "" {
		obj.Message = unparsedMessage(status, data)
	}
	return statusError(status, obj, nil)
}
