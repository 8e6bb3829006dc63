package roundtriptest

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// upstream is an HTTP/1.1 server on a raw socket whose answer depends on the request's path, so
// that every byte a client reads is the test's choice.
type upstream struct {
	addr   string
	conns  atomic.Int32  // connections accepted
	reqs   atomic.Int32  // requests read
	closed chan struct{} // receives when the server closed a connection on purpose
}

func startUpstream(t *testing.T) *upstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &upstream{addr: ln.Addr().String(), closed: make(chan struct{}, 16)}
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

// bigBody is the length of /big's body: more than any client's read buffer.
const bigBody = 100000

// hugeHead is the length of /huge-head's header: past http.Transport's default
// MaxResponseHeaderBytes (10 MiB), which h1client's limit equals.
const hugeHead = 11 << 20

func (s *upstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		switch req.URL.Path {
		case "/early":
			// Answers before reading the body, as net/http's server does with a 413: it stops
			// sending, waits a moment without reading, and hangs up.
			s.reqs.Add(1)
			io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nConnection: close\r\nContent-Length: 9\r\n\r\ntoo large")
			_ = c.(*net.TCPConn).CloseWrite()
			time.Sleep(200 * time.Millisecond)
			return
		case "/hang":
			// Never answers: waits for the client to hang up.
			s.reqs.Add(1)
			_, _ = io.Copy(io.Discard, c)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		s.reqs.Add(1)
		switch req.URL.Path {
		case "": // a CONNECT's authority
			echo := req.Method + " " + req.RequestURI
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(echo), echo)
		case "/echo": // what the server read
			echo := fmt.Sprintf("%s %s host=%s length=%d te=%v ua=%q close=%v body=%d:%x", req.Method, req.RequestURI, req.Host,
				req.ContentLength, req.TransferEncoding, req.UserAgent(), req.Close, len(body), sha256.Sum256(body))
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(echo), echo)
		case "/close-after": // answers, then closes the idle connection (an upstream's keep-alive timeout)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			time.Sleep(10 * time.Millisecond)
			c.Close()
			s.closed <- struct{}{}
			return
		case "/chunked": // an informational response first, then a chunked body
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n3\r\n th\r\n0\r\n\r\n")
		case "/many-1xx": // ten informational responses, then the answer
			io.WriteString(c, strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 10)+"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		case "/conn-close":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye")
			time.Sleep(200 * time.Millisecond) // still open: only the header says not to reuse it
			return
		case "/upgrade":
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: other\r\n\r\n")
			_ = c.(*net.TCPConn).CloseWrite()
			_, _ = io.Copy(io.Discard, c)
			return
		case "/big":
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", bigBody, strings.Repeat("x", bigBody))
		case "/stall-body": // the head and part of the body, then nothing until the client hangs up
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
			_, _ = io.Copy(io.Discard, c)
			return
		case "/huge-head":
			w := bufio.NewWriterSize(c, 64<<10)
			w.WriteString("HTTP/1.1 200 OK\r\nX-Big: ")
			w.WriteString(strings.Repeat("y", hugeHead))
			w.WriteString("\r\nContent-Length: 0\r\n\r\n")
			if w.Flush() != nil {
				return
			}
		case "/no-content":
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		case "/not-modified":
			io.WriteString(c, "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n")
		case "/empty":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		default:
			if req.Method == http.MethodHead {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
				continue
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Path: "+req.URL.Path+"\r\n\r\nplain")
		}
	}
}

// serveOnce answers the first request of each connection with raw, then closes its side of the
// connection and waits for the client to close its own (so the client reads all of raw: closing
// a socket with unread input would reset it).
func serveOnce(t *testing.T, raw []byte) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					return
				}
				_, _ = c.Write(raw)
				_ = c.(*net.TCPConn).CloseWrite()
				_ = c.SetReadDeadline(time.Now().Add(time.Minute))
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}
