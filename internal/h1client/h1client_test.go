package h1client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These are the client's own tests: its pool, its limits and its retry rule, which the contract
// shared with http.Transport (roundtriptest, run in contract_test.go) cannot see.

// scripted is an HTTP/1.1 server on a raw socket whose answer depends on the request's path.
type scripted struct {
	addr   string
	conns  atomic.Int32  // connections accepted
	closed chan struct{} // receives when the server closed a connection on purpose
}

func startScripted(t *testing.T) *scripted {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	s := &scripted{addr: ln.Addr().String(), closed: make(chan struct{}, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go s.serve(c)
		}
	}()
	return s
}

func (s *scripted) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		switch req.URL.Path {
		case "/close-after": // answers, then closes the idle connection (an upstream's keep-alive timeout)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			time.Sleep(10 * time.Millisecond)
			c.Close()
			s.closed <- struct{}{}
			return
		case "/big":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 100000))
		case "/huge-head":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("y", 4096)+"\r\nContent-Length: 0\r\n\r\n")
		default:
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain")
		}
	}
}

func post(t *testing.T, tr *Transport, ctx context.Context, s *scripted, path string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+path, strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	return tr.RoundTrip(ctx, req)
}

func text(t *testing.T, tr *Transport, s *scripted, path string) string {
	res, err := post(t, tr, context.Background(), s, path)
	require.NoError(t, err, path)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err, path)
	res.Body.Close()
	return string(b)
}

// TestPool: CloseDead drops a pooled connection the upstream closed; a connection whose response
// ends after CloseIdleConnections is closed, not pooled, and pooling resumes with the next
// request; a body read after Close reads errBodyClosed.
func TestPool(t *testing.T) {
	if !Supported {
		t.Skip("connections are never pooled here")
	}
	s := startScripted(t)
	tr := New(s.addr, http.DefaultTransport)
	defer tr.CloseIdleConnections()

	assert.Equal(t, "ok", text(t, tr, s, "/close-after"))
	assert.Len(t, tr.idle, 1)
	<-s.closed
	time.Sleep(20 * time.Millisecond) // the FIN reaches the idle connection
	tr.CloseDead()
	assert.Empty(t, tr.idle, "CloseDead drops a connection the upstream closed")

	res, err := post(t, tr, context.Background(), s, "/big")
	require.NoError(t, err)
	tr.CloseIdleConnections()
	_, err = io.Copy(io.Discard, res.Body)
	require.NoError(t, err)
	res.Body.Close()
	assert.Empty(t, tr.idle, "a connection whose response ended after CloseIdleConnections is pooled")
	assert.Equal(t, "plain", text(t, tr, s, "/c"))
	assert.Len(t, tr.idle, 1, "pooling resumes with the next request")
	tr.CloseDead()
	assert.Len(t, tr.idle, 1, "CloseDead keeps a live connection")

	res, err = post(t, tr, context.Background(), s, "/big")
	require.NoError(t, err)
	res.Body.Close()
	_, err = res.Body.Read(make([]byte, 10))
	assert.ErrorIs(t, err, errBodyClosed)
}

// TestHeadLimit: the response head is bounded by maxHead.
func TestHeadLimit(t *testing.T) {
	s := startScripted(t)
	tr := New(s.addr, http.DefaultTransport)
	defer tr.CloseIdleConnections()
	tr.maxHead = 1024
	_, err := post(t, tr, context.Background(), s, "/huge-head")
	assert.ErrorIs(t, err, errResponseHeadTooLarge)
	tr.maxHead = maxResponseHead
	assert.Equal(t, "plain", text(t, tr, s, "/a"))
}

// flakyConn is a connection whose writes can be made to fail before writing anything; it is
// still a syscall.Conn, so the pool can peek at it.
type flakyConn struct {
	*net.TCPConn
	fail *atomic.Bool
}

func (c flakyConn) Write(p []byte) (int, error) {
	if c.fail.Load() {
		return 0, errors.New("write refused")
	}
	return c.TCPConn.Write(p)
}

// TestRetry: a request that a reused connection failed to take before writing any byte goes out
// on the next connection when it has GetBody, and fails without it.
func TestRetry(t *testing.T) {
	if !Supported {
		t.Skip("connections are never pooled here")
	}
	s := startScripted(t)
	var dialed []flakyConn
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := flakyConn{nc.(*net.TCPConn), new(atomic.Bool)}
		dialed = append(dialed, c)
		return c, nil
	}
	tr := New(s.addr, http.DefaultTransport, WithDialContext(dial))
	defer tr.CloseIdleConnections()

	assert.Equal(t, "plain", text(t, tr, s, "/a"))
	dialed[0].fail.Store(true)
	assert.Equal(t, "plain", text(t, tr, s, "/b"), "sent again on a new connection")
	assert.Len(t, dialed, 2)

	dialed[1].fail.Store(true)
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/c", io.NopCloser(strings.NewReader("{}")))
	require.NoError(t, err)
	req.ContentLength = 2 // known, but no GetBody
	_, err = tr.RoundTrip(context.Background(), req)
	assert.ErrorContains(t, err, "write refused")
	assert.Len(t, dialed, 2, "no retry without GetBody")
	assert.Equal(t, int32(2), s.conns.Load())
}

// TestNoGoroutines: the client runs no goroutine of its own, per connection or per request:
// with responses in hand on eight connections, the process has only the upstream's eight more
// (http.Transport would have sixteen more: a reader and a writer per connection).
func TestNoGoroutines(t *testing.T) {
	if !Supported {
		t.Skip("connections are never pooled here")
	}
	s := startScripted(t)
	tr := New(s.addr, http.DefaultTransport)
	defer tr.CloseIdleConnections()
	before := runtime.NumGoroutine()
	var open []*http.Response
	for range 8 {
		res, err := post(t, tr, context.Background(), s, "/big")
		require.NoError(t, err)
		open = append(open, res)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine()-before, 8, "goroutines with eight responses in hand")
	for _, res := range open {
		_, err := io.Copy(io.Discard, res.Body)
		require.NoError(t, err)
		res.Body.Close()
	}
	for range 20 {
		assert.Equal(t, "plain", text(t, tr, s, "/a"))
	}
	assert.LessOrEqual(t, runtime.NumGoroutine()-before, 8, "goroutines with eight pooled connections")
}

// TestCancelWhileBodyIsRead: a caller that goes away while its request's body is still being read
// (a streamed form) sends the upstream nothing of what was held: the cancellation hook is armed
// only once a write waits, so the client checks before its last write.
func TestCancelWhileBodyIsRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		got <- len(b)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	body := &cancellingBody{cancel: cancel, data: []byte(`{"model":"m"}`)}
	req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/", body)
	require.NoError(t, err)
	req.ContentLength = int64(len(body.data))
	tr := New(ln.Addr().String(), http.DefaultTransport)
	_, err = tr.RoundTrip(ctx, req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, <-got, "bytes the upstream received")
}

// cancellingBody's read cancels the request's context before it returns its bytes: a body that
// was slow to come while the caller left.
type cancellingBody struct {
	cancel func()
	data   []byte
}

func (b *cancellingBody) Read(p []byte) (int, error) {
	b.cancel()
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}
