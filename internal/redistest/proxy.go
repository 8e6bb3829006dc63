package redistest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a server (a redis-server, say) and can hang: while it is
// frozen it accepts connections and reads what clients send, but passes nothing on in either
// direction until Thaw, as a server stopped with SIGSTOP, or a network that drops packets,
// looks to its clients. It is closed when the test ends.
type Proxy struct {
	// Addr is the proxy's 127.0.0.1:port.
	Addr string

	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	thawed chan struct{} // closed while traffic flows
	conns  map[net.Conn]struct{}
	closed bool
}

// StartProxy listens on a loopback port and forwards every connection to target.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, thawed: make(chan struct{}),
		conns: map[net.Conn]struct{}{}}
	close(p.thawed)
	p.wg.Go(p.accept)
	tb.Cleanup(p.close)
	return p
}

// Freeze stops the traffic: bytes already sent wait in the proxy until Thaw.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default:
	}
}

// Thaw lets the traffic flow again, what waited first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// gate returns once traffic may flow, or false when the proxy closes first.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	ch, closed := p.thawed, p.closed
	p.mu.Unlock()
	if closed {
		return false
	}
	<-ch
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			_ = c.Close()
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) serve(client net.Conn) {
	defer p.forget(client)
	defer client.Close()
	if !p.gate() { // a frozen server does not accept either, as far as its clients can tell
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	defer p.forget(server)
	defer server.Close()
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client) })
	p.pipe(client, server)
	wg.Wait()
}

// pipe copies src to dst through the gate; when either side ends, both do.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.Thaw() // wakes the pipes waiting at the gate; they see closed
	_ = p.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
