package openai

import "net/http"

// NewUpstreamClient is the client the proxy sends requests to a cleartext upstream at addr
// (host:port) with, for benchmarks that measure it without the rest of the proxy.
func NewUpstreamClient(addr string) http.RoundTripper {
	if !h1Supported {
		return http.DefaultTransport
	}
	return newH1Transport(addr, http.DefaultTransport)
}
