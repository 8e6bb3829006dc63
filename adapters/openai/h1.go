package openai

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1Transport sends proxied requests to a cleartext (http://) upstream over HTTP/1.1 on the
// caller's goroutine: it writes the request (Request.Write, one write per request) and reads the
// response head (http.ReadResponse) itself, where http.Transport hands each request to a writer
// goroutine and each response to a reader goroutine. Those handoffs cost a loaded gateway a fifth
// to a quarter of its CPU per proxied request (BenchmarkProxyChat, c=64, CPU profiled by part).
// No library does this over net/http's types with context cancellation (fasthttp has its own
// types and no contexts), hence this small client. Connections are kept alive in a LIFO pool.
// http.Transport's reader goroutine notices an upstream closing an idle connection; here a
// non-blocking peek does before a connection is reused (see alive). Since responses are parsed by
// http.ReadResponse, chunked bodies, 1xx responses and Connection: close behave as with
// http.Transport. Requests with a body over h1MaxBody go to http.Transport (see large).
type h1Transport struct {
	addr string // host:port
	// large carries requests whose body exceeds maxBody: http.Transport writes a body while it
	// waits for the response, so an upstream that answers before reading all of it (413, say)
	// is heard; here the whole body is written first, which is safe only while it fits in the
	// sockets' buffers.
	large       http.RoundTripper
	maxBody     int64
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration
	maxHead     int64 // bounds a response's status line and headers

	mu   sync.Mutex
	idle []*h1Conn
	// closeIdle, set by CloseIdleConnections, closes connections as their responses end instead
	// of pooling them, until a request asks for a connection again (as http.Transport does).
	closeIdle bool
}

// h1Conn is one upstream connection.
type h1Conn struct {
	nc        net.Conn
	lr        limitedConn // what br reads: the response head is bounded
	br        *bufio.Reader
	cw        countingWriter // what bw writes to: bytes sent for the current request
	bw        *bufio.Writer
	idleSince time.Time
	reused    bool
	abort     func() // interrupts a blocked read or write: the cancellation hook, made once
	peek      peeker
}

const (
	h1BufferSize = 32 << 10
	// maxResponseHead bounds a response's status line and headers, as http.Transport's
	// MaxResponseHeaderBytes default does.
	maxResponseHead = 10 << 20
	max1xx          = 5
)

var errResponseHeadTooLarge = errors.New("openai: upstream response headers too large")

// limitedConn reads from the connection until n bytes have been read.
type limitedConn struct {
	nc net.Conn
	n  int64
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errResponseHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.nc.Read(p)
	l.n -= int64(n)
	return n, err
}

// countingWriter writes to the connection, counting.
type countingWriter struct {
	nc  net.Conn
	n   int64
	err error // the connection's last write error
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.nc.Write(p)
	w.n += int64(n)
	if err != nil {
		w.err = err
	}
	return n, err
}

// h1MaxBody is the largest request body h1Transport writes itself: 64 KiB fit in the socket
// buffers of any TCP connection, so the write completes even when the upstream reads none of
// it. Chat requests are almost always smaller.
const h1MaxBody = 64 << 10

// newH1Transport returns a client of the upstream at addr; requests with a body over h1MaxBody
// go to large.
func newH1Transport(addr string, large http.RoundTripper) *h1Transport {
	return &h1Transport{
		addr:        addr,
		large:       large,
		maxBody:     h1MaxBody,
		dial:        (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		maxIdle:     512,
		idleTimeout: 90 * time.Second,
		maxHead:     maxResponseHead,
	}
}

// get returns an idle connection that is still open, or a new one.
func (t *h1Transport) get(ctx context.Context) (*h1Conn, error) {
	for {
		t.mu.Lock()
		t.closeIdle = false
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		c := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		if t.reusable(c) {
			c.reused = true
			return c, nil
		}
		c.nc.Close()
	}
	return t.dialConn(ctx)
}

// reusable reports whether an idle connection may carry another request: it has not idled past
// idleTimeout and the upstream has neither closed it nor sent anything on it.
func (t *h1Transport) reusable(c *h1Conn) bool {
	return time.Since(c.idleSince) < t.idleTimeout && c.peek.alive()
}

func (t *h1Transport) dialConn(ctx context.Context) (*h1Conn, error) {
	nc, err := t.dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	c := &h1Conn{nc: nc}
	c.lr.nc, c.cw.nc = nc, nc
	c.abort = func() { _ = nc.SetDeadline(aLongTimeAgo) }
	c.peek.init(nc)
	c.br = bufio.NewReaderSize(&c.lr, h1BufferSize)
	c.bw = bufio.NewWriterSize(&c.cw, h1BufferSize)
	return c, nil
}

func (t *h1Transport) put(c *h1Conn) {
	c.idleSince = time.Now()
	t.mu.Lock()
	if !t.closeIdle && len(t.idle) < t.maxIdle {
		t.idle = append(t.idle, c)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	c.nc.Close()
}

// closeDead closes the pooled connections the upstream closed or that idled past idleTimeout, so
// they do not linger half-closed until reused; the health loop calls it.
func (t *h1Transport) closeDead() {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.idle[:0]
	for _, c := range t.idle {
		if t.reusable(c) {
			kept = append(kept, c)
		} else {
			c.nc.Close()
		}
	}
	clear(t.idle[len(kept):])
	t.idle = kept
}

// CloseIdleConnections closes the pooled connections; those in use close when their response ends.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.closeIdle = true
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// RoundTrip sends req, which must carry its ContentLength, and reads the response head. Cancelling
// req's context interrupts the exchange at any point and closes the connection. Like
// http.Transport with a POST, it tries the next connection (pooled, then new) only when a reused
// one failed to take the request before any byte of it was written.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req.Context(), req)
}

// roundTrip is RoundTrip with the context given apart, sparing the proxy a copy of its request
// (Request.WithContext) per attempt.
func (t *h1Transport) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	// A body of unknown length goes to net/http, which sends it chunked: so does one that
	// claims no length but is not http.NoBody, as net/http defines. So does a CONNECT, whose
	// request target is an authority, not a path.
	unknown := req.ContentLength < 0 || req.ContentLength == 0 && req.Body != nil && req.Body != http.NoBody
	if req.ContentLength > t.maxBody || unknown || req.Method == http.MethodConnect {
		return t.large.RoundTrip(req.WithContext(ctx))
	}
	// Like any RoundTripper it closes the body, also when nothing was sent (writeRequest closes
	// what it writes).
	unsent := func(err error) (*http.Response, error) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	if err := checkHeader(req.Header); err != nil {
		return unsent(err)
	}
	for {
		// A caller already gone sends nothing (the write could beat the cancellation hook).
		if err := ctx.Err(); err != nil {
			return unsent(err)
		}
		c, err := t.get(ctx)
		if err != nil {
			return unsent(err)
		}
		res, err := t.exchange(ctx, c, req)
		if err == nil {
			return res, nil
		}
		if c.reused && c.cw.n == 0 && c.cw.err != nil && req.GetBody != nil {
			body, gerr := req.GetBody()
			if gerr == nil {
				req.Body = body
				continue
			}
		}
		return nil, err
	}
}

func (t *h1Transport) exchange(ctx context.Context, c *h1Conn, req *http.Request) (*http.Response, error) {
	stop := context.AfterFunc(ctx, c.abort)
	fail := func(err error) (*http.Response, error) {
		stop()
		c.nc.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	c.cw.n, c.cw.err = 0, nil
	if err := writeRequest(c.bw, req); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	c.lr.n = t.maxHead
	var res *http.Response
	for i := 0; ; i++ {
		var err error
		if res, err = http.ReadResponse(c.br, req); err != nil {
			return fail(err)
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			// The proxy never asks for an upgrade: the connection now speaks something else.
			return fail(errors.New("openai: upstream switched protocols unasked"))
		}
		if res.StatusCode >= 200 {
			break
		}
		if i == max1xx {
			return fail(fmt.Errorf("openai: upstream sent more than %d informational responses", max1xx))
		}
	}
	c.lr.n = 1<<63 - 1
	res.Body = &h1Body{rc: res.Body, c: c, t: t, ctx: ctx, stop: stop, reuse: !res.Close && !req.Close}
	return res, nil
}

var aLongTimeAgo = time.Unix(1, 0)

// checkHeader refuses header fields http.Transport would refuse (Request.Write would only turn
// a line break into a space): a value with a line break may be an attempt to smuggle a second
// header or request.
func checkHeader(h http.Header) error {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("openai: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("openai: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// h1Body is a response body: at its end the connection goes back to the pool; closed before its
// end, or failing, the connection is closed.
type h1Body struct {
	rc     io.ReadCloser
	c      *h1Conn
	t      *h1Transport
	ctx    context.Context
	stop   func() bool
	reuse  bool
	done   atomic.Bool
	closed atomic.Bool
	err    error
}

var errBodyClosed = errors.New("openai: read on closed response body")

func (b *h1Body) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errBodyClosed // not io.EOF: a body cut short must not read as complete
	}
	if b.done.Load() {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.release(true)
	case err != nil:
		if b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
		b.err = err
		b.release(false)
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.closed.Store(true)
	b.release(false)
	return nil
}

// release ends the body once: the connection is reused only after the whole body was read, with
// nothing unsolicited after it and the cancellation hook removed before it fired.
func (b *h1Body) release(atEOF bool) {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	stopped := b.stop()
	if atEOF && stopped && b.reuse && b.c.br.Buffered() == 0 {
		b.t.put(b.c)
		return
	}
	b.c.nc.Close()
}
