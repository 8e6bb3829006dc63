package openai

import (
	"context"
	"net/http"

	"github.com/infergate/infergate/internal/h1client"
)

// NewUpstreamClient returns how the proxy sends a request to a cleartext upstream at addr
// (host:port), for benchmarks that measure that client without the rest of the proxy.
func NewUpstreamClient(addr string) func(context.Context, *http.Request) (*http.Response, error) {
	if !h1client.Supported {
		return transport{http.DefaultTransport.(*http.Transport)}.roundTrip
	}
	return h1client.New(addr, http.DefaultTransport).RoundTrip
}
