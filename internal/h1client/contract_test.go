package h1client_test

import (
	"testing"

	"github.com/infergate/infergate/internal/h1client"
	"github.com/infergate/infergate/internal/h1client/roundtriptest"
)

// newFast returns the client under test, falling back to the contract's http.Transport.
func newFast(t *testing.T, addr string) roundtriptest.RoundTripper {
	fallback := roundtriptest.NewTransport()
	tr := h1client.New(addr, fallback)
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		fallback.CloseIdleConnections()
	})
	return tr
}

// corpus is FuzzResponse's: raw upstream responses, replayed by the contract.
const corpus = "testdata/fuzz/FuzzResponse"

// fast is where h1client differs from http.Transport: the gateway never asks for an upgrade, so
// a 101 would leave the connection speaking something else.
var fast = roundtriptest.Features{RefusesUnaskedUpgrade: true, Corpus: corpus}

// TestContract runs the contract against h1client and against net/http's Transport, which it
// describes.
func TestContract(t *testing.T) {
	t.Run("h1client", func(t *testing.T) {
		if !h1client.Supported {
			t.Skip("the proxy uses http.Transport on this platform")
		}
		roundtriptest.Run(t, newFast, fast)
	})
	t.Run("net/http", func(t *testing.T) {
		roundtriptest.Run(t, roundtriptest.NetHTTPRoundTripper, roundtriptest.Features{Corpus: corpus})
	})
}

// FuzzResponse: whatever an upstream answers, h1client makes of it what http.Transport makes of
// it (see roundtriptest.Agree): the same failure, or the same response and body.
func FuzzResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		ref := roundtriptest.Exchange(t, roundtriptest.NetHTTPRoundTripper, raw)
		roundtriptest.Agree(t, fast, raw, ref, roundtriptest.Exchange(t, newFast, raw))
	})
}
