package h1server

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the http.ResponseWriter of one request. It holds the answer's first bufferSize
// bytes before its header goes out, so that an answer the handler writes whole gets a
// Content-Length and leaves in one write with its header; a longer one, or one flushed before
// its end, goes chunked (HTTP/1.1) or ends with the connection (HTTP/1.0).
type response struct {
	c      *conn
	req    *http.Request
	header http.Header
	body   *requestBody

	status      int
	wroteHeader bool              // the final status is set
	committed   bool              // the header is in the connection's buffer
	chunked     bool              // the body goes as chunks
	length      int64             // the Content-Length the handler set; -1 none
	written     int64             // body bytes the handler wrote
	held        []byte            // the body so far, before the header goes out
	heldArr     *[bufferSize]byte // held's buffer, from the server's pool
	closeAfter  bool              // the connection ends after this answer
	noBody      bool              // HEAD, 1xx, 204, 304: no body goes out
	head        bool              // HEAD: writes are counted, not sent
	trailers    []string
	err         error  // the first write error: the connection is gone
	done        bool   // the handler has returned
	fullDuplex  bool   // the handler reads the body while it answers (EnableFullDuplex)
	cancel      func() // the request's context's: a failed write ends it, as in net/http
}

var (
	_ http.ResponseWriter = (*response)(nil)
	_ http.Flusher        = (*response)(nil)
)

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http
	}
	if w.wroteHeader || w.committed {
		w.c.s.logger().Warn("h1server: superfluous WriteHeader call", "code", code, "path", w.req.URL.Path)
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.informational(code)
		return
	}
	w.body.cancelContinue()
	w.wroteHeader, w.status = true, code
	w.length = -1
	if cl := w.header["Content-Length"]; len(cl) > 0 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil && n >= 0 {
			w.length = n
		} else {
			delete(w.header, "Content-Length") // as net/http: an invalid length is dropped
		}
	}
	w.head = w.req.Method == http.MethodHead
	w.noBody = w.head || code == http.StatusNoContent || code == http.StatusNotModified || code == http.StatusSwitchingProtocols
	if code == http.StatusSwitchingProtocols {
		w.closeAfter = true // no upgrade is served here: what follows is not HTTP/1 to read
	}
}

// informational sends a 1xx answer at once (103 Early Hints with the header so far). A 100 goes
// once, and only while the client may wait for it: not after the answer's header. The body's
// reader may send it from another goroutine than the handler's, so every 1xx is sent under the
// body's lock, and WriteHeader takes it to end the wait for one (net/http's writeContinueMu).
func (w *response) informational(code int) {
	b := w.body
	b.contMu.Lock()
	defer b.contMu.Unlock()
	if code == http.StatusContinue {
		if b.cont.Load() != contPending {
			return // sent already, not asked for, or the answer has begun
		}
		defer b.cont.Store(contSent) // after the write: whoever sees it sees the write done
	}
	bw := w.c.bw
	w.statusLine(code)
	if code != http.StatusContinue {
		w.writeHeaderLines(w.header, true)
	}
	bw.WriteString("\r\n")
	w.setErr(bw.Flush())
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		if w.head {
			// Not sent, but its first bytes are held for the Content-Type sniffed from them,
			// as net/http's server gives a HEAD the type the GET would have.
			if !w.committed && len(w.held) < sniffLen {
				w.hold(p[:min(len(p), sniffLen-len(w.held))])
			}
			w.written += int64(len(p))
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if len(w.held)+len(p) <= bufferSize {
			w.hold(p)
			return len(p), nil
		}
		w.commitHeld(false)
	}
	w.writeBody(p)
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// sniffLen is how much of a body http.DetectContentType reads.
const sniffLen = 512

// hold keeps p in the held body, which has room for it.
func (w *response) hold(p []byte) {
	if w.held == nil {
		w.heldArr = w.c.s.heldBuf()
		w.held = w.heldArr[:0]
	}
	w.held = append(w.held, p...)
}

// WriteString spares io.WriteString's conversion.
func (w *response) WriteString(s string) (int, error) {
	return w.Write([]byte(s))
}

// writeBody writes body bytes after the header, as a chunk when chunked.
func (w *response) writeBody(p []byte) {
	if len(p) == 0 || w.err != nil {
		return
	}
	bw := w.c.bw
	if w.chunked {
		// Appended to the writer's free space (a scratch array would escape through Write).
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, err := bw.WriteString("\r\n")
		w.setErr(err)
		return
	}
	_, err := bw.Write(p)
	w.setErr(err)
}

func (w *response) setErr(err error) {
	if err != nil && w.err == nil {
		w.err = err
		w.closeAfter = true
		w.cancel()
	}
}

// Flush sends what has been written: the header and the body so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error (http.ResponseController's).
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commitHeld(false)
	}
	if w.err == nil {
		w.setErr(w.c.bw.Flush())
	}
	return w.err
}

// commitHeld puts the header and the body held so far in the connection's buffer.
func (w *response) commitHeld(final bool) {
	w.commit(final)
	if !w.noBody { // a HEAD's held bytes were only for sniffing
		w.writeBody(w.held)
	}
	w.releaseHeld()
}

// releaseHeld gives the held body's buffer back (its bytes are in the connection's buffer).
func (w *response) releaseHeld() {
	if w.heldArr != nil {
		w.c.s.held.Put(w.heldArr)
		w.held, w.heldArr = nil, nil
	}
}

// SetWriteDeadline and SetReadDeadline serve http.ResponseController.
func (w *response) SetWriteDeadline(t time.Time) error { return w.c.nc.SetWriteDeadline(t) }

func (w *response) SetReadDeadline(t time.Time) error { return w.c.deadline.set(w.c.nc, t) }

// EnableFullDuplex lets the handler read the body after its answer has begun: the body is then
// not read (and dropped) before the answer's header goes out.
func (w *response) EnableFullDuplex() error {
	w.fullDuplex = true
	return nil
}

// commit puts the status line and header in the connection's buffer, choosing the framing:
// final when the handler has returned and the whole body is held.
func (w *response) commit(final bool) {
	w.committed = true
	w.settleBody()
	h := w.header
	if c, ok := h["Connection"]; ok && hasToken(c, "close") || w.c.s.shutdown.Load() {
		w.closeAfter = true // the handler's wish, or the server shutting down
	}
	sniff := !w.noBody || w.head && w.status >= 200 && w.status != http.StatusNoContent && w.status != http.StatusNotModified
	if _, ok := h["Content-Type"]; !ok && sniff && len(w.held) > 0 && len(h["Transfer-Encoding"]) == 0 {
		h["Content-Type"] = []string{http.DetectContentType(w.held)}
	}
	if tr := h["Trailer"]; len(tr) > 0 {
		for _, v := range tr {
			for _, k := range strings.Split(v, ",") {
				// Framing, routing and the like may not come as trailers (RFC 9110 §6.5.1): net/http's
				// server drops them from the declared too.
				if k = textprotoKey(strings.TrimSpace(k)); k != "" && httpguts.ValidTrailerHeader(k) {
					w.trailers = append(w.trailers, k)
				}
			}
		}
	}
	te := h["Transfer-Encoding"]
	delete(h, "Transfer-Encoding") // the framing is the server's
	switch {
	case w.noBody:
		delete(h, "Content-Length")
		if w.head && w.length >= 0 {
			h["Content-Length"] = []string{strconv.FormatInt(w.length, 10)}
		} else if w.head && final && w.written > 0 {
			h["Content-Length"] = []string{strconv.FormatInt(w.written, 10)}
		}
	case w.status < 200:
	case w.length >= 0 && len(te) == 0:
	case final && len(w.trailers) == 0 && len(te) == 0:
		h["Content-Length"] = []string{strconv.Itoa(len(w.held))}
	case w.req.ProtoAtLeast(1, 1):
		delete(h, "Content-Length")
		w.chunked = true
	default: // HTTP/1.0: the body ends with the connection
		delete(h, "Content-Length")
		w.closeAfter = true
	}
	if w.closeAfter && !hasToken(h["Connection"], "close") {
		h["Connection"] = []string{"close"}
	} else if !w.closeAfter && !w.req.ProtoAtLeast(1, 1) {
		h["Connection"] = []string{"keep-alive"} // an HTTP/1.0 client that asked for it
	}
	w.statusLine(w.status)
	if _, ok := h["Date"]; !ok {
		w.c.bw.WriteString("Date: ")
		w.c.bw.Write(w.c.s.date())
		w.c.bw.WriteString("\r\n")
	}
	w.writeHeaderLines(h, false)
	if w.chunked {
		w.c.bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	_, err := w.c.bw.WriteString("\r\n")
	w.setErr(err)
}

// statusLine writes "HTTP/1.1 code text".
func (w *response) statusLine(code int) {
	bw := w.c.bw
	bw.WriteString("HTTP/1.1 ")
	// Appended to the writer's free space (a scratch array would escape through Write).
	bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), int64(code), 10))
	}
	bw.WriteString("\r\n")
}

// settleBody reads what is left of the request's body before the answer's header goes out, as
// net/http's server does, so that a client that sends its whole request before it reads is not
// left blocked: up to maxPostHandlerRead, within the header timeout. A body it cannot so read
// (more than that left, a 100 Continue never sent, a client that does not send it) makes the
// answer say Connection: close, and the connection ends after it.
func (w *response) settleBody() {
	b := w.body
	if w.req.ContentLength == 0 || w.closeAfter || w.fullDuplex || b.eof.Load() {
		return
	}
	switch {
	case b.cont.Load() == contUnsent:
		w.closeAfter = true // the client may be waiting for the 100 to send it
	case b.length >= 0 && b.length-b.read.Load() >= maxPostHandlerRead:
		w.closeAfter = true
	default:
		w.closeAfter = !b.drain()
	}
}

// writeHeaderLines writes h as header lines: names that are not tokens, and trailers, are left
// out; a line break in a value becomes a space (so no value can end the header: net/http's
// rules). An informational (1xx) answer carries no framing headers.
func (w *response) writeHeaderLines(h http.Header, informational bool) {
	bw := w.c.bw
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) || strings.HasPrefix(k, http.TrailerPrefix) ||
			informational && (k == "Content-Length" || k == "Transfer-Encoding") {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			if hasLineBreak(v) {
				v = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(v)
			}
			bw.WriteString(strings.TrimSpace(v))
			bw.WriteString("\r\n")
		}
	}
}

// hasLineBreak reports whether v holds a CR or an LF: strings.ContainsAny(v, "\r\n") builds a
// set of the two on each call, which showed in the proxy's profile.
func hasLineBreak(v string) bool {
	return strings.IndexByte(v, '\n') >= 0 || strings.IndexByte(v, '\r') >= 0
}

// finish completes the answer once the handler has returned: the header if it has not gone, the
// held body, a chunked body's end and trailers; it reports whether the answer went out whole.
func (w *response) finish(hold bool) bool {
	w.done = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commitHeld(true)
	}
	if w.chunked && w.err == nil {
		w.c.bw.WriteString("0\r\n")
		for _, k := range w.trailers {
			for _, v := range w.header[k] {
				w.writeTrailer(k, v)
			}
		}
		for k, vv := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
				for _, v := range vv {
					w.writeTrailer(textprotoKey(name), v)
				}
			}
		}
		_, err := w.c.bw.WriteString("\r\n")
		w.setErr(err)
	}
	if w.length >= 0 && w.written != w.length && !w.noBody {
		w.closeAfter = true // short of its Content-Length: the client must see the end
	}
	if w.err == nil && (!hold || w.closeAfter) {
		w.setErr(w.c.bw.Flush())
	}
	return w.err == nil
}

func (w *response) writeTrailer(k, v string) {
	if !httpguts.ValidHeaderFieldName(k) || hasLineBreak(v) {
		return
	}
	bw := w.c.bw
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

// textprotoKey is k in canonical form, or "" for a name that is not a token.
func textprotoKey(k string) string {
	if !httpguts.ValidHeaderFieldName(k) {
		return ""
	}
	return http.CanonicalHeaderKey(k)
}

// hasToken reports whether a comma-separated header holds token, in any case.
func hasToken(vv []string, token string) bool {
	for _, v := range vv {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// requestBody is a request's body as the handler reads it. Its Close does not read the rest
// (http.ReadRequest's body would read all of it): after the handler, drain reads a bounded part
// and the connection ends if more is left. Its end starts the watch of a long request.
type requestBody struct {
	rc io.ReadCloser
	c  *conn
	// cont is where 100 Continue stands (contNone when not asked for); contMu orders its write
	// against the answer's header (see informational), w sends it.
	cont   atomic.Int32
	contMu sync.Mutex
	w      *response
	length int64 // the request's Content-Length; -1: chunked
	// mu serializes the reads of rc: a handler may read its body on another goroutine while
	// its answer's header, going out, drains what is left (settleBody), as net/http's body
	// allows.
	mu     sync.Mutex
	read   atomic.Int64 // bytes read so far
	eof    atomic.Bool
	closed atomic.Bool
}

// Where 100 Continue stands for a request that asked for it.
const (
	contNone    = iota
	contPending // asked for; sent on the body's first read
	contSent
	contUnsent // the answer began first: the client may still wait, so the connection ends
)

// cancelContinue ends the wait for a 100 Continue as the answer's header is written: one under
// way (another goroutine reading the body) is finished first.
func (b *requestBody) cancelContinue() {
	if b.cont.Load() != contPending {
		return
	}
	b.contMu.Lock()
	if b.cont.Load() == contPending {
		b.cont.Store(contUnsent)
	}
	b.contMu.Unlock()
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.cont.Load() == contPending {
		b.w.informational(http.StatusContinue)
	}
	b.mu.Lock()
	n, err := b.rc.Read(p)
	b.read.Add(int64(n))
	b.mu.Unlock()
	if err == io.EOF && !b.eof.Load() {
		b.eof.Store(true)
		b.c.watch.bodyDone(b)
	}
	return n, err
}

func (b *requestBody) Close() error {
	b.closed.Store(true)
	return nil
}

// drain reads what the handler left of the body, up to maxPostHandlerRead and within the header
// timeout, and reports whether the connection can carry another request (the body ended, and
// 100 Continue was not awaited).
func (b *requestBody) drain() bool {
	if b.eof.Load() {
		return true
	}
	if b.cont.Load() == contUnsent || b.length >= 0 && b.length-b.read.Load() > maxPostHandlerRead {
		return false // awaited, or too much left: not worth reading
	}
	// The deadline goes first: a read under way on another goroutine, which holds mu, ends by it
	// too, so the drain waits no longer than it did alone.
	b.c.deadline.set(b.c.nc, time.Now().Add(b.c.s.headerTimeout()))
	b.mu.Lock()
	n, err := io.CopyN(io.Discard, b.rc, maxPostHandlerRead+1)
	b.read.Add(n)
	b.mu.Unlock()
	b.c.deadline.set(b.c.nc, time.Time{})
	if errors.Is(err, io.EOF) && n <= maxPostHandlerRead {
		b.eof.Store(true)
		b.c.watch.bodyDone(b) // read before a long answer: it may now be watched
		return true
	}
	return false
}

// watch notices a client going away during a request that outlives watchAfter, by reading the
// connection once its body has been read: an end or an error cancels the request's context,
// and a byte (a pipelined request) is kept for the next request and ends the watch.
type watch struct {
	c      *conn
	mu     sync.Mutex
	seq    uint64 // counts the connection's requests: the sweep's look is for one of them
	cancel func()
	body   *requestBody
	fired  bool // watchAfter has passed for this request
	on     bool // the request is being served
	done   chan struct{}
	// aborted, set by stop before its deadline, tells that deadline from the handler's own
	// (http.ResponseController's), whose end cancels the request as in net/http's server.
	aborted *atomic.Bool

	// In the server's watchList while its request is young (the list's mu).
	prev, next *watch
	listed     bool
	listSeq    uint64    // seq when listed
	at         time.Time // when listed
}

// start arms the watch for a request.
func (w *watch) start(cancel func(), body *requestBody) {
	w.mu.Lock()
	w.cancel, w.body, w.fired, w.on, w.done = cancel, body, false, true, nil
	w.seq++
	seq := w.seq
	w.mu.Unlock()
	w.c.s.watches.add(w, seq)
}

// fire is the sweep's: request seq has run for watchAfter.
func (w *watch) fire(seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.on || w.seq != seq {
		return // it ended, and another may have started
	}
	w.fired = true
	if w.body.eof.Load() {
		w.launch()
	}
}

// bodyDone is called when a request's body has been read to its end: the watch's request's
// (a late read of an earlier request's body is not).
func (w *watch) bodyDone(b *requestBody) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.on && w.fired && w.body == b {
		w.launch()
	}
}

// launch starts reading the connection (w.mu held).
func (w *watch) launch() {
	if w.done != nil {
		return
	}
	done := make(chan struct{})
	aborted := new(atomic.Bool)
	w.done, w.aborted = done, aborted
	cancel := w.cancel
	c := w.c
	go func() {
		defer close(done)
		if c.br.Buffered() > 0 {
			return // the next request is here already: the client is there
		}
		c.deadline.clearIdle(c.nc) // the wait for the client's end has no end of its own
		n, err := c.nc.Read(c.r.peek[:])
		if n > 0 {
			c.r.peeked = c.r.peek[:n]
			return
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && aborted.Load() {
			return // stop's deadline
		}
		cancel() // the client closed or reset the connection, or the handler's deadline passed
	}()
}

// stop ends the watch when the handler returns, waiting for its read to end.
func (w *watch) stop() {
	w.mu.Lock()
	w.on = false
	done, aborted := w.done, w.aborted
	w.done, w.aborted = nil, nil
	w.mu.Unlock()
	w.c.s.watches.remove(w)
	if done != nil {
		aborted.Store(true)
		w.c.deadline.set(w.c.nc, aLongTimeAgo)
		<-done
		w.c.deadline.set(w.c.nc, time.Time{})
	}
}

// heldBuf is a buffer for a response's held body.
func (s *Server) heldBuf() *[bufferSize]byte {
	if b, ok := s.held.Get().(*[bufferSize]byte); ok {
		return b
	}
	return new([bufferSize]byte)
}

// date is the Date header's value for now, formatted once a second.
func (s *Server) date() []byte {
	now := time.Now()
	sec := now.Unix()
	if d := s.dateCache.Load(); d != nil && d.sec == sec {
		return d.b
	}
	d := &dateEntry{sec: sec, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	s.dateCache.Store(d)
	return d.b
}

type dateEntry struct {
	sec int64
	b   []byte
}

// watchList holds a server's young requests, oldest first, for one sweep goroutine that looks
// at them every watchAfter and fires the watch of each that has run for watchAfter.
//
// Why not a timer per request: arming one (time.Timer's Reset, then Stop) costs little, but
// when no thread is waiting in the runtime's network poller, as at one request at a time, the
// runtime wakes another thread to wait for the timer (wakeNetPoller): a futex call and a
// context switch on the request's path, before it is sent upstream. Here a request costs a
// clock read, a list link and unlink, and two turns of a lock the server's requests share; it is
// watched once it has run for watchAfter, at the sweep's next look (5 to 10 ms, later when the
// sweep itself is late). While requests come less than a second apart the sweep ticks 200
// times a second.
type watchList struct {
	mu         sync.Mutex
	head, tail *watch
	started    int  // requests listed since the last tick
	quiet      int  // ticks in a row with no request listed or young
	running    bool // a sweep goroutine runs
}

type dueWatch struct {
	w   *watch
	seq uint64
}

// quietTicks is how many ticks without a request the sweep waits before it ends (a second):
// a server under steady load keeps one, an idle one has none.
const quietTicks = 200

func (l *watchList) add(w *watch, seq uint64) {
	l.mu.Lock()
	w.listed, w.listSeq, w.at = true, seq, time.Now() // in the lock: the list stays in order
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.started++
	if !l.running {
		l.running = true
		go l.sweep()
	}
	l.mu.Unlock()
}

func (l *watchList) remove(w *watch) {
	l.mu.Lock()
	if w.listed {
		l.unlink(w)
	}
	l.mu.Unlock()
}

func (l *watchList) unlink(w *watch) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next, w.listed = nil, nil, false
}

// sweep fires, every watchAfter, the watches of the requests that have run for watchAfter. It
// ends after quietTicks without a request.
func (l *watchList) sweep() {
	t := time.NewTicker(watchAfter)
	defer t.Stop()
	var due []dueWatch // the sweep's own, reused
	for range t.C {
		var end bool
		due, end = l.step(time.Now(), due[:0])
		for i, d := range due {
			d.w.fire(d.seq)
			due[i] = dueWatch{}
		}
		if end {
			return
		}
	}
}

// step is one look, at now: it takes the requests listed watchAfter ago or earlier off the
// list, appending them to due, and reports whether the sweep should end (running is then
// false, and the next request starts another).
func (l *watchList) step(now time.Time, due []dueWatch) ([]dueWatch, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := l.head; w != nil && now.Sub(w.at) >= watchAfter; w = l.head {
		due = append(due, dueWatch{w, w.listSeq})
		l.unlink(w)
	}
	if l.started == 0 && l.head == nil {
		l.quiet++
	} else {
		l.quiet = 0
	}
	l.started = 0
	if l.quiet < quietTicks {
		return due, false
	}
	l.quiet, l.running = 0, false
	return due, true
}
