package sockio

import (
	"io"
	"net"
	"syscall"
)

// Writer writes to one connection. It is not safe for concurrent use, and nothing else may read
// the connection during a WriteWait.
type Writer struct {
	// Wait, while set, makes Write a WriteWait: set around the flush of a message's last bytes.
	Wait bool
	// BeforeWait, when set, is called (and cleared) before the writer first waits: for the socket
	// to take more bytes, or, in a WriteWait, for the answer once the bytes went out. A caller
	// that must be able to interrupt a wait (h1client's cancellation) arms it there: a message
	// that the socket takes at once is out before the arming's cost is paid, which then overlaps
	// the peer's work. It runs inside the connection's RawConn callback: it must not read or
	// write the connection (setting a deadline is fine).
	BeforeWait func()

	nc  net.Conn
	rc  syscall.RawConn // nil: the connection's own Write, and WriteWait is a plain Write
	fn  func(fd uintptr) bool
	all func(fd uintptr) bool

	b     []byte
	n     int
	err   error
	wrote bool
}

// Init makes w write to nc: to its socket, when it is a *net.TCPConn or raw is the socket of a
// wrapper whose Read and Write are the socket's (see socket); otherwise through nc's Write.
func (w *Writer) Init(nc net.Conn, raw syscall.RawConn) {
	w.nc, w.rc = nc, socket(nc, raw)
	if w.rc != nil {
		w.fn, w.all = w.writeThenWait, w.writeAll
	}
}

// Write writes b as the connection's Write does (the same errors), and then waits as WriteWait
// does while Wait is set.
func (w *Writer) Write(b []byte) (int, error) {
	if w.Wait {
		return w.WriteWait(b)
	}
	if w.rc == nil {
		w.beforeWait()
		return w.nc.Write(b)
	}
	w.b, w.n, w.err = b, 0, nil
	err := w.rc.Write(w.all)
	n := w.n
	if err == nil {
		err = w.err
	}
	w.b, w.err = nil, nil
	if err != nil {
		return n, opError("write", w.nc, err)
	}
	return n, nil
}

// WriteWait writes b and returns once the connection is readable or the wait failed (a read
// deadline, a closed connection): the read that follows meets the same end. A write the socket
// does not take whole (a full send buffer) is finished by the connection's Write, without the
// wait.
func (w *Writer) WriteWait(b []byte) (int, error) {
	if w.rc == nil {
		w.beforeWait()
		return w.nc.Write(b)
	}
	w.b, w.n, w.err, w.wrote = b, 0, nil, false
	// A wait that fails before the callback (a read deadline, a close) writes nothing: the
	// connection's Write below then writes, or says why not.
	_ = w.rc.Read(w.fn)
	n, err := w.n, w.err
	w.b, w.err = nil, nil
	if err != nil {
		return n, opError("write", w.nc, err)
	}
	if n < len(b) { // a full send buffer, or the wait failed before writing
		w.beforeWait()
		m, err := w.nc.Write(b[n:])
		return n + m, err
	}
	return n, nil
}

// writeThenWait is WriteWait's callback: called first, it writes and asks to wait (false) if all
// went out; called again, the connection is readable. A full send buffer or a failed write
// ends it (the rest goes the usual way, or the error is returned).
func (w *Writer) writeThenWait(fd uintptr) bool {
	if w.wrote {
		return true
	}
	w.wrote = true
	if !w.writeAll(fd) || w.err != nil {
		return true
	}
	w.beforeWait()
	return false
}

// beforeWait calls BeforeWait once.
func (w *Writer) beforeWait() {
	if f := w.BeforeWait; f != nil {
		w.BeforeWait = nil
		f()
	}
}

// writeAll is Write's callback: it writes until all is written or a write failed (true), or
// until the socket's buffer is full (false: called again once it has room).
func (w *Writer) writeAll(fd uintptr) bool {
	for w.n < len(w.b) {
		n, err := write(fd, w.b[w.n:])
		if n > 0 {
			w.n += n
		} else if err == nil {
			err = io.ErrUnexpectedEOF // nothing taken and nothing said: as poll.FD.Write, not a spin
		}
		switch err {
		case nil, syscall.EINTR:
		case syscall.EAGAIN:
			w.beforeWait()
			return false
		default:
			w.err = err
			return true
		}
	}
	return true
}
