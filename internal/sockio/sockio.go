// Package sockio reads and writes the TCP sockets of internal/h1server and internal/h1client
// below net.Conn, for two reasons only a socket's syscall.RawConn allows.
//
// The wait (Writer.WriteWait): a message's last bytes are written and the wait for the
// connection to become readable made in one call. Go's poller reads before it waits: a Write
// followed by a Read that finds nothing yet (EAGAIN, the usual case right after a message) costs
// a system call that says nothing; BenchmarkHotPath counted 4 reads a proxied request with it,
// where 2 carry data. Here the write is made inside RawConn.Read's callback, which runs after the
// poller's readiness was reset, so whatever arrives after the write wakes the wait, and the read
// that follows finds bytes at its first system call.
//
// Raw system calls (Reader, Writer, Peek): reads and writes go to the socket with
// syscall.RawSyscall, not through the runtime's system-call bookkeeping (entersyscall). That
// bookkeeping wakes the runtime's monitor thread (sysmon) from its sleep whenever a process whose
// processors were all idle makes a system call: a gateway answering one request at a time does so
// twice a request (the request, the upstream's answer), and each wake is a futex call on the
// request's path and a thread that then wakes every 20 µs for a while, on cores the upstream and
// the clients need. Measured with one stream at a time (the BenchmarkHotPath setup): context
// switches a stream went from 7.5 to 3.5 (nginx: 3.6), the gateway's CPU a stream from about 145
// to 107 µs. It is safe because these sockets are non-blocking (net makes every one so): a read
// or write returns at once, with bytes or EAGAIN, and the wait for readiness is still the
// poller's (RawConn.Read and Write), deadlines included. What the runtime no longer sees is a
// system call of a few microseconds, which it would have had no reason to act on. Raw calls are
// made on Linux; on linux/386 (sockets through socketcall), in race, msan and asan builds (whose
// checks the syscall package's calls carry: I/O as a happens-before edge, the buffers' accesses)
// and on macOS the calls are the syscall package's; elsewhere the connection's own Read and
// Write are used.
//
// Errors are the kind the connection's own Read and Write return: a *net.OpError with the same
// Op, addresses and cause (its network is the address's, "tcp", where the connection's may say
// "tcp4"). No library does either: both need the poller's order of reset, callback and wait,
// which only RawConn exposes.
package sockio

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// socket is the RawConn reads and writes go to: raw, given for a wrapper whose Read and Write
// are its socket's (a wrapper's own Read and Write must not be bypassed), or a *net.TCPConn's
// own; nil (the connection's Read and Write) for anything else, or where the package has no
// system calls of its own.
func socket(nc net.Conn, raw syscall.RawConn) syscall.RawConn {
	if !supported {
		return nil
	}
	if raw == nil {
		if tc, ok := nc.(*net.TCPConn); ok {
			raw, _ = tc.SyscallConn()
		}
	}
	return raw
}

// opError is err as nc's Read or Write would return it: a *net.OpError for op with nc's
// addresses. A RawConn's error (op "raw-read" or "raw-write", the poller's cause) is unwrapped
// to its cause first.
func opError(op string, nc net.Conn, err error) error {
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: nc.LocalAddr().Network(), Source: nc.LocalAddr(), Addr: nc.RemoteAddr(), Err: err}
}

// Reader reads one connection. It is not safe for concurrent use.
type Reader struct {
	nc   net.Conn
	rc   syscall.RawConn // nil: the connection's own Read
	read func(fd uintptr) bool

	p   []byte
	n   int
	err error
}

// Init makes r read from nc: from its socket, when it is a *net.TCPConn or raw is the socket of
// a wrapper whose Read and Write are the socket's; otherwise through nc's Read.
func (r *Reader) Init(nc net.Conn, raw syscall.RawConn) {
	r.nc, r.rc = nc, socket(nc, raw)
	if r.rc != nil {
		r.read = r.readOnce
	}
}

// Read reads into p as the connection's Read does: what is there, waiting (up to the read
// deadline) while nothing is; io.EOF once the peer has closed its side.
func (r *Reader) Read(p []byte) (int, error) {
	if r.rc == nil || len(p) == 0 {
		return r.nc.Read(p)
	}
	r.p, r.n, r.err = p, 0, nil
	err := r.rc.Read(r.read)
	n := r.n
	if err == nil {
		err = r.err
	}
	r.p, r.err = nil, nil
	switch {
	case err != nil:
		return 0, opError("read", r.nc, err)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readOnce is Read's callback: one read, or false to wait for the socket to be readable.
func (r *Reader) readOnce(fd uintptr) bool {
	for {
		n, err := read(fd, r.p)
		switch err {
		case nil:
			r.n = n
			return true
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			r.err = err
			return true
		}
	}
}

// Peek reads what fd has to read into b without consuming it and without waiting: EAGAIN when
// there is nothing, 0 bytes and no error when the peer has closed. For h1client's check of an
// idle connection before it is used again.
func Peek(fd uintptr, b []byte) (int, error) { return peek(fd, b) }
