package openai

import (
	"context"
	"net/http"
	"net/textproto"
	"strings"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// IncomingHeader is the request header a call that came in over gRPC or Connect (OpenAIService,
// and the KServe surfaces, whose bridge models call Proxy.Call) takes into the pipeline: its
// X-Infergate-* headers (gRPC metadata x-infergate-*, Connect's HTTP headers), so the stages
// apply them as they apply an HTTP request's, and the upstream gets them as an HTTP request's,
// plus Content-Type: application/json for the body. Other metadata (content type, user agent,
// credentials, grpc-*) describes the RPC, not the OpenAI request, and stays out, as an internal
// call's header does. nil when the call carries none, or is not a gRPC or Connect handler's.
//
// A binary key (x-infergate-...-bin) is refused with a 400 naming it rather than dropped: no
// gateway header is binary, and a client sending one would otherwise not learn it was ignored.
func IncomingHeader(ctx context.Context) (http.Header, error) {
	var h http.Header
	add := func(k string, vv []string) error {
		if strings.HasSuffix(k, "-Bin") {
			return pipeline.InvalidRequest(k, "unsupported_header", "Binary metadata "+strings.ToLower(k)+
				" is not a header the gateway reads; send gateway headers as text.")
		}
		if h == nil {
			h = http.Header{"Content-Type": {"application/json"}}
		}
		h[k] = append(h[k], vv...)
		return nil
	}
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		for k, vv := range ci.RequestHeader() {
			if pipeline.GatewayHeader(k) {
				if err := add(textproto.CanonicalMIMEHeaderKey(k), vv); err != nil {
					return nil, err
				}
			}
		}
		return h, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for k, vv := range md { // grpc-go's keys are lower case
		if pipeline.GatewayHeader(k) {
			if err := add(textproto.CanonicalMIMEHeaderKey(k), vv); err != nil {
				return nil, err
			}
		}
	}
	return h, nil
}

// setResponseHeaders names the request and what served it, as the HTTP API's headers do, and
// passes on the gateway's other X-Infergate-* response headers (a session turn's
// X-Infergate-Session-Id, the response cache's X-Infergate-Cache, a Granite model's prompt and
// parse error), so what a header asked for comes back on these surfaces too. A value gRPC
// metadata cannot carry (not printable ASCII) is left out rather than failing the call.
func setResponseHeaders(ctx context.Context, reqID string, res *pipeline.Response) {
	ci, isConnect := connect.CallInfoForHandlerContext(ctx)
	var md metadata.MD
	set := func(k, v string) {
		if isConnect {
			ci.ResponseHeader().Set(k, v)
		} else {
			md.Set(k, v) // lower-cases k
		}
	}
	if !isConnect {
		md = make(metadata.MD, 3)
	}
	set(HeaderRequestID, reqID)
	set(HeaderEndpoint, res.Endpoint)
	set(HeaderModel, res.Model)
	for _, src := range []http.Header{res.GatewayHeader, res.Header} { // the upstream's win, as over HTTP
		for k, vv := range src {
			if !pipeline.GatewayHeader(k) || ownHeader(k) || len(vv) == 0 || !printable(vv[0]) {
				continue
			}
			set(k, vv[0])
		}
	}
	if !isConnect {
		_ = grpc.SetHeader(ctx, md)
	}
}

// ownHeader reports whether k is one of the headers the HTTP API sets itself over an upstream's.
func ownHeader(k string) bool {
	return k == HeaderEndpoint || k == HeaderModel || k == HeaderBackendType || k == HeaderResponseTime
}

// printable reports whether s is printable ASCII, what a gRPC metadata value may hold.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
