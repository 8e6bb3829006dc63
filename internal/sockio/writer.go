// Package writewait writes the last bytes of a message on a TCP connection and waits, in the
// same call, for the connection to become readable: for the answer to a request just sent (the
// upstream client), or for the next request after an answer (the HTTP/1 server).
//
// Why: Go's poller reads before it waits. A Write followed by a Read that finds nothing yet
// (EAGAIN, the usual case right after a message) costs a system call that says nothing;
// BenchmarkHotPath counted 4 reads a proxied request with it, where 2 carry data. Here the write
// is made inside syscall.RawConn.Read's callback, which runs after the poller's readiness was
// reset, so whatever arrives after the write wakes the wait, and the read that follows finds
// bytes at its first system call. No library offers this: it needs the poller's order of reset,
// callback and wait, which only RawConn.Read exposes.
package writewait

import (
	"net"
	"syscall"
)

// Writer writes to one connection. It is not safe for concurrent use, and nothing else may read
// the connection during a WriteWait.
type Writer struct {
	// Wait, while set, makes Write a WriteWait: set around the flush of a message's last bytes.
	Wait bool

	nc net.Conn
	rc syscall.RawConn // nil: WriteWait is a plain Write
	fn func(fd uintptr) bool

	b     []byte
	n     int
	err   error
	wrote bool
}

// Init makes w write to nc. Only a *net.TCPConn gets the wait, or a connection that gives its
// socket as raw (a wrapper whose Read and Write are the socket's): a wrapper's own Write must not
// be bypassed.
func (w *Writer) Init(nc net.Conn, raw syscall.RawConn) {
	w.nc, w.rc = nc, raw
	if raw == nil {
		if tc, ok := nc.(*net.TCPConn); ok {
			w.rc, _ = tc.SyscallConn()
		}
	}
	if w.rc != nil && supported {
		w.fn = w.writeThenWait
	} else {
		w.rc = nil
	}
}

// Write writes b as the connection's Write does, and then waits as WriteWait does while Wait is
// set.
func (w *Writer) Write(b []byte) (int, error) {
	if w.Wait {
		return w.WriteWait(b)
	}
	return w.nc.Write(b)
}

// WriteWait writes b and returns once the connection is readable or the wait failed (a read
// deadline, a closed connection): the read that follows meets the same end. A write the socket
// does not take whole (a full send buffer) is finished by the connection's Write, without the
// wait.
func (w *Writer) WriteWait(b []byte) (int, error) {
	if w.rc == nil {
		return w.nc.Write(b)
	}
	w.b, w.n, w.err, w.wrote = b, 0, nil, false
	_ = w.rc.Read(w.fn)
	n, err := w.n, w.err
	w.b, w.err = nil, nil
	if err != nil {
		return n, &net.OpError{Op: "write", Net: w.nc.LocalAddr().Network(), Source: w.nc.LocalAddr(), Addr: w.nc.RemoteAddr(), Err: err}
	}
	if n < len(b) {
		m, err := w.nc.Write(b[n:])
		return n + m, err
	}
	return n, nil
}

// writeThenWait is WriteWait's callback: called first, it writes and asks to wait (false);
// called again, the connection is readable.
func (w *Writer) writeThenWait(fd uintptr) bool {
	if w.wrote {
		return true
	}
	w.wrote = true
	for w.n < len(w.b) {
		n, err := write(fd, w.b[w.n:])
		if n > 0 {
			w.n += n
		}
		switch err {
		case nil, syscall.EINTR:
		case syscall.EAGAIN:
			return true // the rest goes the usual way
		default:
			w.err = err
			return true
		}
	}
	return false
}
