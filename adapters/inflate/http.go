package inflate

import (
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// Handler inflates, ahead of next, the compressed requests of the RPC protocols connect-go serves
// (Connect, gRPC-Web, and gRPC over net/http), for every service on the mux, so that no handler's
// own decompressor, bounded only by its message limit, ever sees a compressed byte:
//
//   - enveloped bodies (gRPC, gRPC-Web, Connect streaming) with a Grpc-Encoding or
//     Connect-Content-Encoding this package supports: each compressed message is inflated and
//     passed on uncompressed;
//   - Connect unary calls (a POST to /package.Service/Method) with a Content-Encoding it
//     supports: the body is inflated as it is read.
//
// The encoding header is removed, so the handler sees an uncompressed request. A body that
// crosses a bound fails the read with a *connect.Error: RESOURCE_EXHAUSTED for the bounds,
// INVALID_ARGUMENT for corrupt data. Other requests (KServe REST, which inflates its bodies with
// NewReader and answers in Triton's words; the OpenAI API) pass untouched. Put Handler inside
// authentication, so a caller without a key never makes the server inflate a byte.
func (in *Inflater) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if enveloped(r.Header.Get("Content-Type")) {
			header := "Grpc-Encoding"
			if strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") {
				header = "Connect-Content-Encoding"
			}
			if enc := strings.TrimSpace(r.Header.Get(header)); Supported(enc) {
				e := in.envelopes(r.Body, enc)
				defer e.Close()
				r.Body = connectBody{e, r.Body}
				r.Header.Del(header)
			}
		} else if enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); Supported(enc) && rpcPath(r.URL.Path) {
			zr, err := in.NewReader(enc, r.Body)
			if err != nil {
				_ = connect.NewErrorWriter().Write(w, r, connectError(err))
				return
			}
			defer zr.Close()
			r.Body = connectBody{zr, r.Body}
			r.Header.Del("Content-Encoding")
			r.Header.Del("Content-Length")
			r.ContentLength = -1
		}
		next.ServeHTTP(w, r)
	})
}

// enveloped reports whether a content type is one of the enveloped RPC protocols.
func enveloped(ct string) bool {
	return strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+")
}

// rpcPath reports whether a path is a Connect procedure, /package.Service/Method, as opposed to
// the REST and OpenAI routes, whose first segment has no dot.
func rpcPath(p string) bool {
	svc, method, ok := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return ok && strings.Contains(svc, ".") && method != "" && !strings.Contains(method, "/")
}

// connectBody is a request body whose read errors connect-go passes to the client as they are:
// a *connect.Error.
type connectBody struct {
	r interface {
		Read([]byte) (int, error)
	}
	orig interface{ Close() error }
}

func (b connectBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil {
		err = connectError(err)
	}
	return n, err
}

// Close closes the client's body; the inflating reader is closed by the Handler, once next
// returned.
func (b connectBody) Close() error { return b.orig.Close() }

// connectError gives an *Error its code; other errors (io.EOF, a client gone away) pass as they
// are.
func connectError(err error) error {
	var ie *Error
	if !errors.As(err, &ie) {
		return err
	}
	if ie.Reason == Corrupt {
		return connect.NewError(connect.CodeInvalidArgument, ie)
	}
	return connect.NewError(connect.CodeResourceExhausted, ie)
}
