package gateway

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2/hpack"
)

// The router splits one listener between two servers: cleartext HTTP/2 connections whose first
// request is gRPC go to grpc-go's native transport (the fast path for Triton and grpc-go
// clients), everything else (HTTP/1.1, gRPC-Web, Connect, /metrics) to net/http and connect-go.
//
// To see the first request it reads the client's frames up to the first HEADERS block and decodes
// its content-type. Some clients (grpc-go among them) send no request until the server's SETTINGS
// arrive, so the router sends an empty SETTINGS frame first and swallows the client's ACK of it;
// the chosen server then sees the client's bytes exactly as sent, minus that ACK.
//
// Connections that have not shown their protocol yet (HTTP/1: a first byte; HTTP/2: the preface
// and one frame) are bounded in number: at the bound the router stops accepting until one of them
// is routed or closed, and the kernel's backlog queues the rest, as netutil.LimitListener does. It
// never closes a connection it accepted for being one too many: a burst of clients (a restart
// behind a load balancer, a pool warming up) is served late instead of lost. Each such connection
// has FirstByteTimeout to show its protocol, so silent or trickling clients cannot hold the
// router's places for long.

const (
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

	frameHeaders      = 0x1
	frameSettings     = 0x4
	frameContinuation = 0x9
	flagAck           = 0x1
	flagEndHeaders    = 0x4
	flagPadded        = 0x8
	flagPriority      = 0x20

	// maxSniffFrame is HTTP/2's default SETTINGS_MAX_FRAME_SIZE, which a client may not exceed
	// before it has seen the server's settings; maxSniffBytes bounds what one connection may make
	// the router buffer before its first request.
	maxSniffFrame = 16384
	maxSniffBytes = 256 << 10
	// maxSniffControl bounds the frames other than the first request's headers that a connection
	// may make the router keep while it waits, up to the idle timeout, for that request: a real
	// client sends a SETTINGS, a WINDOW_UPDATE, perhaps a PRIORITY or PING, a few dozen bytes.
	// The connection no longer holds a pending slot then, so without this bound each could
	// park maxSniffBytes for minutes.
	maxSniffControl = 16 << 10
	// maxPending bounds the connections that have not shown their protocol yet, so idle or
	// trickling connections cannot pile up buffers and goroutines.
	maxPending = 4096
)

var emptySettings = []byte{0, 0, 0, frameSettings, 0, 0, 0, 0, 0}

// router accepts from a listener and hands each connection to the gRPC or the HTTP listener.
type router struct {
	base       net.Listener
	grpc, http *connQueue
	// h1 gets plain HTTP/1.x connections when ownH1 is set (the gateway's own server); else
	// they go to http with cleartext HTTP/2's.
	h1    *connQueue
	ownH1 bool
	// firstByte bounds how long a connection may take to show its protocol, idle how long an
	// HTTP/2 connection may then wait before its first request.
	firstByte, idle time.Duration
	// maxPending is the bound on connections that have not shown their protocol yet (tests
	// lower it); slots holds one token for each of them while serve runs.
	maxPending int
	slots      chan struct{}
	done       chan struct{} // closed by close, to stop a serve waiting for a slot

	mu      sync.Mutex
	pending map[net.Conn]struct{} // connections still being sniffed, closed by close
	closed  bool
}

func newRouter(base net.Listener, firstByte, idle time.Duration) *router {
	return &router{
		base:       base,
		grpc:       newConnQueue(base.Addr()),
		http:       newConnQueue(base.Addr()),
		h1:         newConnQueue(base.Addr()),
		firstByte:  min(firstByte, idle),
		idle:       idle,
		maxPending: maxPending,
		done:       make(chan struct{}),
		pending:    make(map[net.Conn]struct{}),
	}
}

// serve accepts until the base listener closes. Temporary accept failures (out of file
// descriptors, say) are retried with backoff, as net/http and grpc-go do, instead of ending the
// gateway.
func (r *router) serve() error {
	r.slots = make(chan struct{}, r.maxPending)
	var backoff time.Duration
	for {
		// Backpressure: a slot first, then a connection. Until one frees, new connections wait
		// in the kernel's backlog, where a client sees a slow connect rather than a reset.
		select {
		case r.slots <- struct{}{}:
		case <-r.done:
			return net.ErrClosed
		}
		c, err := r.base.Accept()
		if err != nil {
			<-r.slots
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() && !r.isClosed() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			r.close()
			return err
		}
		backoff = 0
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			<-r.slots
			continue // the closed base listener ends the loop
		}
		r.pending[c] = struct{}{}
		r.mu.Unlock()
		go r.route(c)
	}
}

func (r *router) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// close stops accepting and drops connections that have not made a first request yet.
func (r *router) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.done)
		r.base.Close()
		for c := range r.pending {
			c.Close()
		}
	}
	r.mu.Unlock()
	r.grpc.close()
	r.http.close()
	r.h1.close()
}

// route sniffs c and hands it to its server. c's slot is given back as soon as it has shown its
// protocol, before an HTTP/2 client's first request, which may come much later.
func (r *router) route(c net.Conn) {
	holding := true
	release := func() {
		if holding {
			holding = false
			<-r.slots
		}
	}
	grpc, h1, conn, err := sniff(c, r.firstByte, r.idle, release)
	release()
	r.mu.Lock()
	delete(r.pending, c)
	r.mu.Unlock()
	if err != nil {
		c.Close()
		return
	}
	q := r.http
	switch {
	case grpc:
		q = r.grpc
	case h1 && r.ownH1:
		q = r.h1
	}
	if !q.put(conn) {
		c.Close()
	}
}

// sniff reads enough of c to choose a server and returns c with those bytes put back. The client
// has firstByte to show its protocol: a byte that is not the HTTP/2 preface's, or the whole
// preface and one frame; then shown is called, and an HTTP/2 client has until idle (both from
// now) to send its first request: a client may connect ahead of its first call (grpc-go's
// Connect, a round_robin balancer reconnecting), as it may stay connected between calls.
func sniff(c net.Conn, firstByte, idle time.Duration, shown func()) (grpc, h1 bool, _ net.Conn, _ error) {
	start := time.Now()
	c.SetDeadline(start.Add(firstByte)) // the write of our SETTINGS too: a client that never reads
	defer c.SetDeadline(time.Time{})
	head := make([]byte, len(clientPreface))
	n := 0
	for n < len(head) {
		m, err := c.Read(head[n:])
		n += m
		if string(head[:n]) != clientPreface[:n] {
			// HTTP/1.x (or garbage, which net/http answers properly): decided as soon as a byte
			// differs, so short requests such as load-balancer probes are not kept waiting.
			return false, true, &replayConn{Conn: c, head: head[:n]}, nil
		}
		if err != nil {
			return false, false, nil, err
		}
	}
	if _, err := c.Write(emptySettings); err != nil {
		return false, false, nil, err
	}
	kept := bytes.NewBuffer(head)
	var block []byte
	control := 0 // bytes of frames kept before the first request's headers, less those headers
	acked, headersDone, first := false, false, true
	frame := make([]byte, 9)
	for !(acked && headersDone) {
		if _, err := io.ReadFull(c, frame[:9]); err != nil {
			return false, false, nil, err
		}
		length := int(frame[0])<<16 | int(frame[1])<<8 | int(frame[2])
		typ, flags := frame[3], frame[4]
		stream := binary.BigEndian.Uint32(frame[5:9]) & 0x7fffffff
		if length > maxSniffFrame || kept.Len()+9+length > maxSniffBytes {
			return false, false, nil, errors.New("gateway: oversized frame before the first request")
		}
		payload := make([]byte, length)
		if _, err := io.ReadFull(c, payload); err != nil {
			return false, false, nil, err
		}
		if first {
			first = false
			shown()
			c.SetReadDeadline(start.Add(idle))
		}
		if typ == frameSettings && flags&flagAck != 0 && stream == 0 && !acked {
			acked = true // the ACK of our empty SETTINGS: the real server never sent it
			continue
		}
		if !headersDone && typ != frameHeaders && typ != frameContinuation {
			if control += 9 + length; control > maxSniffControl {
				return false, false, nil, errors.New("gateway: too many frames before the first request")
			}
		}
		kept.Write(frame[:9])
		kept.Write(payload)
		if headersDone {
			continue
		}
		switch typ {
		case frameHeaders:
			frag, ok := headerFragment(payload, flags)
			if !ok {
				headersDone = true // malformed: let the HTTP/2 server reject it
				continue
			}
			block = append(block, frag...)
			headersDone = flags&flagEndHeaders != 0
		case frameContinuation:
			block = append(block, payload...)
			headersDone = flags&flagEndHeaders != 0
		}
	}
	grpc = isGRPC(block)
	return grpc, false, &replayConn{Conn: c, head: kept.Bytes()}, nil
}

// headerFragment strips padding and priority fields from a HEADERS payload.
func headerFragment(p []byte, flags byte) ([]byte, bool) {
	pad := 0
	if flags&flagPadded != 0 {
		if len(p) < 1 {
			return nil, false
		}
		pad = int(p[0])
		p = p[1:]
	}
	if flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, false
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, false
	}
	return p[:len(p)-pad], true
}

// isGRPC reports whether a header block's content-type is gRPC proper (not gRPC-Web).
func isGRPC(block []byte) bool {
	var contentType string
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == "content-type" {
			contentType = f.Value
		}
	})
	dec.SetMaxStringLength(maxSniffFrame)
	if _, err := dec.Write(block); err != nil {
		return false
	}
	return contentType == "application/grpc" ||
		(strings.HasPrefix(contentType, "application/grpc+") || strings.HasPrefix(contentType, "application/grpc;"))
}

// replayConn is a connection whose first reads return bytes already consumed by the router.
type replayConn struct {
	net.Conn
	head []byte // what the router read and reads give back first
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Pending is how many of the router's bytes reads have yet to give back (h1server.ReadAheadConn).
func (c *replayConn) Pending() int { return len(c.head) }

// SyscallConn is the socket's, when the connection is a plain TCP socket, whose reads and writes
// are the socket's (h1server.ReadAheadConn); not a wrapper's, which may do more.
func (c *replayConn) SyscallConn() (syscall.RawConn, error) {
	tc, ok := c.Conn.(*net.TCPConn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return tc.SyscallConn()
}

// CloseWrite keeps net/http's half-close before closing an HTTP/1 connection working.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// connQueue is a net.Listener fed by the router.
type connQueue struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) put(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		return false
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) close()         { q.once.Do(func() { close(q.done) }) }
func (q *connQueue) Close() error   { q.close(); return nil }
func (q *connQueue) Addr() net.Addr { return q.addr }
