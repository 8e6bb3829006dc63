//go:build linux || darwin

package sockio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errText is err's text, "" for none.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestReaderAsConn: the Reader reads a socket as the connection's own Read does: the bytes,
// io.EOF at the peer's close, and the same errors (a *net.OpError "read" with the connection's
// addresses) for a passed deadline and a closed connection, each compared on one connection
// with the connection's Read.
func TestReaderAsConn(t *testing.T) {
	if !supported {
		t.Skip("the connection's own Read here")
	}
	c, s := pair(t)
	var r Reader
	r.Init(c, nil)
	require.NotNil(t, r.rc, "a TCP connection is read through its socket")
	buf := make([]byte, 16)

	_, err := s.Write([]byte("hello"))
	require.NoError(t, err)
	n, err := r.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "hello", string(buf[:n]))

	require.NoError(t, c.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err = r.Read(buf)
	_, want := c.Read(buf)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	var ne net.Error
	require.True(t, errors.As(err, &ne))
	assert.True(t, ne.Timeout())
	assert.Equal(t, errText(want), errText(err), "a passed deadline")

	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, err = r.Read(buf) // waits for the deadline: nothing comes
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "a deadline met while waiting")
	require.NoError(t, c.SetReadDeadline(time.Time{}))

	go func() {
		time.Sleep(20 * time.Millisecond)
		s.Write([]byte("late"))
		s.CloseWrite()
	}()
	n, err = r.Read(buf) // waits for the bytes
	require.NoError(t, err)
	assert.Equal(t, "late", string(buf[:n]))
	n, err = r.Read(buf)
	assert.Equal(t, 0, n)
	assert.Equal(t, io.EOF, err, "the peer's close")

	c.Close()
	_, err = r.Read(buf)
	_, want = c.Read(buf)
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.Equal(t, errText(want), errText(err), "a closed connection")
}

// TestReaderReset: a connection the peer reset reads as the connection's Read would say it:
// ECONNRESET in a *net.OpError "read" wrapping an *os.SyscallError.
func TestReaderReset(t *testing.T) {
	if !supported {
		t.Skip("the connection's own Read here")
	}
	c, s := pair(t)
	require.NoError(t, s.SetLinger(0))
	s.Write([]byte("x"))
	s.Close() // unread bytes on the other side and linger 0: a reset
	var r Reader
	r.Init(c, nil)
	buf := make([]byte, 4)
	var err error
	for err == nil {
		_, err = r.Read(buf)
	}
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "read", oe.Op)
	assert.Equal(t, c.LocalAddr(), oe.Source)
	assert.Equal(t, c.RemoteAddr(), oe.Addr)
	var se *os.SyscallError
	if errors.As(err, &se) {
		assert.Equal(t, "read", se.Syscall)
		assert.ErrorIs(t, err, syscall.ECONNRESET)
	} else {
		assert.Equal(t, io.EOF, err) // the reset came after the byte, and the byte was not read
	}
}

// TestReaderWrapper: a connection that is not a plain TCP socket is read through its own Read.
func TestReaderWrapper(t *testing.T) {
	c, s := pair(t)
	wrapped := &countingConn{TCPConn: c}
	var r Reader
	r.Init(wrapped, nil)
	assert.Nil(t, r.rc)
	s.Write([]byte("abc"))
	got := make([]byte, 3)
	_, err := io.ReadFull(&r, got)
	require.NoError(t, err)
	assert.Equal(t, "abc", string(got))
}

// TestWriteAsConn: Write writes all of a buffer larger than the socket's (waiting for room as
// the peer reads), and fails as the connection's Write does: a passed write deadline the same
// error, a peer gone a *net.OpError "write".
func TestWriteAsConn(t *testing.T) {
	if !supported {
		t.Skip("the connection's own Write here")
	}
	c, s := pair(t)
	var w Writer
	w.Init(c, nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB: more than a socket buffer
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		b, _ := io.ReadAll(io.LimitReader(s, int64(len(big))))
		got <- b
	}()
	n, err := w.Write(big)
	require.NoError(t, err)
	assert.Equal(t, len(big), n)
	assert.Equal(t, big, <-got)

	require.NoError(t, c.SetWriteDeadline(time.Now().Add(-time.Second)))
	_, err = w.Write([]byte("x"))
	_, want := c.Write([]byte("x"))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.Equal(t, errText(want), errText(err), "a passed deadline")
	require.NoError(t, c.SetWriteDeadline(time.Time{}))

	require.NoError(t, s.SetLinger(0))
	s.Close()
	for err = nil; err == nil; {
		_, err = w.Write(big[:1<<16]) // until the reset is seen
	}
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "write", oe.Op)
	assert.Equal(t, c.RemoteAddr(), oe.Addr)
	var se *os.SyscallError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "write", se.Syscall)

	c.Close()
	_, err = w.Write([]byte("x"))
	_, want = c.Write([]byte("x"))
	assert.ErrorIs(t, err, net.ErrClosed)
	assert.Equal(t, errText(want), errText(err), "a closed connection")
}

// TestPeek: Peek sees bytes without taking them, EAGAIN when there are none, and 0 bytes once
// the peer has closed.
func TestPeek(t *testing.T) {
	if !supported {
		t.Skip("no peek here")
	}
	c, s := pair(t)
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	peek := func() (n int, err error) {
		require.NoError(t, rc.Control(func(fd uintptr) { n, err = Peek(fd, make([]byte, 1)) }))
		return n, err
	}
	_, err = peek()
	assert.Equal(t, syscall.EAGAIN, err)
	s.Write([]byte("ab"))
	require.Eventually(t, func() bool { n, err := peek(); return n == 1 && err == nil }, time.Second, time.Millisecond)
	got := make([]byte, 2)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	assert.Equal(t, "ab", string(got), "nothing was taken")
	s.Close()
	require.Eventually(t, func() bool { n, err := peek(); return n == 0 && err == nil }, time.Second, time.Millisecond)
}
