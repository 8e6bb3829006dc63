//go:build linux || darwin

package openai

import (
	"net"
	"syscall"
)

// h1Supported: alive can peek at a socket here, so cleartext upstreams use h1Transport.
const h1Supported = true

// alive peeks at an idle connection without blocking or consuming anything: it is still usable
// when there is nothing to read yet. One the upstream closed (EOF) or sent unsolicited bytes on
// is not.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	usable := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		usable = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && usable
}
