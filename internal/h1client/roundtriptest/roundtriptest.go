// Package roundtriptest is the contract the gateway's HTTP/1.1 clients of its upstreams keep, as
// one test suite that runs against any of them (as Watermill's pubsub tests run against every
// Pub/Sub): h1client's tests run it against h1client.Transport and against net/http's
// http.Transport, so the hand-written client is held to what net/http does.
//
// The suite talks to an upstream on a raw socket that writes exactly the bytes each case chooses:
// keep-alive reuse, chunked bodies, informational responses, Connection: close, an upstream
// closing idle connections, cancellation before sending, while waiting for the head and while
// reading the body, large request and response bodies, the response head limit, responses without
// a body (HEAD, 204, 304), an upstream that answers before reading the body, and what the upstream
// reads of a request. With Features.Corpus it also replays a fuzz corpus of raw responses
// (FuzzResponse's, in h1client) and holds the client to what http.Transport makes of each.
package roundtriptest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// RoundTripper is a client under test: h1client.Transport's methods; NetHTTP adapts an
// http.Transport. The context travels beside the request and governs the exchange.
type RoundTripper interface {
	RoundTrip(ctx context.Context, req *http.Request) (*http.Response, error)
	CloseIdleConnections()
}

// NewRoundTripper returns a new client of the upstream at addr (host:port), closed by the time
// the test ends.
type NewRoundTripper func(t *testing.T, addr string) RoundTripper

// Features says where a client legitimately differs from http.Transport.
type Features struct {
	// RefusesUnaskedUpgrade: a 101 Switching Protocols answering a request that asked for no
	// upgrade is an error, where http.Transport returns it (with the connection as its body when
	// it names a protocol).
	RefusesUnaskedUpgrade bool
	// Corpus, when set, is a directory of raw responses in the format of a fuzz target's corpus
	// taking one []byte (go test fuzz v1), relative to the calling test's package; each is
	// replayed through the client and through http.Transport, and the two must agree (see Agree).
	Corpus string
}

// NetHTTP adapts an http.Transport to RoundTripper.
func NetHTTP(tr *http.Transport) RoundTripper { return netHTTP{tr} }

type netHTTP struct{ tr *http.Transport }

func (n netHTTP) RoundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	return n.tr.RoundTrip(req.WithContext(ctx))
}

func (n netHTTP) CloseIdleConnections() { n.tr.CloseIdleConnections() }

// NewTransport returns the http.Transport the contract holds clients to: with compression off, as
// the gateway configures its own (with it on, http.Transport asks for gzip itself and decodes it,
// so the bytes an upstream sends would not be the bytes read).
func NewTransport() *http.Transport {
	return &http.Transport{DisableCompression: true}
}

// NetHTTPRoundTripper is a NewRoundTripper of NetHTTP(NewTransport()).
func NetHTTPRoundTripper(t *testing.T, _ string) RoundTripper {
	tr := NetHTTP(NewTransport())
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// Run runs the contract against the clients newRT makes.
func Run(t *testing.T, newRT NewRoundTripper, f Features) {
	cases := []struct {
		name string
		run  func(t *testing.T, newRT NewRoundTripper, f Features)
	}{
		{"KeepAlive", testKeepAlive},
		{"Informational", testInformational},
		{"UpstreamClosesIdle", testUpstreamClosesIdle},
		{"ConnectionClose", testConnectionClose},
		{"BodyClosedEarly", testBodyClosedEarly},
		{"ReadAfterClose", testReadAfterClose},
		{"CloseIdleInFlight", testCloseIdleInFlight},
		{"NoBody", testNoBody},
		{"CancelBeforeSend", testCancelBeforeSend},
		{"CancelAwaitingHead", testCancelAwaitingHead},
		{"CancelMidBody", testCancelMidBody},
		{"HeadTooLarge", testHeadTooLarge},
		{"InvalidHeader", testInvalidHeader},
		{"RequestAsSent", testRequestAsSent},
		{"EarlyAnswer", testEarlyAnswer},
		{"UnknownLength", testUnknownLength},
		{"Connect", testConnect},
		{"Upgrade", testUpgrade},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newRT, f)
		})
	}
	if f.Corpus != "" {
		t.Run("Corpus", func(t *testing.T) { t.Parallel(); testCorpus(t, newRT, f) })
	}
}

// post sends a small POST, as the proxy sends a chat request.
func post(t *testing.T, rt RoundTripper, ctx context.Context, addr, path string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	return rt.RoundTrip(ctx, req)
}

// text posts and reads the whole body.
func text(t *testing.T, rt RoundTripper, addr, path string) string {
	t.Helper()
	res, err := post(t, rt, context.Background(), addr, path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s: reading the body: %v", path, err)
	}
	return string(b)
}

func equal[T comparable](t *testing.T, want, got T, what string) {
	t.Helper()
	if want != got {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

func errorIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// testKeepAlive: one connection carries request after request.
func testKeepAlive(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	for range 3 {
		equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
	}
	equal(t, "hi th", text(t, rt, s.addr, "/chunked"), "chunked body")
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
	equal(t, int32(1), s.conns.Load(), "connections, reused after whole bodies, chunked too")
	equal(t, int32(5), s.reqs.Load(), "requests")
}

// testInformational: informational (1xx) responses before the answer are skipped, however many,
// and leave the connection reusable.
func testInformational(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	equal(t, "hi th", text(t, rt, s.addr, "/chunked"), "after 100 and 103")
	equal(t, "ok", text(t, rt, s.addr, "/many-1xx"), "after ten 102")
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
	equal(t, int32(1), s.conns.Load(), "connections")
}

// testUpstreamClosesIdle: a connection the upstream closed while it idled is not used again (the
// request goes out on a new one), whether or not the client noticed in between.
func testUpstreamClosesIdle(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	equal(t, "ok", text(t, rt, s.addr, "/close-after"), "body")
	<-s.closed
	time.Sleep(50 * time.Millisecond) // the FIN reaches the idle connection
	equal(t, "ok", text(t, rt, s.addr, "/close-after"), "body on a new connection")
	<-s.closed
	time.Sleep(50 * time.Millisecond)
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body on a new connection")
	equal(t, int32(3), s.conns.Load(), "connections")
}

// testConnectionClose: a connection is not reused after a response with Connection: close, nor
// after a request that asked to close it.
func testConnectionClose(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	equal(t, "bye", text(t, rt, s.addr, "/conn-close"), "body")
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
	equal(t, int32(2), s.conns.Load(), "connections after Connection: close")

	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/echo", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Close = true
	res, err := rt.RoundTrip(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "close=true") {
		t.Errorf("the upstream read %q: no Connection: close", b)
	}
	equal(t, "plain", text(t, rt, s.addr, "/b"), "body")
	equal(t, int32(3), s.conns.Load(), "connections after a request that asked to close")
}

// testBodyClosedEarly: a connection whose response body was closed before its end is not reused
// (the rest of the body would be read as the next response).
func testBodyClosedEarly(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	res, err := post(t, rt, context.Background(), s.addr, "/big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(res.Body, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
	equal(t, int32(2), s.conns.Load(), "connections")

	// A large body read whole leaves the connection reusable.
	equal(t, bigBody, len(text(t, rt, s.addr, "/big")), "length of a large body")
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
	equal(t, int32(2), s.conns.Load(), "connections after a large body")
}

// testReadAfterClose: reading a body after closing it is an error, not io.EOF: a body cut short
// must not read as complete.
func testReadAfterClose(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	res, err := post(t, rt, context.Background(), s.addr, "/big")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	n, err := res.Body.Read(make([]byte, 10))
	if err == nil || err == io.EOF {
		t.Errorf("read after Close: %d bytes, error %v; want an error other than io.EOF", n, err)
	}
}

// testCloseIdleInFlight: a connection whose response ends after CloseIdleConnections is closed,
// not pooled; pooling resumes with the next request.
func testCloseIdleInFlight(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	res, err := post(t, rt, context.Background(), s.addr, "/big")
	if err != nil {
		t.Fatal(err)
	}
	rt.CloseIdleConnections()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
	equal(t, int32(2), s.conns.Load(), "connections: the first was not pooled")
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
	equal(t, int32(2), s.conns.Load(), "connections: the second was")
}

// testNoBody: responses without a body (to HEAD whatever their Content-Length, 204, 304, and
// Content-Length: 0) read as empty, and leave the connection reusable whether or not their body
// is read before it is closed.
func testNoBody(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	for _, read := range []bool{true, false} {
		for _, c := range []struct{ method, path string }{
			{http.MethodHead, "/a"}, {http.MethodPost, "/no-content"}, {http.MethodPost, "/not-modified"}, {http.MethodPost, "/empty"},
		} {
			var body io.Reader
			if c.method == http.MethodPost {
				body = strings.NewReader("{}")
			}
			req, err := http.NewRequest(c.method, "http://"+s.addr+c.path, body)
			if err != nil {
				t.Fatal(err)
			}
			res, err := rt.RoundTrip(context.Background(), req)
			if err != nil {
				t.Fatalf("%s %s: %v", c.method, c.path, err)
			}
			if read {
				b, err := io.ReadAll(res.Body)
				if err != nil || len(b) > 0 {
					t.Errorf("%s %s: body %q, error %v", c.method, c.path, b, err)
				}
			}
			res.Body.Close()
		}
		equal(t, "plain", text(t, rt, s.addr, "/a"), "body")
		equal(t, int32(1), s.conns.Load(), "connections (bodies read: "+map[bool]string{true: "yes", false: "no"}[read]+")")
	}
}

// testCancelBeforeSend: a request whose context is already done sends nothing, fails with the
// context's error and has its body closed.
func testCancelBeforeSend(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body") // one pooled connection
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		body := &closeRecorder{Reader: strings.NewReader("{}")}
		req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/b", body)
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = 2
		_, err = rt.RoundTrip(gone, req)
		errorIs(t, err, context.Canceled, "a cancelled request")
		if !body.closed {
			t.Error("the body of a cancelled request was not closed")
		}
	}
	time.Sleep(20 * time.Millisecond)
	equal(t, int32(1), s.reqs.Load(), "requests the upstream read")
}

// within runs f, failing the test if it has not returned in 10 s: a client that does not hear a
// cancellation fails the case instead of hanging the suite (f's goroutine is then left behind).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still blocked 10 s after the cancellation", what)
	}
}

// testCancelAwaitingHead: a request whose context ends while it waits for the response head fails
// at once with the context's error.
func testCancelAwaitingHead(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/hang", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	within(t, "RoundTrip", func() { _, err = rt.RoundTrip(ctx, req) })
	errorIs(t, err, context.DeadlineExceeded, "a request past its deadline")
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body after")
}

// testCancelMidBody: cancelling a request's context while its body is being read ends the read
// with the context's error.
func testCancelMidBody(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := post(t, rt, ctx, s.addr, "/stall-body")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b := make([]byte, 4)
	if _, err := io.ReadFull(res.Body, b); err != nil || string(b) != "part" {
		t.Fatalf("the body's start: %q, %v", b, err)
	}
	stop := time.AfterFunc(50*time.Millisecond, cancel)
	defer stop.Stop()
	within(t, "reading the body", func() { _, err = io.ReadAll(res.Body) })
	errorIs(t, err, context.Canceled, "reading the body of a cancelled request")
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body after")
}

// testHeadTooLarge: a response head past 10 MiB (http.Transport's default limit) is an error.
func testHeadTooLarge(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	res, err := post(t, rt, context.Background(), s.addr, "/huge-head")
	if err == nil {
		res.Body.Close()
		t.Errorf("a %d-byte header was read", hugeHead)
	}
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body after")
}

// testInvalidHeader: a header value that would split the request is refused before anything is
// sent, and the body is closed all the same.
func testInvalidHeader(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	for name, h := range map[string]http.Header{
		"value": {"X-Evil": {"a\r\nX-Injected: 1"}},
		"name":  {"X-Evil\r\nX-Injected": {"1"}},
	} {
		req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/x", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h
		body := &closeRecorder{Reader: strings.NewReader("{}")}
		req.Body, req.ContentLength = body, 2
		_, err = rt.RoundTrip(context.Background(), req)
		if err == nil || !strings.Contains(err.Error(), "invalid header field "+name) {
			t.Errorf("invalid header field %s: error %v", name, err)
		}
		if !body.closed {
			t.Errorf("invalid header field %s: the body was not closed", name)
		}
	}
	equal(t, int32(0), s.reqs.Load(), "requests the upstream read")
	equal(t, "plain", text(t, rt, s.addr, "/after"), "body after")
}

// testRequestAsSent: the upstream reads the request as made, small bodies and large ones.
func testRequestAsSent(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	ref := startUpstream(t)
	std := NetHTTP(NewTransport())
	defer std.CloseIdleConnections()
	for _, n := range []int{13, 64 << 10, 64<<10 + 1, 1 << 20} {
		for _, mod := range []string{"", "host", "ua", "query"} {
			send := func(rt RoundTripper, addr string) string {
				req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/echo", strings.NewReader(strings.Repeat("b", n)))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				switch mod {
				case "host":
					req.Host = "virtual.example:9000"
				case "ua":
					req.Header.Set("User-Agent", "openai-go/3")
				case "query":
					req.URL.RawQuery = "api-version=2&x=%20y"
				}
				res, err := rt.RoundTrip(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, err := io.ReadAll(res.Body)
				if err != nil {
					t.Fatal(err)
				}
				return strings.Replace(string(b), addr, "ADDR", 1)
			}
			equal(t, send(std, ref.addr), send(rt, s.addr), "what the upstream read")
		}
	}
}

// testEarlyAnswer: an upstream that answers a large body before reading it, and hangs up, is
// heard: the answer, not a write error.
func testEarlyAnswer(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/early", strings.NewReader(strings.Repeat("x", 4<<20)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.RoundTrip(context.Background(), req)
	if err != nil {
		t.Fatalf("the upstream's early answer, not %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	equal(t, http.StatusRequestEntityTooLarge, res.StatusCode, "status")
	equal(t, "too large", string(b), "body")
}

// testUnknownLength: a body that claims no length (ContentLength 0, not http.NoBody) goes out
// whole and chunked.
func testUnknownLength(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/echo", io.NopCloser(strings.NewReader("{}")))
	if err != nil {
		t.Fatal(err)
	}
	if req.ContentLength != 0 {
		t.Fatal("http.NewRequest knows the length")
	}
	res, err := rt.RoundTrip(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "length=-1 te=[chunked]") || !strings.Contains(string(b), "body=2:") {
		t.Errorf("the upstream read %q", b)
	}
}

// testConnect: a CONNECT, whose request target is an authority, is sent so.
func testConnect(t *testing.T, newRT NewRoundTripper, _ Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	res, err := rt.RoundTrip(context.Background(), &http.Request{Method: http.MethodConnect,
		URL: &url.URL{Scheme: "http", Host: s.addr}, Host: s.addr, Header: http.Header{}})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "CONNECT "+s.addr, string(b), "what the upstream read")
}

// testUpgrade: an unasked 101 Switching Protocols is returned as http.Transport returns it, or,
// where Features says so, refused; either way the next request goes out on a new connection.
func testUpgrade(t *testing.T, newRT NewRoundTripper, f Features) {
	s := startUpstream(t)
	rt := newRT(t, s.addr)
	res, err := post(t, rt, context.Background(), s.addr, "/upgrade")
	switch {
	case f.RefusesUnaskedUpgrade && err == nil:
		res.Body.Close()
		t.Errorf("an unasked 101 was returned: %d", res.StatusCode)
	case !f.RefusesUnaskedUpgrade && err != nil:
		t.Errorf("an unasked 101: %v", err)
	case err == nil:
		equal(t, http.StatusSwitchingProtocols, res.StatusCode, "status")
		res.Body.Close()
	}
	equal(t, "plain", text(t, rt, s.addr, "/a"), "body after")
	equal(t, int32(2), s.conns.Load(), "connections")
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }
