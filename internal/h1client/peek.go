//go:build linux || darwin

package h1client

import (
	"net"
	"syscall"

	"github.com/infergate/infergate/internal/sockio"
)

// Supported reports whether a Transport reuses connections here: it can peek at an idle socket
// (peeker), to see whether the upstream closed it, before it sends another request on it.
const Supported = true

// peeker peeks at an idle connection without blocking or consuming anything: it is still usable
// when there is nothing to read yet. One the upstream closed (EOF) or sent unsolicited bytes on
// is not. Made once per connection, so a peek allocates nothing.
type peeker struct {
	rc     syscall.RawConn
	fn     func(fd uintptr) bool
	usable bool
	b      [1]byte
}

func (p *peeker) init(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	p.rc = rc
	p.fn = func(fd uintptr) bool {
		_, err := sockio.Peek(fd, p.b[:])
		p.usable = err == syscall.EAGAIN
		return true
	}
}

func (p *peeker) alive() bool {
	if p.rc == nil {
		return false
	}
	p.usable = false
	return p.rc.Read(p.fn) == nil && p.usable
}
