package inflate

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

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
		// Every request passes here: header lookups by their canonical keys (net/http's own),
		// without Header.Get's canonicalising of the key, which cost 200 ns a request.
		if ct := get(r.Header, "Content-Type"); enveloped(ct) {
			header := "Grpc-Encoding"
			if hasPrefixFold(ct, "application/connect+") {
				header = "Connect-Content-Encoding"
			}
			if enc := strings.TrimSpace(get(r.Header, header)); Supported(enc) {
				e := in.envelopes(r.Body, enc)
				body := &owned{r: e, release: e.Close, orig: r.Body}
				defer body.done()
				r.Body = body
				r.Header.Del(header)
			}
		} else if enc := get(r.Header, "Content-Encoding"); enc != "" && rpcPath(r.URL.Path) {
			if enc = strings.ToLower(strings.TrimSpace(enc)); Supported(enc) {
				zr, err := in.NewReader(enc, r.Body)
				if err != nil {
					_ = connect.NewErrorWriter().Write(w, r, connectError(err))
					return
				}
				body := &owned{r: zr, release: func() { zr.Close() }, orig: r.Body}
				defer body.done()
				r.Body = body
				r.Header.Del("Content-Encoding")
				r.Header.Del("Content-Length")
				r.ContentLength = -1
			}
		}
		next.ServeHTTP(w, r)
	})
}

// get is h's first value for a key already in canonical form.
func get(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// enveloped reports whether a content type is one of the enveloped RPC protocols. Media types
// are case-insensitive, and connect-go and the router read them so: a capitalised
// Application/grpc reaches net/http's server, and must be bounded here like any other.
func enveloped(ct string) bool {
	return hasPrefixFold(ct, "application/grpc") || hasPrefixFold(ct, "application/connect+")
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// rpcPath reports whether a path is a Connect procedure, /package.Service/Method, as opposed to
// the REST and OpenAI routes, whose first segment has no dot.
func rpcPath(p string) bool {
	svc, method, ok := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return ok && strings.Contains(svc, ".") && method != "" && !strings.Contains(method, "/")
}

// owned is an inflating request body, whose read errors connect-go passes to the client as they
// are (a *connect.Error). The Handler is done with it when next returns, but a goroutine next
// left behind (a stream's receiver) may still be reading: whichever of the two finishes last
// gives back its decompressor and its budget, so a reader is never used after it was pooled.
type owned struct {
	r       io.Reader
	release func()
	orig    io.Closer

	mu      sync.Mutex
	reading int  // Reads in progress
	closed  bool // the Handler is done
}

func (b *owned) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errClosed
	}
	b.reading++
	b.mu.Unlock()
	n, err := b.r.Read(p)
	b.mu.Lock()
	b.reading--
	if b.closed && b.reading == 0 {
		b.release()
	}
	b.mu.Unlock()
	if err != nil {
		err = connectError(err)
	}
	return n, err
}

// done is the Handler's end: the body is released now, or by the Read in progress.
func (b *owned) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		if b.reading == 0 {
			b.release()
		}
	}
}

// Close closes the client's body; the inflating reader is released by done.
func (b *owned) Close() error { return b.orig.Close() }

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
