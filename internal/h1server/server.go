// Package h1server serves HTTP/1.1 connections to an http.Handler on a connection loop of the
// gateway's own: one goroutine per connection, which reads a request, runs the handler and
// writes its answer, then reads the next.
//
// Why not net/http's server, which the gateway uses for everything else: profiled at 64 requests
// in flight (docs/performance.md, "Against nginx"), net/http's server costs twice the CPU of a
// plain loop for a proxied request, and the gateway's own work is a small part of it. Per
// request it starts a goroutine to watch the connection while the handler runs, then stops it
// and waits for it (about 15 µs of scheduling delay a request at one in flight), and reads the
// socket once more than the exchange needs. This server watches a connection only for requests
// that outlive watchAfter (a stream, a long generation), where one goroutine is nothing against
// the request. fasthttp's server, the well-kept alternative, has its own request and response
// types (an adapter to http.Handler buffers whole answers, which breaks streams) and measured
// 10% behind a plain loop.
//
// Requests are parsed as net/http's own parser parses them (the common head by internal/httphead,
// held to http.ReadRequest by FuzzReadRequest; every other by http.ReadRequest: framing, chunked
// bodies and trailers, header syntax) with the checks net/http's server adds on top (Host, header names and
// values, Expect, the header size bound), so what is accepted and refused is net/http's; the
// answer's framing follows net/http's too (Content-Length when the handler's answer fits its
// buffer, chunked otherwise, sniffed Content-Type, Date). What differs, deliberately:
//   - A request whose body came chunked closes its connection after its answer (RFC 9112 §6.1:
//     net/http drops the Content-Length of a request that also had Transfer-Encoding, so the
//     two cannot be told apart; an intermediary may have framed it by its length).
//   - An HTTP/1.0 connection is kept alive only for a request without a body (Go's parser drops
//     an HTTP/1.0 request's Transfer-Encoding, so its framing cannot be trusted).
//   - An empty Host header is refused (http.ReadRequest hides it among absent ones), and so is
//     an absolute-form request target (a forward proxy's: it hides whether Host came).
//   - No Hijack (a 101 ends the connection), no HTTP/2 upgrade, no TLS (the gateway's router
//     hands it plain HTTP/1 only), and the request's context carries no server values.
package h1server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/infergate/infergate/internal/httphead"
	"github.com/infergate/infergate/internal/sockio"
)

// Server serves HTTP/1.x connections to Handler. Its zero value is not usable: set Handler.
type Server struct {
	Handler http.Handler
	// HeaderTimeout bounds the time a request's header may take to arrive, from its first byte
	// (10 s when zero).
	HeaderTimeout time.Duration
	// IdleTimeout closes a connection that waits this long for its next request (5 min when
	// zero), or up to a sixteenth longer: the deadline is not moved for every request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (http.DefaultMaxHeaderBytes, 1 MiB, when zero).
	MaxHeaderBytes int
	// Logger gets handler panics and the connection errors worth an operator's look.
	Logger *slog.Logger

	dateCache atomic.Pointer[dateEntry]
	held      sync.Pool // *[bufferSize]byte: responses' held bodies, between their first write and their header
	watches   watchList // the young requests, for their watches

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown atomic.Bool
	done     chan struct{} // closed when the last connection ends after Shutdown
}

// ErrServerClosed is Serve's error after Shutdown or Close (net/http's, so callers test one).
var ErrServerClosed = http.ErrServerClosed

// Serve accepts connections from ln and serves each until ln fails or the server is shut down.
func (s *Server) Serve(ln net.Listener) error {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.shutdown.Load() {
				return ErrServerClosed
			}
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		go s.ServeConn(c)
	}
}

// ServeConn serves one connection until it closes, the client's framing can no longer be
// trusted, or the server shuts down.
func (s *Server) ServeConn(nc net.Conn) {
	c := newConn(s, nc)
	if !s.track(c, true) {
		nc.Close()
		return
	}
	defer s.track(c, false)
	c.serve()
}

// track adds or removes c; adding fails once the server is shutting down.
func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.shutdown.Load() {
			return false
		}
		if s.conns == nil {
			s.conns = make(map[*conn]struct{})
		}
		s.conns[c] = struct{}{}
		return true
	}
	delete(s.conns, c)
	if len(s.conns) == 0 && s.done != nil {
		close(s.done)
		s.done = nil
	}
	return true
}

// Shutdown stops taking new connections, ends idle ones, lets each busy one finish the request
// it is serving (and closes it after), and waits for them all, or for ctx; then it closes what
// is left and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown.Store(true)
	if len(s.conns) == 0 {
		s.mu.Unlock()
		return nil
	}
	if s.done == nil { // a second Shutdown waits for the same end
		s.done = make(chan struct{})
	}
	done := s.done
	for c := range s.conns {
		c.wakeIfIdle()
	}
	s.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close closes every connection at once.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown.Store(true)
	for c := range s.conns {
		c.nc.Close()
	}
	return nil
}

func (s *Server) headerTimeout() time.Duration {
	if s.HeaderTimeout > 0 {
		return s.HeaderTimeout
	}
	return 10 * time.Second
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return 5 * time.Minute
}

func (s *Server) maxHeaderBytes() int64 {
	if s.MaxHeaderBytes > 0 {
		return int64(s.MaxHeaderBytes)
	}
	return http.DefaultMaxHeaderBytes
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// watchAfter is how long a request runs, at least, before its connection is watched for the
// client going away (which cancels the request's context): the server's sweep (watchList) looks
// every watchAfter, so a request is watched once it has run for 5 to 10 ms. One that ends sooner
// costs a clock read and a link in the sweep's list.
const watchAfter = 5 * time.Millisecond

// maxPostHandlerRead is how much of a body the handler left unread is read after it, so that the
// connection can carry the next request (net/http's bound); past it the connection is closed.
const maxPostHandlerRead = 256 << 10

// bufferSize is the connection's read and write buffers, and how much of an answer is held
// before its header goes out (so that a small answer gets a Content-Length).
const bufferSize = 4 << 10

// conn is one client connection.
type conn struct {
	s      *Server
	nc     net.Conn
	r      connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	out    sockio.Writer // what bw writes to
	remote string

	// state is idle while the connection waits for a request's first byte: Shutdown wakes it
	// then (its read deadline), and it ends.
	state atomic.Int32

	// watch, for the request being served, notices the client going away.
	watch watch

	// deadline sets the socket's read deadline, keeping the idle wait's armed across requests.
	deadline readDeadline
}

const (
	stateActive = iota
	stateIdle
	stateWoken // by Shutdown, while idle: it ends
)

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
	c.r.nc = nc
	c.br = bufio.NewReaderSize(&c.r, bufferSize)
	var raw syscall.RawConn
	if rc, ok := nc.(ReadAheadConn); ok {
		raw, _ = rc.SyscallConn()
		c.r.pending = rc.Pending
	}
	c.out.Init(nc, raw)
	c.r.in.Init(nc, raw)
	c.bw = bufio.NewWriterSize(&c.out, bufferSize)
	c.watch.c = c
	return c
}

// ReadAheadConn is a connection some of whose first bytes were read before the server got it
// (a protocol router's sniff) and are given back by its Read; its Write and, once Pending is 0,
// its reads are its socket's. Given one, or a *net.TCPConn, the server sends an answer and waits
// for the next request in one step (sockio), a system call fewer a request.
type ReadAheadConn interface {
	net.Conn
	syscall.Conn
	// Pending is how many bytes Read will give back from memory before it reads the socket.
	Pending() int
}

// wakeIfIdle ends the wait of an idle connection for its next request (Shutdown). A connection
// whose request has begun is left to finish it: the state's compare-and-swap decides which.
func (c *conn) wakeIfIdle() {
	if c.state.CompareAndSwap(stateIdle, stateWoken) {
		c.deadline.set(c.nc, aLongTimeAgo)
	}
}

var aLongTimeAgo = time.Unix(1, 0)

func (c *conn) serve() {
	defer func() {
		_ = c.bw.Flush() // an answer held for the idle wait (see readRequest) goes out
		c.nc.Close()
	}()
	first := true
	for {
		req, err := c.readRequest(first)
		first = false
		if err != nil {
			c.refuse(err)
			return
		}
		if !c.serveRequest(req) || c.s.shutdown.Load() {
			return
		}
	}
}

// errIdle ends a connection quietly: it closed, timed out or was woken between requests.
var errIdle = errors.New("h1server: idle connection ended")

// readRequest waits for a request (after the first, up to the idle timeout) and reads its
// header (up to the header timeout from its first byte).
func (c *conn) readRequest(first bool) (*http.Request, error) {
	header := false // the header deadline is set on the connection
	if c.br.Buffered() == 0 && !first {
		c.state.Store(stateIdle)
		c.deadline.idle(c.nc, c.s.idleTimeout()) // left armed through a request that reads no more
		// After the deadline is set: a Shutdown that set its own before is seen here.
		if c.s.shutdown.Load() {
			return nil, errIdle
		}
		// The last answer's held bytes go out as the wait for the next request begins
		// (sockio); a wait that fails is met again by the read below.
		if c.bw.Buffered() > 0 {
			c.out.Wait = c.r.socketNext()
			err := c.bw.Flush()
			c.out.Wait = false
			if err != nil {
				return nil, errIdle
			}
		}
		_, err := c.br.Peek(1)
		if !c.state.CompareAndSwap(stateIdle, stateActive) || err != nil {
			return nil, errIdle // woken by Shutdown (a request that came just then is not served)
		}
	}
	if err := c.bw.Flush(); err != nil { // a pipelined request: the answer before it goes now
		return nil, errIdle
	}
	// A head already whole in the buffer needs no read, so no header deadline: one timer
	// change fewer for most requests (the idle wait's deadline, if armed, stays: see
	// readDeadline).
	if buf, _ := c.br.Peek(c.br.Buffered()); httphead.End(buf) < 0 {
		c.deadline.set(c.nc, time.Now().Add(c.s.headerTimeout()))
		header = true
	}
	c.r.limit = c.s.maxHeaderBytes() + 4096 // net/http's slop for the request line and framing
	req, fieldsChecked, err := readRequest(c.br)
	hitLimit := c.r.limit <= 0
	c.r.limit = -1
	if header {
		c.deadline.set(c.nc, time.Time{})
	}
	if err != nil {
		if hitLimit {
			return nil, errTooLarge
		}
		return nil, err
	}
	if err := check(req, fieldsChecked); err != nil {
		return nil, err
	}
	req.RemoteAddr = c.remote
	return req, nil
}

// errTooLarge is a header past MaxHeaderBytes.
var errTooLarge = errors.New("h1server: request header too large")

// badRequest is a request the server refuses with a 400 and the connection's end.
type badRequest string

func (e badRequest) Error() string { return string(e) }

// check makes the checks net/http's server makes of a parsed request before a handler sees it;
// with fieldsChecked, those of its header fields' names and values are already made.
func check(req *http.Request, fieldsChecked bool) error {
	if req.ProtoMajor != 1 {
		return errVersion
	}
	// http.ReadRequest has moved the Host header to req.Host (refusing two of them), so an
	// empty one reads as none: both are refused here (net/http's server takes an empty one).
	// An absolute-form target (a forward proxy's) sets req.Host from itself, hiding whether the
	// required Host header came: refused, since the gateway is no forward proxy.
	if req.URL.Host != "" && req.Method != http.MethodConnect {
		return badRequest("absolute-form request target")
	}
	if req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect {
		return badRequest("missing required Host header")
	}
	if !httpguts.ValidHostHeader(req.Host) {
		return badRequest("malformed Host header")
	}
	if !fieldsChecked {
		if err := checkFields(req.Header); err != nil {
			return err
		}
	}
	if req.Method == http.MethodConnect {
		return errNotImplemented
	}
	return nil
}

// checkFields refuses the header field names and values net/http's server refuses.
func checkFields(h http.Header) error {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return badRequest("invalid header name")
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return badRequest("invalid header value")
			}
		}
	}
	return nil
}

var (
	errVersion        = errors.New("h1server: unsupported HTTP version")
	errNotImplemented = errors.New("h1server: not implemented")
)

// refuse answers a request that could not be read, as net/http's server does, and the
// connection ends after it.
func (c *conn) refuse(err error) {
	if errors.Is(err, errIdle) || errors.Is(err, io.EOF) || isTimeout(err) || errors.Is(err, net.ErrClosed) {
		return // the client left, went silent, or the server woke an idle connection
	}
	status, text := http.StatusBadRequest, "Bad Request"
	var br badRequest
	switch {
	case errors.Is(err, errTooLarge):
		status, text = http.StatusRequestHeaderFieldsTooLarge, "Request Header Fields Too Large"
	case errors.Is(err, errVersion):
		status, text = http.StatusHTTPVersionNotSupported, "HTTP Version Not Supported"
	case errors.Is(err, errNotImplemented), isUnsupportedTE(err):
		status, text = http.StatusNotImplemented, "Unsupported transfer encoding"
	case errors.As(err, &br):
		text = "Bad Request: " + string(br)
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(c.nc, "HTTP/1.1 "+strconv.Itoa(status)+" "+http.StatusText(status)+
		"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"+strconv.Itoa(status)+" "+text)
	c.closeWriteAndWait()
}

func isUnsupportedTE(err error) bool {
	return strings.Contains(err.Error(), "unsupported transfer encoding")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// serveRequest runs the handler for req and finishes its answer; it reports whether the
// connection can carry another request.
func (c *conn) serveRequest(req *http.Request) (keep bool) {
	// Not a child of a connection's context: one with no parent to register with costs less,
	// and the request's ends with it, or with the watch's cancel, either way.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The answer and the request's body in one allocation.
	x := new(struct {
		w    response
		body requestBody
	})
	body, w := &x.body, &x.w
	body.rc, body.c, body.length = req.Body, c, req.ContentLength
	w.c, w.req, w.header, w.body, w.cancel = c, req, make(http.Header, 8), body, cancel
	// Expect, as net/http's server takes it: 100-continue is answered when the handler first
	// reads the body; any other expectation is refused.
	if ex := req.Header.Get("Expect"); expectsContinue(ex) {
		if req.ProtoAtLeast(1, 1) && req.ContentLength != 0 {
			body.w = w
			body.cont.Store(contPending)
		}
	} else if ex != "" {
		w.closeAfter = true
		w.WriteHeader(http.StatusExpectationFailed)
		w.finish(false)
		c.closeWriteAndWait()
		return false
	}
	req.Body = body
	if req.ContentLength < 0 || int64(c.br.Buffered()) < req.ContentLength {
		c.deadline.clearIdle(c.nc) // the body is read from the socket, for as long as it takes
	}
	if req.ContentLength == 0 && len(req.TransferEncoding) == 0 {
		body.eof.Store(true) // nothing to read: watchable from the start
		// As net/http's server gives it: a client that forwards it knows it is empty.
		req.Body = http.NoBody
	}
	// In place: the request is the server's alone, and WithContext's copy (a request's size)
	// stays on the stack.
	*req = *req.WithContext(ctx)
	// HTTP/1.0 closes unless it asked to be kept alive (ReadRequest's Close says which) and
	// sent no body: Go's parser drops an HTTP/1.0 request's Transfer-Encoding, so a body's
	// framing cannot be trusted there (RFC 9112 §6.1).
	w.closeAfter = req.Close || len(req.TransferEncoding) > 0 || !req.ProtoAtLeast(1, 1) && req.ContentLength != 0
	h := c.s.Handler
	if req.RequestURI == "*" && req.Method == http.MethodOptions {
		h = optionsAsterisk // as net/http's server: no handler is asked about the server as a whole
	}
	c.watch.start(cancel, body)
	ok := c.runHandler(h, w, req)
	c.watch.stop()
	if !ok {
		return false // the handler panicked: the answer cannot be trusted to be whole
	}
	// A whole answer on a connection that stays open is held in bw: readRequest sends it as it
	// starts waiting for the next request.
	if !w.finish(!w.closeAfter && body.eof.Load()) {
		return false
	}
	if w.closeAfter || !body.drain() {
		if !body.eof.Load() {
			c.closeWriteAndWait() // the client may still be sending: let it read the answer
		}
		return false
	}
	return true
}

// closeWriteAndWait ends the connection's writing side and reads (and drops) what the client
// still sends, for a bounded time, before the close: closing a socket with unread bytes in it
// resets the connection, and a client may then lose the answer it was sent.
func (c *conn) closeWriteAndWait() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		c.deadline.set(c.nc, time.Now().Add(500*time.Millisecond))
		_, _ = io.CopyN(io.Discard, c.nc, maxPostHandlerRead)
	}
}

// expectsContinue reports whether an Expect value names 100-continue among its words (split at
// spaces, tabs and commas, in any case), as net/http's server reads it.
func expectsContinue(v string) bool {
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }) {
		if strings.EqualFold(f, "100-continue") {
			return true
		}
	}
	return false
}

// runHandler runs the handler, recovering a panic as net/http does (http.ErrAbortHandler
// quietly); it reports whether the handler returned normally.
func (c *conn) runHandler(h http.Handler, w *response, req *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				c.s.logger().Error("h1server: panic serving "+c.remote, "panic", v, "stack", string(debug.Stack()))
			}
			ok = false
			_ = c.bw.Flush() // what was written goes out; then the connection ends
		}
	}()
	h.ServeHTTP(w, req)
	return true
}

// optionsAsterisk answers OPTIONS * with an empty 200.
var optionsAsterisk = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Length", "0")
})

// connReader reads the connection for the bufio.Reader: bounded while a header is read (limit
// >= 0), and first giving back a byte the watch read. Its socket is read through in (sockio's
// raw reads) once the bytes a protocol router read ahead (pending) are given back.
type connReader struct {
	nc net.Conn
	in sockio.Reader
	// pending, for a connection read ahead of the server (the gateway's protocol router), is
	// how many of its bytes are in memory rather than in the socket; nil: none ever are.
	pending func() int
	limit   int64 // bytes the header may still take; -1: unbounded
	peeked  []byte
	peek    [1]byte
}

// socketNext reports whether the next read is the socket's: no byte is held in memory ahead of
// it (one the watch read, the router's), which the socket's readiness would not show.
func (r *connReader) socketNext() bool {
	return len(r.peeked) == 0 && (r.pending == nil || r.pending() == 0)
}

func (r *connReader) Read(p []byte) (int, error) {
	if r.limit == 0 {
		return 0, io.EOF
	}
	if r.limit > 0 && int64(len(p)) > r.limit {
		p = p[:r.limit]
	}
	var n int
	var err error
	switch {
	case len(r.peeked) > 0:
		n = copy(p, r.peeked)
		r.peeked = r.peeked[n:]
	case r.socketNext():
		n, err = r.in.Read(p)
	default: // the router's bytes, through its Read
		n, err = r.nc.Read(p)
	}
	if r.limit > 0 {
		r.limit -= int64(n)
	}
	return n, err
}

// readDeadline keeps the idle wait's read deadline armed through a request that reads nothing
// more from the socket (its body came with its head), and moves it only when it would end the
// next wait too soon: two timer changes fewer a request (BenchmarkHotPath's profile). Whatever
// else reads the socket during a request clears it first (a body still to come, the watch), and
// whatever sets a deadline of its own (the header's, drain's, the handler's) replaces it. The
// watch and a handler's own deadline may race, hence the lock.
type readDeadline struct {
	mu       sync.Mutex
	idleTill time.Time // the idle wait's deadline, armed on the socket; zero when it is not
}

// idle arms the idle wait's deadline: timeout from now at the least, a sixteenth more at the
// most. One armed that ends no sooner than timeout from now is left as it is; otherwise the
// deadline is set a sixteenth later than needed, so the next requests within that sixteenth
// change nothing.
func (d *readDeadline) idle(nc net.Conn, timeout time.Duration) {
	now := time.Now()
	d.mu.Lock()
	if d.idleTill.Before(now.Add(timeout)) {
		d.idleTill = now.Add(timeout + timeout/16)
		_ = nc.SetReadDeadline(d.idleTill)
	}
	d.mu.Unlock()
}

// set sets the socket's read deadline (zero: none).
func (d *readDeadline) set(nc net.Conn, t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.idleTill = time.Time{}
	return nc.SetReadDeadline(t)
}

// clearIdle removes the idle wait's deadline if it is armed, before the socket is read during a
// request.
func (d *readDeadline) clearIdle(nc net.Conn) {
	d.mu.Lock()
	if !d.idleTill.IsZero() {
		d.idleTill = time.Time{}
		_ = nc.SetReadDeadline(time.Time{})
	}
	d.mu.Unlock()
}
