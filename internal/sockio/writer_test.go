//go:build linux || darwin

package sockio

import (
	"bytes"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pair returns the two ends of a loopback TCP connection.
func pair(t *testing.T) (client, server *net.TCPConn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	s := <-accepted
	require.NotNil(t, s)
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// readable reports whether a read would find bytes now, without consuming them.
func readable(t *testing.T, c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	require.NoError(t, err)
	var ok bool
	var b [1]byte
	require.NoError(t, rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = err == nil && n > 0
		return true
	}))
	return ok
}

// TestWriteWait: WriteWait returns once the answer to what it wrote has come (the answer is
// readable at once), not when the write is done; the answer is then read whole.
func TestWriteWait(t *testing.T) {
	if !supported {
		t.Skip("a plain write here")
	}
	c, s := pair(t)
	go func() {
		b := make([]byte, 5)
		if _, err := io.ReadFull(s, b); err != nil {
			return
		}
		time.Sleep(50 * time.Millisecond) // well after a plain write would have returned
		s.Write(append([]byte("re:"), b...))
	}()
	var w Writer
	w.Init(c, nil)
	n, err := w.WriteWait([]byte("hello"))
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	assert.True(t, readable(t, c), "the answer is there when WriteWait returns")
	got := make([]byte, 8)
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	assert.Equal(t, "re:hello", string(got))
}

// TestWriteWaitDeadline: a wait that meets the read deadline returns what was written, without
// an error; the read that follows meets the deadline.
func TestWriteWaitDeadline(t *testing.T) {
	c, s := pair(t)
	var w Writer
	w.Init(c, nil)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Millisecond)))
	n, err := w.WriteWait([]byte("ping"))
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	_, err = c.Read(make([]byte, 1))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "the deadline, again")
	got := make([]byte, 4)
	_, err = io.ReadFull(s, got)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(got), "written all the same")
}

// TestWriteWaitLarge: what the socket's buffer does not take whole is written by the
// connection's Write as the peer reads it, and all of it arrives.
func TestWriteWaitLarge(t *testing.T) {
	c, s := pair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB: more than a socket buffer
	got := make(chan []byte, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		b, _ := io.ReadAll(io.LimitReader(s, int64(len(big))))
		got <- b
	}()
	var w Writer
	w.Init(c, nil)
	n, err := w.WriteWait(big)
	require.NoError(t, err)
	assert.Equal(t, len(big), n)
	assert.Equal(t, big, <-got)
}

// TestWriteWaitWrapper: a connection that is not a plain TCP socket gets its own Write, and no
// wait.
func TestWriteWaitWrapper(t *testing.T) {
	c, s := pair(t)
	wrapped := &countingConn{TCPConn: c}
	var w Writer
	w.Init(wrapped, nil)
	n, err := w.WriteWait([]byte("abc"))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, 3, wrapped.n, "the wrapper's Write was used")
	got := make([]byte, 3)
	_, err = io.ReadFull(s, got)
	require.NoError(t, err)
}

type countingConn struct {
	*net.TCPConn
	n int
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.TCPConn.Write(p)
	c.n += n
	return n, err
}

// TestBeforeWait: BeforeWait runs once, after a WriteWait's bytes went out and before its wait
// (the peer has them when it runs); and before a write waits for a full socket buffer, where
// what it arms (here a deadline) can end the wait.
func TestBeforeWait(t *testing.T) {
	c, s := pair(t)
	calls := 0
	var w Writer
	w.Init(c, nil)
	w.BeforeWait = func() {
		calls++
		assert.True(t, readable(t, s), "the bytes are out before the wait")
	}
	require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Millisecond))) // no answer comes
	_, err := w.WriteWait([]byte("ping"))
	require.NoError(t, err)
	assert.Equal(t, 1, calls)
	assert.Nil(t, w.BeforeWait, "cleared once called")

	// Nobody reads: the write fills the buffers and would wait for ever but for the deadline
	// BeforeWait sets.
	c2, _ := pair(t)
	var w2 Writer
	w2.Init(c2, nil)
	armed := false
	w2.BeforeWait = func() {
		armed = true
		_ = c2.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	}
	_, err = w2.Write(bytes.Repeat([]byte("x"), 64<<20))
	assert.True(t, armed)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
}
