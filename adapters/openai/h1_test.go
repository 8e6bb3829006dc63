package openai

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted is an HTTP/1.1 server on a raw socket whose answer depends on the request's path.
type scripted struct {
	addr   string
	conns  atomic.Int32  // connections accepted
	reqs   atomic.Int32  // requests read
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
		if req.URL.Path == "/early" {
			// Answers before reading the body, as net/http's server does with a 413: it stops
			// sending, waits a moment without reading, and hangs up.
			s.reqs.Add(1)
			io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: 9\r\n\r\ntoo large")
			_ = c.(*net.TCPConn).CloseWrite()
			time.Sleep(200 * time.Millisecond)
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.reqs.Add(1)
		switch req.URL.Path {
		case "/close-after": // answers, then closes the idle connection (an upstream's keep-alive timeout)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			time.Sleep(10 * time.Millisecond)
			c.Close()
			s.closed <- struct{}{}
			return
		case "/chunked": // an informational response first, then a chunked body
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n3\r\n th\r\n0\r\n\r\n")
		case "/conn-close":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye")
			time.Sleep(200 * time.Millisecond) // still open: only the header says not to reuse it
			return
		case "/upgrade":
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: other\r\n\r\n")
		case "/big":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 100000))
		case "/hang":
			time.Sleep(time.Minute)
			return
		case "/huge-head":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("y", 4096)+"\r\nContent-Length: 0\r\n\r\n")
		default:
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Path: "+req.URL.Path+"\r\n\r\nplain")
		}
	}
}

func h1Post(t *testing.T, tr *h1Transport, ctx context.Context, s *scripted, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.addr+path, strings.NewReader(`{"model":"m"}`))
	require.NoError(t, err)
	return tr.RoundTrip(req)
}

func h1Text(t *testing.T, tr *h1Transport, s *scripted, path string) string {
	res, err := h1Post(t, tr, context.Background(), s, path)
	require.NoError(t, err, path)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err, path)
	res.Body.Close()
	return string(b)
}

// TestH1TransportReuse: connections are reused after a whole body, and not after one the
// upstream closed while idle, one answered with Connection: close, or one closed mid-body.
func TestH1TransportReuse(t *testing.T) {
	s := startScripted(t)
	tr := newH1Transport(s.addr, &http.Transport{})
	defer tr.CloseIdleConnections()

	assert.Equal(t, "ok", h1Text(t, tr, s, "/close-after"))
	<-s.closed
	time.Sleep(10 * time.Millisecond) // the FIN reaches the idle connection
	assert.Equal(t, "ok", h1Text(t, tr, s, "/close-after"), "a closed idle connection is not reused")
	<-s.closed
	time.Sleep(10 * time.Millisecond)
	tr.closeDead()
	assert.Empty(t, tr.idle, "closeDead drops a connection the upstream closed")
	assert.Equal(t, "hi th", h1Text(t, tr, s, "/chunked"))
	assert.Equal(t, int32(3), s.conns.Load())
	assert.Equal(t, "plain", h1Text(t, tr, s, "/a"))
	assert.Equal(t, int32(3), s.conns.Load(), "reused after a chunked body and a 100 Continue")

	assert.Equal(t, "bye", h1Text(t, tr, s, "/conn-close"))
	assert.Equal(t, "plain", h1Text(t, tr, s, "/b"))
	assert.Equal(t, int32(4), s.conns.Load(), "not reused after Connection: close")

	res, err := h1Post(t, tr, context.Background(), s, "/big")
	require.NoError(t, err)
	_, err = io.ReadFull(res.Body, make([]byte, 10))
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, "plain", h1Text(t, tr, s, "/c"))
	assert.Equal(t, int32(5), s.conns.Load(), "not reused after a body closed before its end")
	assert.Equal(t, int32(8), s.reqs.Load())

	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/d", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Close = true
	res, err = tr.RoundTrip(req)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, res.Body)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, "plain", h1Text(t, tr, s, "/e"))
	assert.Equal(t, int32(6), s.conns.Load(), "not reused after a request that asked to close it")
}

// TestH1TransportFailures: a cancelled context ends a request waiting on its response; an
// oversized response head and a header that would split the request are errors.
func TestH1TransportFailures(t *testing.T) {
	s := startScripted(t)
	tr := newH1Transport(s.addr, &http.Transport{})
	defer tr.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := h1Post(t, tr, ctx, s, "/hang")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)

	tr.maxHead = 1024
	_, err = h1Post(t, tr, context.Background(), s, "/huge-head")
	assert.ErrorIs(t, err, errResponseHeadTooLarge)
	tr.maxHead = maxResponseHead

	n := s.reqs.Load()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/x", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header["X-Evil"] = []string{"a\r\nX-Injected: 1"}
	body := &closeRecorder{Reader: strings.NewReader("{}")}
	req.Body = body
	_, err = tr.RoundTrip(req)
	assert.ErrorContains(t, err, "invalid header field value")
	assert.Equal(t, n, s.reqs.Load(), "nothing sent")
	assert.True(t, body.closed, "the body closed all the same")
	assert.Equal(t, "plain", h1Text(t, tr, s, "/after"))
}

// TestH1TransportEdges: a body too large to write before reading goes through the large-body
// transport, which hears an upstream answering before it read the body; a caller already gone
// sends nothing; connections whose responses end after CloseIdleConnections are closed, not
// pooled; a body read after Close is not complete; an unasked 101 is an error.
func TestH1TransportEdges(t *testing.T) {
	s := startScripted(t)
	tr := newH1Transport(s.addr, &http.Transport{})
	defer tr.CloseIdleConnections()

	big := strings.Repeat("x", 4<<20)
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/early", strings.NewReader(big))
	require.NoError(t, err)
	res, err := tr.RoundTrip(req)
	require.NoError(t, err, "the upstream's early answer, not a write error")
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode)
	assert.Equal(t, "too large", string(b))

	assert.Equal(t, "plain", h1Text(t, tr, s, "/a")) // one pooled connection
	n := s.reqs.Load()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		_, err = h1Post(t, tr, gone, s, "/b")
		assert.ErrorIs(t, err, context.Canceled)
	}
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, n, s.reqs.Load(), "a cancelled request reached the upstream")

	res, err = h1Post(t, tr, context.Background(), s, "/big")
	require.NoError(t, err)
	tr.CloseIdleConnections()
	_, err = io.Copy(io.Discard, res.Body)
	require.NoError(t, err)
	res.Body.Close()
	assert.Empty(t, tr.idle, "a connection whose response ended after CloseIdleConnections is pooled")
	assert.Equal(t, "plain", h1Text(t, tr, s, "/c"))
	assert.Len(t, tr.idle, 1, "pooling resumes with the next request")

	res, err = h1Post(t, tr, context.Background(), s, "/big")
	require.NoError(t, err)
	res.Body.Close()
	_, err = res.Body.Read(make([]byte, 10))
	assert.ErrorIs(t, err, errBodyClosed)

	_, err = h1Post(t, tr, context.Background(), s, "/upgrade")
	assert.ErrorContains(t, err, "switched protocols")
	assert.Equal(t, "plain", h1Text(t, tr, s, "/d"))
}
