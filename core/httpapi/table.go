// Package httpapi is the gateway's HTTP API conventions, shared by every surface: the JSON answer
// (WriteJSON), the bounded body read (ReadBody), Retry-After in both directions (RetryAfter,
// CeilSeconds), upstream text quoted in an error (Truncate), and the one place where the
// gateway's error surfaces meet: the table that turns
// an HTTP status (the gateway's own, or an upstream's) into a code on each RPC surface, the table
// that turns a code back into an HTTP status on the REST surfaces, and the one parser of the error
// bodies OpenAI-compatible upstreams send.
//
// The surfaces:
//
//   - OpenAI's HTTP API answers with the status itself and OpenAI's error object
//     ({"error":{"message","type","param","code"}}); it needs no table.
//   - OpenAIService (infergate.openai.v1, over gRPC, Connect and gRPC-Web) answers with a code
//     (Code(OpenAIService, status)) and OpenAI's error object as the status's detail.
//   - The KServe bridge (an LLM served as a KServe model) answers with a code (Code(KServe,
//     status)) in Triton's vocabulary, and the message alone; over REST, that code's RESTStatus.
//   - KServe REST (Triton's HTTP API) answers a code with an HTTP status (RESTStatus) and
//     {"error": "..."}; the guard's refusals on every HTTP path use the same statuses.
//
// Connect and gRPC-Web are transports of the two RPC surfaces: they carry the same codes.
//
// The package depends on nothing of the gateway's, so every surface can import it.
package httpapi

import (
	"fmt"
	"net/http"

	"connectrpc.com/connect"
)

// Surface is an RPC surface: one that reports errors as codes.
type Surface int

const (
	// OpenAIService is infergate.openai.v1.OpenAIService: OpenAI's API as an RPC service.
	OpenAIService Surface = iota
	// KServe is the KServe bridge: an LLM answering KServe's inference RPCs.
	KServe
)

func (s Surface) String() string {
	switch s {
	case OpenAIService:
		return "OpenAIService"
	case KServe:
		return "KServe"
	}
	return fmt.Sprintf("Surface(%d)", int(s))
}

// Statuses that stand for a class in the table: any other 4xx, any other status from 500 up,
// and anything else (no error status: 1xx to 3xx, or a number no HTTP status has).
const (
	any4xx = -4
	any5xx = -5
	other  = -1
)

// row maps one HTTP status, or a class of them, to its code on each surface.
type row struct {
	status        int
	openAIService connect.Code
	kserve        connect.Code
}

const (
	invalidArgument   = connect.CodeInvalidArgument
	unauthenticated   = connect.CodeUnauthenticated
	permissionDenied  = connect.CodePermissionDenied
	notFound          = connect.CodeNotFound
	deadlineExceeded  = connect.CodeDeadlineExceeded
	aborted           = connect.CodeAborted
	resourceExhausted = connect.CodeResourceExhausted
	unimplemented     = connect.CodeUnimplemented
	unavailable       = connect.CodeUnavailable
	internal          = connect.CodeInternal
	unknown           = connect.CodeUnknown
)

// statusCodes is the table: a status's own row, else its class's. OpenAIService uses gRPC's whole
// vocabulary, as gRPC's own HTTP mapping does; the KServe bridge keeps to the codes a Triton
// client expects from a model (reference/kserve.md §3: INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE,
// INTERNAL, and the guard's UNAUTHENTICATED and PERMISSION_DENIED), so the columns differ where
// gRPC has a finer code than Triton uses.
var statusCodes = [...]row{
	// status  OpenAIService      KServe
	{400, invalidArgument, invalidArgument},
	{401, unauthenticated, unauthenticated},
	{403, permissionDenied, permissionDenied},
	{404, notFound, notFound},
	// The upstream gave up waiting for the request: OpenAIService says so; Triton has no such code.
	{408, deadlineExceeded, invalidArgument},
	// OpenAI answers 409 to a request that conflicts with one in progress, which a client may
	// retry: ABORTED says so; Triton has no such code.
	{409, aborted, invalidArgument},
	// A body over a size limit is RESOURCE_EXHAUSTED on OpenAIService, as gRPC reports messages
	// over its size limit; Triton answers INVALID_ARGUMENT to a request it will not take.
	{413, resourceExhausted, invalidArgument},
	{422, invalidArgument, invalidArgument},
	// A rate limit: RESOURCE_EXHAUSTED on OpenAIService, as gRPC's quota errors; UNAVAILABLE
	// (retry later) on KServe, as Triton answers when its queue is full.
	{429, resourceExhausted, unavailable},
	// An upstream without the endpoint: OpenAIService passes UNIMPLEMENTED on; on KServe the RPC
	// is implemented (the model behind it failed), and Triton's UNIMPLEMENTED means the RPC is not.
	{501, unimplemented, internal},
	{502, unavailable, unavailable},
	{503, unavailable, unavailable},
	{504, unavailable, unavailable},
	{any4xx, invalidArgument, invalidArgument},
	{any5xx, internal, internal},
	// Not an error status: OpenAIService cannot tell what went wrong; KServe reports it as Triton
	// reports a backend's failure.
	{other, unknown, internal},
}

// Code is the code surface s answers for an HTTP status: the gateway's own error's, or an
// upstream's.
func Code(s Surface, status int) connect.Code {
	class := other
	switch {
	case status >= 500:
		class = any5xx
	case status >= 400:
		class = any4xx
	}
	for i := range statusCodes {
		if r := &statusCodes[i]; r.status == class || (status > 0 && r.status == status) {
			if s == KServe {
				return r.kserve
			}
			return r.openAIService
		}
	}
	return connect.CodeUnknown // not reached: the table has a row for every class
}

// restStatuses maps a code to its HTTP status on the REST surfaces: Triton's for the codes it
// uses (INTERNAL 500, NOT_FOUND 404, UNAVAILABLE 503, UNIMPLEMENTED 501, everything else 400),
// and for the guard's refusals, which Triton does not have, the statuses OpenAI answers them with.
var restStatuses = [...]int{
	connect.CodeInternal:          http.StatusInternalServerError,
	connect.CodeNotFound:          http.StatusNotFound,
	connect.CodeUnavailable:       http.StatusServiceUnavailable,
	connect.CodeUnimplemented:     http.StatusNotImplemented,
	connect.CodeUnauthenticated:   http.StatusUnauthorized,
	connect.CodePermissionDenied:  http.StatusForbidden,
	connect.CodeResourceExhausted: http.StatusTooManyRequests,
}

// RESTStatus is the HTTP status KServe REST answers for a code, and the guard for a refusal on
// any HTTP path.
func RESTStatus(c connect.Code) int {
	if int(c) < len(restStatuses) && restStatuses[c] != 0 {
		return restStatuses[c]
	}
	return http.StatusBadRequest
}

// TypeFor is OpenAI's error type for a status that came without one: server_error for 5xx,
// invalid_request_error otherwise.
func TypeFor(status int) string {
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}
