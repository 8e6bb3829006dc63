// Package h1client is the gateway's HTTP/1.1 client for cleartext (http://) upstreams: it sends a
// request and reads its response head on the caller's goroutine.
//
// Why it is hand-written: http.Transport hands each request to a writer goroutine and each
// response to a reader goroutine. Those handoffs cost a loaded gateway a fifth to a quarter of its
// CPU per proxied request (BenchmarkProxyChat in surface/openai, c=64, CPU profiled by part). No
// library does this over net/http's types with context cancellation (fasthttp has its own types
// and no contexts), hence this small client. The proxy can turn it off (the upstream_client: std
// setting), and roundtriptest holds the contract it shares with http.Transport, which its tests
// run against both.
//
// Here the request is written (writeRequest, one write per request, whose last bytes go out as
// the wait for the answer begins: internal/sockio, whose raw system calls read and write the
// socket) and the response head read (readResponse: the common head by internal/httphead, any
// other by http.ReadResponse) by the caller.
// Connections are kept alive in a LIFO pool. http.Transport's reader goroutine notices an
// upstream closing an idle connection; here a non-blocking peek does before a connection is
// reused, which needs a platform where a socket can be peeked at (Supported). Since responses
// are parsed as http.ReadResponse parses them, chunked bodies, 1xx responses and Connection:
// close behave as with http.Transport.
//
// Not every request takes this path: those with a body over MaxBody, of unknown length, and
// CONNECTs go to the fallback RoundTripper given to New (see MaxBody for why).
package h1client

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

	"github.com/infergate/infergate/internal/sockio"
)

// MaxBody is the largest request body the client writes itself; larger ones go to the fallback.
// The client writes the whole body before it reads the response, which is safe only while the
// body fits in the sockets' buffers: an upstream that answers before reading all of it (a 413,
// say) would otherwise leave the write blocked. http.Transport writes a body while it waits for
// the response, so such an answer is heard. 64 KiB fit in the socket buffers of any TCP
// connection, so the write completes even when the upstream reads none of it; chat requests are
// almost always smaller.
const MaxBody = 64 << 10

// Transport sends requests to one upstream over HTTP/1.1 on the caller's goroutine. It is safe for
// concurrent use.
type Transport struct {
	addr        string            // host:port
	fallback    http.RoundTripper // requests this client does not carry itself (see MaxBody)
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration
	maxHead     int64 // bounds a response's status line and headers

	mu   sync.Mutex
	idle []*conn
	// closeIdle, set by CloseIdleConnections, closes connections as their responses end instead
	// of pooling them, until a request asks for a connection again (as http.Transport does).
	closeIdle bool
}

// conn is one upstream connection.
type conn struct {
	nc        net.Conn
	lr        limitedConn // what br reads: the response head is bounded
	br        *bufio.Reader
	cw        countingWriter // what bw writes to: bytes sent for the current request
	bw        *bufio.Writer
	idleSince time.Time
	reused    bool
	abort     func() // interrupts a blocked read or write: the cancellation hook, made once
	peek      peeker
	// The exchange's context, and how to remove its cancellation hook once armAbort (made
	// once, as arm) has set it.
	ctx  context.Context
	stop func() bool
	arm  func()
}

// armAbort makes the end of the exchange's context interrupt the connection. sockio calls it
// before the exchange first waits (the Writer's BeforeWait): a request the socket takes at once
// is out before the hook's cost (about a microsecond, cold) is paid, which then overlaps the
// upstream's work instead of delaying the request.
func (c *conn) armAbort() { c.stop = context.AfterFunc(c.ctx, c.abort) }

// disarm removes the cancellation hook; false when it has fired (or is firing), and the
// connection may then be interrupted at any moment.
func (c *conn) disarm() bool {
	c.cw.ww.BeforeWait = nil
	stop := c.stop
	c.ctx, c.stop = nil, nil
	return stop == nil || stop()
}

const (
	bufferSize = 32 << 10
	// maxResponseHead bounds a response's status line and headers, as http.Transport's
	// MaxResponseHeaderBytes default does.
	maxResponseHead = 10 << 20
)

var errResponseHeadTooLarge = errors.New("h1client: upstream response headers too large")

// limitedConn reads from the connection (sockio's raw reads) until n bytes have been read.
type limitedConn struct {
	in sockio.Reader
	n  int64
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errResponseHeadTooLarge
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.in.Read(p)
	l.n -= int64(n)
	return n, err
}

// countingWriter writes to the connection, counting. Its writer's Wait, set around the flush
// of a request's last bytes, makes that write also wait for the answer to begin (sockio):
// one system call fewer an exchange.
type countingWriter struct {
	ww  sockio.Writer
	n   int64
	err error // the connection's last write error
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ww.Write(p)
	w.n += int64(n)
	if err != nil {
		w.err = err
	}
	return n, err
}

// Option configures a Transport.
type Option func(*Transport)

// WithDialContext makes the Transport dial connections with dial instead of a net.Dialer with a
// 5 s timeout and 30 s keep-alives. A connection that is not a syscall.Conn cannot be peeked at,
// so it is never reused.
func WithDialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(t *Transport) { t.dial = dial }
}

// New returns a client of the upstream at addr (host:port). Requests it does not carry itself (see
// MaxBody) go to fallback, which should dial the same upstream: an http.Transport, usually. Where
// Supported is false, New works but never reuses a connection.
func New(addr string, fallback http.RoundTripper, opts ...Option) *Transport {
	t := &Transport{
		addr:        addr,
		fallback:    fallback,
		dial:        (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		maxIdle:     512,
		idleTimeout: 90 * time.Second,
		maxHead:     maxResponseHead,
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// get returns an idle connection that is still open, or a new one.
func (t *Transport) get(ctx context.Context) (*conn, error) {
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
func (t *Transport) reusable(c *conn) bool {
	return time.Since(c.idleSince) < t.idleTimeout && c.peek.alive()
}

func (t *Transport) dialConn(ctx context.Context) (*conn, error) {
	nc, err := t.dial(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc}
	c.lr.in.Init(nc, nil)
	c.cw.ww.Init(nc, nil)
	c.abort = func() { _ = nc.SetDeadline(aLongTimeAgo) }
	c.arm = c.armAbort
	c.peek.init(nc)
	c.br = bufio.NewReaderSize(&c.lr, bufferSize)
	c.bw = bufio.NewWriterSize(&c.cw, bufferSize)
	return c, nil
}

func (t *Transport) put(c *conn) {
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

// CloseDead closes the pooled connections the upstream closed or that idled past the idle
// timeout, so they do not linger half-closed until reused; the proxy's health loop calls it.
func (t *Transport) CloseDead() {
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

// CloseIdleConnections closes the pooled connections; those in use close when their response
// ends, until a request asks for a connection again (as with http.Transport). It does not close
// the fallback's.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.closeIdle = true
	t.mu.Unlock()
	for _, c := range idle {
		c.nc.Close()
	}
}

// RoundTrip sends req and reads the response head; ctx, not req's own context, governs the
// exchange, which spares a caller a copy of its request (Request.WithContext) per attempt.
// Cancelling ctx interrupts the exchange at any point, reading the body included, and closes the
// connection. Like http.Transport with a POST, it tries the next connection (pooled, then new)
// only when a reused one failed to take the request before any byte of it was written, and only
// when req has GetBody. Like any RoundTripper it closes req's body, also when nothing was sent.
func (t *Transport) RoundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	// A body of unknown length goes to net/http, which sends it chunked: so does one that
	// claims no length but is not http.NoBody, as net/http defines. So does a CONNECT, whose
	// request target is an authority, not a path.
	unknown := req.ContentLength < 0 || req.ContentLength == 0 && req.Body != nil && req.Body != http.NoBody
	if req.ContentLength > MaxBody || unknown || req.Method == http.MethodConnect {
		return t.fallback.RoundTrip(req.WithContext(ctx))
	}
	// writeRequest closes what it writes; this closes what is never written.
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

func (t *Transport) exchange(ctx context.Context, c *conn, req *http.Request) (*http.Response, error) {
	c.ctx, c.stop = ctx, nil
	c.cw.ww.BeforeWait = c.arm
	fail := func(err error) (*http.Response, error) {
		c.disarm()
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
	// A body that was slow to read (a streamed form) may have outlived the caller: what is
	// still held is not sent. (The hook is armed once a write waits, so earlier writes of a
	// large body met a cancellation at their next wait.)
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	c.cw.ww.Wait = true
	err := c.bw.Flush()
	c.cw.ww.Wait = false
	if err != nil {
		return fail(err)
	}
	if c.stop == nil {
		c.armAbort() // the write did not wait: the hook is armed before the answer is read
		c.cw.ww.BeforeWait = nil
	}
	// The limit bounds the heads of informational responses and the answer's together, as
	// http.Transport's does: however many 1xx an upstream sends, it cannot make this read for ever.
	c.lr.n = t.maxHead
	a := new(answer)
	var res *http.Response
	for {
		var err error
		if res, err = readAnswer(c.br, req, a); err != nil {
			return fail(err)
		}
		if res.StatusCode == http.StatusSwitchingProtocols {
			// Never asked for here: the connection now speaks something else.
			return fail(errors.New("h1client: upstream switched protocols unasked"))
		}
		if res.StatusCode < 100 || res.StatusCode > 199 { // a status below 100 is final, as there
			break
		}
	}
	c.lr.n = 1<<63 - 1
	reuse := !res.Close && !req.Close
	if res.Body == http.NoBody {
		// Nothing to read (HEAD, 204, 304, Content-Length: 0): the connection is free now, as
		// http.Transport frees it, whether or not the caller reads the body or closes it.
		if c.disarm() && reuse && c.br.Buffered() == 0 {
			t.put(c)
		} else {
			c.nc.Close()
		}
		return res, nil
	}
	b := &a.body
	b.rc, b.c, b.t, b.ctx, b.reuse = res.Body, c, t, ctx, reuse
	res.Body = b
	return res, nil
}

var aLongTimeAgo = time.Unix(1, 0)

// checkHeader refuses header fields http.Transport would refuse (Request.Write would only turn
// a line break into a space): a value with a line break may be an attempt to smuggle a second
// header or request.
func checkHeader(h http.Header) error {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("h1client: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("h1client: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// body is a response body: at its end the connection goes back to the pool; closed before its
// end, or failing, the connection is closed.
type body struct {
	rc     io.ReadCloser
	c      *conn
	t      *Transport
	ctx    context.Context
	reuse  bool
	done   atomic.Bool
	closed atomic.Bool
	err    error
}

var errBodyClosed = errors.New("h1client: read on closed response body")

func (b *body) Read(p []byte) (int, error) {
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

func (b *body) Close() error {
	b.closed.Store(true)
	b.release(false)
	return nil
}

// release ends the body once: the connection is reused only after the whole body was read, with
// nothing unsolicited after it and the cancellation hook removed before it fired.
func (b *body) release(atEOF bool) {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	stopped := b.c.disarm()
	if atEOF && stopped && b.reuse && b.c.br.Buffered() == 0 {
		b.t.put(b.c)
		return
	}
	b.c.nc.Close()
}
