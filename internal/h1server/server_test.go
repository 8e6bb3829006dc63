package h1server_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/h1server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve starts s on a loopback listener and returns its address.
func serve(t *testing.T, s *h1server.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	if s.Logger == nil {
		s.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	go s.Serve(ln)
	t.Cleanup(func() { ln.Close(); s.Close() })
	return ln.Addr().String()
}

type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *client) send(s string) {
	c.t.Helper()
	_, err := io.WriteString(c.c, s)
	require.NoError(c.t, err)
}

// read reads one answer, whole; method is the request's (a HEAD answer has no body).
func (c *client) read(method string) (*http.Response, string) {
	c.t.Helper()
	res, err := http.ReadResponse(c.r, &http.Request{Method: method})
	require.NoError(c.t, err)
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	return res, string(b)
}

// TestFraming: an answer written whole gets a Content-Length and a sniffed Content-Type; one
// longer than the buffer, or flushed before its end, goes chunked, with its declared trailers;
// a Content-Length the handler sets is kept; HEAD, 204 and 304 carry no body; an answer short of
// its Content-Length ends the connection; HTTP/1.0 gets the body and the close.
func TestFraming(t *testing.T) {
	big := strings.Repeat("x", 10_000)
	mux := http.NewServeMux()
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>hi</html>") })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) })
	mux.HandleFunc("/flushed", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", "X-Done")
		io.WriteString(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, "data: 2\n\n")
		w.Header().Set("X-Done", "yes")
		w.Header().Set(http.TrailerPrefix+"X-Late", "too")
	})
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Content-Length, X-Ok")
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set("Content-Length", "99")
		w.Header().Set("X-Ok", "ok")
	})
	mux.HandleFunc("/length", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(big)))
		io.WriteString(w, big)
	})
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "12345")
	})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		_, err := io.WriteString(w, "no")
		assert.ErrorIs(t, err, http.ErrBodyNotAllowed)
	})
	mux.HandleFunc("/nobody", func(w http.ResponseWriter, r *http.Request) {
		if r.Body != http.NoBody {
			t.Errorf("a request without a body has %T for one, not http.NoBody", r.Body)
		}
	})
	mux.HandleFunc("/split", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Bad", "a\r\nInjected: yes")
		io.WriteString(w, "ok")
	})
	addr := serve(t, &h1server.Server{Handler: mux})
	c := dial(t, addr)
	get := func(path string) (*http.Response, string) {
		c.send("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
		return c.read("GET")
	}

	res, body := get("/small")
	assert.Equal(t, "<html>hi</html>", body)
	assert.EqualValues(t, 15, res.ContentLength)
	assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"), "sniffed, as net/http does")
	assert.NotEmpty(t, res.Header.Get("Date"))

	res, body = get("/big")
	assert.Equal(t, big, body)
	assert.Equal(t, []string{"chunked"}, res.TransferEncoding)

	res, body = get("/flushed")
	assert.Equal(t, "data: 1\n\ndata: 2\n\n", body)
	assert.Equal(t, []string{"chunked"}, res.TransferEncoding)
	assert.Equal(t, "yes", res.Trailer.Get("X-Done"))
	assert.Equal(t, "too", res.Trailer.Get("X-Late"))

	// Read raw: Go's client refuses an answer that declares a framing header as a trailer, as
	// net/http's server sends the Trailer header declared.
	c.send("GET /trailers HTTP/1.1\r\nHost: x\r\n\r\n")
	var trailer []string
	for inTrailer := false; ; {
		line, err := c.r.ReadString('\n')
		require.NoError(t, err)
		if inTrailer && line == "\r\n" {
			break
		}
		if inTrailer {
			trailer = append(trailer, strings.TrimSpace(line))
		}
		inTrailer = inTrailer || line == "0\r\n"
	}
	assert.Equal(t, []string{"X-Ok: ok"}, trailer, "a framing header is no trailer (net/http's server drops it)")

	res, body = get("/length")
	assert.Equal(t, big, body)
	assert.EqualValues(t, len(big), res.ContentLength)
	assert.Empty(t, res.TransferEncoding)

	res, body = get("/nocontent")
	assert.Equal(t, 204, res.StatusCode)
	assert.Empty(t, body)

	get("/nobody")
	res, body = get("/split")
	assert.Equal(t, "ok", body)
	assert.Empty(t, res.Header.Get("Injected"), "a line break in a value cannot start a header")

	c.send("HEAD /small HTTP/1.1\r\nHost: x\r\n\r\n")
	res, body = c.read("HEAD")
	assert.Empty(t, body)
	assert.EqualValues(t, 15, res.ContentLength, "HEAD: the length the GET would have")
	assert.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"), "HEAD: the type the GET would have")

	// Still the same connection: every answer above was framed right.
	res, _ = get("/small")
	assert.Equal(t, 200, res.StatusCode)

	// Short of its Content-Length: the connection ends, so the client sees the answer cut.
	c.send("GET /short HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(c.r, nil)
	require.NoError(t, err)
	_, err = io.ReadAll(res.Body)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)

	c = dial(t, addr)
	c.send("GET /big HTTP/1.0\r\n\r\n")
	res, body = c.read("GET")
	assert.Equal(t, big, body, "HTTP/1.0: the body ends with the connection")
	assert.True(t, res.Close)

	// HTTP/1.0 kept alive when it asks, as long as the answer has a length (ab -k does this).
	c = dial(t, addr)
	c.send("GET /small HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	res, body = c.read("GET")
	assert.Equal(t, "<html>hi</html>", body)
	assert.Equal(t, "keep-alive", res.Header.Get("Connection"))
	c.send("GET /big HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	res, body = c.read("GET")
	assert.Equal(t, big, body, "no length known: the body ends with the connection")
	assert.True(t, res.Close)

	c = dial(t, addr)
	c.send("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n")
	res, body = c.read("OPTIONS")
	assert.Equal(t, 200, res.StatusCode, "OPTIONS * is the server's, as net/http answers it")
	assert.Empty(t, body)
}

// TestExpectContinue: 100 Continue goes out when the handler first reads the body, not when it
// answers without reading; then the connection ends, since the body may never come.
func TestExpectContinue(t *testing.T) {
	addr := serve(t, &h1server.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/read":
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, string(b))
			return
		case "/aside":
			// The body read on another goroutine while the handler answers: the 100 and the
			// answer's header must not race for the connection (go test -race sees it if they
			// do).
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = io.ReadAll(r.Body)
			}()
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, "answered")
			w.(http.Flusher).Flush()
			<-done
			return
		}
		http.Error(w, "no", http.StatusForbidden)
	})})
	c := dial(t, addr)
	c.send("POST /read HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	res, _ := c.read("POST")
	require.Equal(t, 100, res.StatusCode)
	c.send("hello")
	res, body := c.read("POST")
	assert.Equal(t, "hello", body)

	c.send("POST /refuse HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
	res, _ = c.read("POST")
	assert.Equal(t, 403, res.StatusCode, "no 100 first")
	_, err := c.r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "closed: the client may be waiting to send the body")

	for range 20 {
		c = dial(t, addr)
		c.send("POST /aside HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
		res, _ = c.read("POST")
		if res.StatusCode == http.StatusContinue { // the reader was first: then the answer
			res, _ = c.read("POST")
		}
		assert.Equal(t, http.StatusAccepted, res.StatusCode)
	}

	c = dial(t, addr)
	c.send("POST /read HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: 5\r\n\r\nhello")
	res, _ = c.read("POST")
	assert.Equal(t, http.StatusExpectationFailed, res.StatusCode)
}

// TestClientGone: a request that outlives the watch's delay has its context cancelled when the
// client closes the connection; a short one is never watched, and a pipelined request read by
// the watch is served next.
func TestClientGone(t *testing.T) {
	cancelled := make(chan struct{})
	deadlined := make(chan error, 1)
	addr := serve(t, &h1server.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/wait":
			select {
			case <-r.Context().Done():
				close(cancelled)
			case <-time.After(5 * time.Second):
			}
		case "/slow":
			time.Sleep(50 * time.Millisecond)
			io.WriteString(w, "slow")
		case "/deadline":
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			select {
			case <-r.Context().Done():
				deadlined <- r.Context().Err()
			case <-time.After(2 * time.Second):
				deadlined <- nil
			}
		default:
			io.WriteString(w, r.URL.Path)
		}
	})})
	c := dial(t, addr)
	c.send("GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(100 * time.Millisecond)
	c.c.Close()
	select {
	case <-cancelled:
	case <-time.After(3 * time.Second):
		t.Fatal("the request's context was not cancelled when the client left")
	}

	// A handler's own read deadline (http.ResponseController) passing while the connection is
	// watched does not end the watch quietly: as in net/http's server, it cancels the request,
	// and a client that then leaves is not missed.
	c = dial(t, addr)
	c.send("GET /deadline HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(100 * time.Millisecond)
	c.c.Close()
	select {
	case err := <-deadlined:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(3 * time.Second):
		t.Fatal("the request's context was not cancelled after the handler's read deadline")
	}

	// The next request comes while the slow one runs: the watch reads its first byte, and it
	// is served, whole, after.
	c = dial(t, addr)
	c.send("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(20 * time.Millisecond)
	c.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	_, body := c.read("GET")
	assert.Equal(t, "slow", body)
	_, body = c.read("GET")
	assert.Equal(t, "/next", body)
}

// TestShutdown: idle connections end at once, a busy one finishes its request (and is closed
// after it), and Shutdown returns when it has; new connections are refused.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	s := &h1server.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "done")
	})}
	addr := serve(t, s)
	idle := dial(t, addr)
	idle.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	idle.read("GET")
	busy := dial(t, addr)
	busy.send("GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	_, err := idle.r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "the idle connection ends")
	select {
	case <-shut:
		t.Fatal("Shutdown returned while a request was running")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	res, body := busy.read("GET")
	assert.Equal(t, "done", body)
	assert.True(t, res.Close, "closed after its answer")
	require.NoError(t, <-shut)
}

// TestRefusals: what cannot be read is answered as net/http answers it, and the connection
// ends: a header over the bound 431, an unknown version 505, CONNECT 501; a handler's panic ends
// the connection with nothing more sent (http.ErrAbortHandler quietly).
func TestRefusals(t *testing.T) {
	var panics atomic.Int64
	addr := serve(t, &h1server.Server{MaxHeaderBytes: 1 << 10, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panics.Add(1)
		panic(http.ErrAbortHandler)
	})})
	for req, status := range map[string]int{
		"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n": 431,
		"GET / HTTP/2.0\r\nHost: x\r\n\r\n":                                              505,
		"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n":                                  501,
		"GET / HTTP/1.1\r\nHost: a b\r\n\r\n":                                            400,
		"GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n":                               400,
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\x00b\r\n\r\n":                                 400,
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n":                  501,
	} {
		c := dial(t, addr)
		c.send(req)
		res, _ := c.read("GET")
		assert.Equal(t, status, res.StatusCode, "%q", req)
		assert.True(t, res.Close)
	}
	c := dial(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_, err := c.r.ReadByte()
	assert.True(t, errors.Is(err, io.EOF), "a panic ends the connection unanswered: %v", err)
	assert.EqualValues(t, 1, panics.Load())
}

// TestUnreadBody: a handler that answers without reading the body. A small body is read (and
// dropped) before the answer goes, so the connection carries the next request; a large one, or
// one the client does not send, is not waited for: the answer says Connection: close and
// reaches the client whole (no reset), and the connection ends at once, not when the client
// gives up.
func TestUnreadBody(t *testing.T) {
	addr := serve(t, &h1server.Server{HeaderTimeout: 300 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no key", http.StatusUnauthorized)
	})})
	c := dial(t, addr)
	c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + strings.Repeat("a", 1000))
	res, _ := c.read("POST")
	assert.Equal(t, 401, res.StatusCode)
	assert.False(t, res.Close, "a small body is read: the connection goes on")
	c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	res, _ = c.read("GET")
	assert.Equal(t, 401, res.StatusCode)

	// 10 MB declared, the client still sending: the answer comes, with Connection: close.
	up := dial(t, addr)
	go func() {
		_, _ = io.WriteString(up.c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n")
		chunk := []byte(strings.Repeat("a", 64<<10))
		for range 150 {
			if _, err := up.c.Write(chunk); err != nil {
				return
			}
		}
	}()
	res, body := up.read("POST")
	assert.Equal(t, 401, res.StatusCode)
	assert.Contains(t, body, "no key")
	assert.True(t, res.Close)

	// 100 MB declared and nothing sent: not waited for.
	for _, length := range []string{"100000000", "1000"} {
		c = dial(t, addr)
		start := time.Now()
		c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + "\r\n\r\n")
		res, _ = c.read("POST")
		assert.Equal(t, 401, res.StatusCode)
		assert.True(t, res.Close, "length %s", length)
		_, err := c.r.ReadByte()
		assert.Error(t, err, "the connection ends")
		assert.Less(t, time.Since(start), 5*time.Second, "length %s: ended by the server, not the test's deadline", length)
	}
}

// TestInformational: a 103 carries the header so far but no framing header of the final
// answer; a 101 (no upgrade is served here) carries no body and ends the connection.
func TestInformational(t *testing.T) {
	addr := serve(t, &h1server.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/upgrade" {
			w.WriteHeader(http.StatusSwitchingProtocols)
			_, err := io.WriteString(w, "raw bytes")
			assert.ErrorIs(t, err, http.ErrBodyNotAllowed)
			return
		}
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.Header().Set("Content-Length", "2")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "ok")
	})})
	c := dial(t, addr)
	c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	line, err := c.r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "HTTP/1.1 103 Early Hints\r\n", line)
	var hints []string
	for {
		l, err := c.r.ReadString('\n')
		require.NoError(t, err)
		if l == "\r\n" {
			break
		}
		hints = append(hints, l)
	}
	assert.Contains(t, hints, "Link: </style.css>; rel=preload\r\n")
	for _, h := range hints {
		assert.NotContains(t, h, "Content-Length", "a 1xx answer has no framing")
	}
	res, body := c.read("GET")
	assert.Equal(t, "ok", body)
	assert.EqualValues(t, 2, res.ContentLength)

	c.send("GET /upgrade HTTP/1.1\r\nHost: x\r\n\r\n")
	res, _ = c.read("GET")
	assert.Equal(t, 101, res.StatusCode)
	_, err = c.r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "ended after the 101, with nothing sent after it")
}

// TestIdleTimeout: a connection waiting longer than IdleTimeout for its next request ends, one
// whose requests come sooner stays; and the idle wait's deadline, which stays armed through a
// request whose body came with its head, reaches neither a body still arriving after it nor a
// request (watched for its client's end) that outlasts it.
func TestIdleTimeout(t *testing.T) {
	const idle = 200 * time.Millisecond
	cancelled := make(chan struct{}, 1)
	addr := serve(t, &h1server.Server{IdleTimeout: idle, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.URL.Path == "/long" {
			select {
			case <-r.Context().Done():
				cancelled <- struct{}{}
				return
			case <-time.After(2 * idle):
			}
		}
		_, _ = w.Write(b)
	})})
	post := func(path, body string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}

	c := dial(t, addr)
	for range 5 { // requests closer together than the timeout: the connection stays
		c.send(post("/", "ping"))
		_, body := c.read("POST")
		assert.Equal(t, "ping", body)
		time.Sleep(idle / 2)
	}
	time.Sleep(2 * idle)
	_, err := c.r.ReadByte()
	assert.ErrorIs(t, err, io.EOF, "an idle connection past its timeout ends")

	// A body that takes longer than the timeout to arrive, after an earlier request.
	c = dial(t, addr)
	c.send(post("/", "first"))
	_, body := c.read("POST")
	assert.Equal(t, "first", body)
	c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf ")
	time.Sleep(2 * idle)
	c.send("later")
	res, body := c.read("POST")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "half later", body)

	// A request that runs longer than the timeout, its body come with its head.
	c = dial(t, addr)
	c.send(post("/", "first"))
	c.read("POST")
	c.send(post("/long", "long"))
	res, body = c.read("POST")
	assert.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, "long", body)
	assert.Empty(t, cancelled, "the long request was not cancelled")
}
