// Package h1contract is the contract an HTTP/1.1 server of the gateway's proxy routes keeps,
// as raw bytes on a socket: what clients and intermediaries send that an ordinary client library
// never would (conflicting framing, folded and oversized headers, pipelined requests, Expect,
// HTTP/1.0, half-closed connections, trickled headers), and what the server must make of it.
//
// Issue 39 allows the OpenAI and Anthropic routes to be served below net/http's server, if the
// numbers say so; whichever server serves them must pass this suite, and net/http's does today
// (surface/openai's TestHTTP1Contract), so the suite is written against behaviour, not against
// one implementation: where RFC 9112 leaves a server a choice (reject, or accept and close), any
// safe choice passes. What no server may do: answer a request the client did not send (request
// smuggling: the upstream sees more requests than the client's framing holds), hang, or keep a
// connection whose framing it could not trust.
package h1contract

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Target is the server under test: an HTTP/1.1 listener that answers POST
// /v1/chat/completions with Chat as its body with a 200, by way of an upstream whose requests
// the test can count.
type Target struct {
	Addr string
	// Chat is a chat completions body the server answers with a 200.
	Chat string
	// Upstream is how many requests the upstream has received so far.
	Upstream func() int64
	// HeaderTimeout, when set, is the server's bound on the time a request's header may take:
	// a client trickling its header must be cut off within twice that (checked unless -short).
	HeaderTimeout time.Duration
	// MaxHeaderBytes is the largest header the server accepts (net/http's default: 1 MiB).
	MaxHeaderBytes int
}

// Run checks the contract against tg, one subtest a rule.
func Run(t *testing.T, tg Target) {
	if tg.MaxHeaderBytes == 0 {
		tg.MaxHeaderBytes = http.DefaultMaxHeaderBytes
	}
	req := func(extra string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" + extra +
			"Content-Length: " + strconv.Itoa(len(tg.Chat)) + "\r\n\r\n" + tg.Chat
	}
	// upstream runs fn and returns how many requests reached the upstream meanwhile.
	upstream := func(fn func()) int64 {
		before := tg.Upstream()
		fn()
		// A smuggled request may reach the upstream a moment after the answers were read.
		time.Sleep(50 * time.Millisecond)
		return tg.Upstream() - before
	}

	t.Run("keep-alive", func(t *testing.T) {
		c := dial(t, tg.Addr)
		for range 3 {
			c.send(req(""))
			c.expect(200)
		}
	})
	t.Run("pipelined requests are answered in order", func(t *testing.T) {
		n := upstream(func() {
			c := dial(t, tg.Addr)
			c.send(req("") + req("") + req(""))
			for range 3 {
				c.expect(200)
			}
		})
		if n != 3 {
			t.Fatalf("the upstream heard %d requests for 3 pipelined", n)
		}
	})
	t.Run("HTTP/1.0 closes after the answer", func(t *testing.T) {
		c := dial(t, tg.Addr)
		c.send(strings.Replace(req(""), "HTTP/1.1", "HTTP/1.0", 1))
		c.expect(200)
		c.expectClosed()
	})
	t.Run("Connection: close closes after the answer", func(t *testing.T) {
		c := dial(t, tg.Addr)
		c.send(req("Connection: close\r\n"))
		c.expect(200)
		c.expectClosed()
	})
	t.Run("Expect: 100-continue", func(t *testing.T) {
		c := dial(t, tg.Addr)
		full := req("Expect: 100-continue\r\n")
		head, body, _ := strings.Cut(full, "\r\n\r\n")
		c.send(head + "\r\n\r\n")
		c.expect(100)
		c.send(body)
		c.expect(200)
	})
	t.Run("a client that half-closes after its request gets the answer or none", func(t *testing.T) {
		// A server may read the half-close as the client gone (net/http and nginx do, so that
		// a client that hangs up stops a long generation) and end the connection unanswered;
		// what it must not do is answer anything but the answer (net/http's empty 200 for a
		// handler that wrote nothing). The request may reach the upstream after the client's
		// exchange ended: counted here, not in the next rule.
		n := upstream(func() {
			c := dial(t, tg.Addr)
			c.send(req(""))
			if err := c.conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(c.r, nil)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
					t.Fatalf("reading the answer: %v", err)
				}
				return // closed unanswered
			}
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatalf("reading the answer's body: %v", err)
			}
			if res.StatusCode != 200 || len(body) == 0 {
				t.Fatalf("HTTP %d with %d bytes of body, want the answer (200 with a body) or none", res.StatusCode, len(body))
			}
		})
		if n > 1 {
			t.Fatalf("the upstream heard %d requests for 1", n)
		}
	})
	t.Run("Content-Length and Transfer-Encoding together smuggle nothing", func(t *testing.T) {
		// Read as chunked, the body is the chat request and the bytes after the last chunk a
		// second request; read by Content-Length, they are all body. RFC 9112 §6.1: the server
		// may reject the message, or read it as chunked and close the connection after it.
		smuggled := req("")
		chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(tg.Chat), tg.Chat)
		msg := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
			"Content-Length: " + strconv.Itoa(len(chunked)+len(smuggled)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
			chunked + smuggled
		n := upstream(func() {
			c := dial(t, tg.Addr)
			c.send(msg)
			status := c.status()
			if status == 200 {
				c.expectClosed()
			} else if status != 400 {
				t.Fatalf("HTTP %d, want 400, or 200 and the connection closed", status)
			}
		})
		if n > 1 {
			t.Fatalf("the upstream heard %d requests: one was smuggled", n)
		}
	})
	t.Run("two different Content-Lengths are refused", func(t *testing.T) {
		n := upstream(func() {
			c := dial(t, tg.Addr)
			c.send(strings.Replace(req(""), "Content-Length:", "Content-Length: 2\r\nContent-Length:", 1))
			c.expect(400)
		})
		if n != 0 {
			t.Fatalf("the upstream heard %d requests", n)
		}
	})
	t.Run("a folded header line (obs-fold) is refused or unfolded", func(t *testing.T) {
		// RFC 9112 §5.2: reject with a 400, or replace the fold with spaces.
		c := dial(t, tg.Addr)
		c.send(req("X-Folded: a\r\n b\r\n"))
		if s := c.status(); s != 200 && s != 400 {
			t.Fatalf("HTTP %d, want 400 or 200", s)
		}
	})
	t.Run("a header line with no colon is refused", func(t *testing.T) {
		c := dial(t, tg.Addr)
		c.send(req("NoColonHere\r\n"))
		c.expect(400)
	})
	t.Run("bare LF line ends are read alike or refused", func(t *testing.T) {
		n := upstream(func() {
			c := dial(t, tg.Addr)
			c.send(strings.ReplaceAll(req(""), "\r\n", "\n"))
			if s := c.status(); s != 200 && s != 400 {
				t.Fatalf("HTTP %d, want 200 or 400", s)
			}
		})
		if n > 1 {
			t.Fatalf("the upstream heard %d requests", n)
		}
	})
	t.Run("a header over the bound is refused", func(t *testing.T) {
		c := dial(t, tg.Addr)
		big := "X-Big: " + strings.Repeat("a", tg.MaxHeaderBytes+4096) + "\r\n"
		c.sendIgnoringReset(req(big))
		if s := c.status(); s != 431 && s != 400 {
			t.Fatalf("HTTP %d, want 431 (or 400)", s)
		}
	})
	t.Run("many small headers within the bound are read", func(t *testing.T) {
		var h strings.Builder
		for i := range 2000 {
			fmt.Fprintf(&h, "X-H%d: v\r\n", i)
		}
		c := dial(t, tg.Addr)
		c.send(req(h.String()))
		c.expect(200)
	})
	t.Run("an overflowing chunk size is refused", func(t *testing.T) {
		c := dial(t, tg.Addr)
		c.sendIgnoringReset("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" +
			"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n" + tg.Chat + "\r\n0\r\n\r\n")
		if s := c.status(); s < 400 || s >= 500 {
			t.Fatalf("HTTP %d, want a 4xx", s)
		}
	})
	t.Run("a transfer coding other than chunked is refused", func(t *testing.T) {
		c := dial(t, tg.Addr)
		c.sendIgnoringReset(strings.Replace(req(""), "Content-Length:", "Transfer-Encoding: gzip\r\nX-Was-Length:", 1))
		if s := c.status(); s != 400 && s != 501 {
			t.Fatalf("HTTP %d, want 400 or 501", s)
		}
	})
	t.Run("a chunked body is read", func(t *testing.T) {
		// (The connection may close after it: a server that cannot tell whether a
		// Content-Length came with it closes after every chunked request.)
		c := dial(t, tg.Addr)
		half := len(tg.Chat) / 2
		c.send("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n%x;ext=1\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n", half, tg.Chat[:half], len(tg.Chat)-half, tg.Chat[half:]))
		c.expect(200)
	})
	t.Run("a malformed request line is refused", func(t *testing.T) {
		// Longer than HTTP/2's 24-byte preface: net/http's server with cleartext HTTP/2 on waits
		// for 24 bytes before it reads an HTTP/1 request, so a shorter one waits for its
		// header timeout instead of a 400 (a known limit of the net/http path, bounded by it).
		c := dial(t, tg.Addr)
		c.send("POST /v1/chat/completions\r\nHost: gw\r\n\r\n")
		c.expect(400)
	})
	t.Run("HTTP/1.1 without Host is refused", func(t *testing.T) {
		c := dial(t, tg.Addr)
		c.send(strings.Replace(req(""), "Host: gw\r\n", "", 1))
		c.expect(400)
	})
	t.Run("a trickled header is cut off", func(t *testing.T) {
		if tg.HeaderTimeout == 0 || testing.Short() {
			t.Skip("no header timeout given, or -short")
		}
		c := dial(t, tg.Addr)
		start := time.Now()
		msg := req("")
		for i := 0; i < len(msg); i++ {
			if _, err := c.conn.Write([]byte{msg[i]}); err != nil {
				break // cut off
			}
			if time.Since(start) > 2*tg.HeaderTimeout+time.Second {
				t.Fatalf("still writing the header after %v: the server keeps trickling clients", time.Since(start))
			}
			time.Sleep(tg.HeaderTimeout / 20)
		}
		_ = c.conn.SetReadDeadline(time.Now().Add(2 * tg.HeaderTimeout))
		_, err := io.ReadAll(c.r)
		if err != nil && !isReset(err) {
			t.Fatalf("the connection was not closed: %v", err)
		}
		if d := time.Since(start); d > 2*tg.HeaderTimeout+time.Second {
			t.Fatalf("cut off after %v, header timeout %v", d, tg.HeaderTimeout)
		}
	})
}

type conn struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &conn{t: t, conn: c, r: bufio.NewReader(c)}
}

func (c *conn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatalf("writing the request: %v", err)
	}
}

// sendIgnoringReset sends s, which the server may refuse and close on before it is all written.
func (c *conn) sendIgnoringReset(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil && !isReset(err) {
		c.t.Fatalf("writing the request: %v", err)
	}
}

// status reads one answer, its body included, and returns its status.
func (c *conn) status() int {
	c.t.Helper()
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		c.t.Fatalf("reading the answer: %v", err)
	}
	if res.StatusCode != http.StatusContinue {
		if _, err := io.Copy(io.Discard, res.Body); err != nil {
			c.t.Fatalf("reading the answer's body: %v", err)
		}
	}
	res.Body.Close()
	return res.StatusCode
}

func (c *conn) expect(status int) {
	c.t.Helper()
	if got := c.status(); got != status {
		c.t.Fatalf("HTTP %d, want %d", got, status)
	}
}

// expectClosed checks that the server closes the connection with nothing more to say.
func (c *conn) expectClosed() {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, err := c.r.ReadByte()
	if err == nil {
		rest, _ := c.r.Peek(c.r.Buffered())
		c.t.Fatalf("the connection stayed open and sent %q", append([]byte{b}, rest...))
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatal("the connection stayed open")
	}
}

func isReset(err error) bool {
	return errors.Is(err, io.EOF) || bytes.Contains([]byte(err.Error()), []byte("connection reset")) ||
		bytes.Contains([]byte(err.Error()), []byte("broken pipe"))
}
