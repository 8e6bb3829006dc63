package h1server_test

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/h1server"
)

// echo answers with what it read of a request.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %s %s %q", r.Method, r.URL.RequestURI(), r.Host, b)
})

// exchange sends raw on a new connection to addr, half-closes, and reads every answer until
// the server closes: their statuses and bodies.
func exchange(t *testing.T, addr string, raw []byte) []string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		_, _ = c.Write(raw)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	r := bufio.NewReader(c)
	var got []string
	for {
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			return got
		}
		b, err := io.ReadAll(res.Body)
		if err != nil {
			got = append(got, fmt.Sprintf("%d (cut)", res.StatusCode))
			return got
		}
		if res.StatusCode >= 400 {
			b = nil // the wording of a refusal may differ
		}
		got = append(got, fmt.Sprintf("%d %s", res.StatusCode, b))
	}
}

var (
	emptyHost    = regexp.MustCompile(`(?i)(^|\n)host:[ \t]*\r?\n`)
	absoluteForm = regexp.MustCompile(`^[^ ]+ [^/* ][^ ]*://`)
)

// FuzzServer: whatever bytes a client sends, the server answers its first request as net/http's
// server does (the same status, and the same body the handler made of the request), except
// where the package documents a difference: an empty Host header, and an absolute-form target,
// are refused. It never panics,
// and never hangs (the exchange's deadline).
func FuzzServer(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\n\r\nhello",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\nHost: x\n\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nab",
		"GET http://other/x?y=1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ours := &h1server.Server{Handler: echo, Logger: quiet, HeaderTimeout: 2 * time.Second}
	theirs := &http.Server{Handler: echo, ReadHeaderTimeout: 2 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	listen := func(serve func(net.Listener) error) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Fatal(err)
		}
		go serve(ln)
		f.Cleanup(func() { ln.Close() })
		return ln.Addr().String()
	}
	oursAddr, theirsAddr := listen(ours.Serve), listen(theirs.Serve)
	f.Cleanup(func() { ours.Close(); theirs.Close() })
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 64<<10 {
			return
		}
		got, want := exchange(t, oursAddr, raw), exchange(t, theirsAddr, raw)
		first := func(s []string) string {
			for _, a := range s {
				if a[:3] != "100" {
					return a
				}
			}
			return ""
		}
		g, w := first(got), first(want)
		if g == w {
			return
		}
		if g[:min(3, len(g))] == "400" && (emptyHost.Match(raw) || absoluteForm.Match(raw)) {
			return // documented: an empty Host, and an absolute-form target, are refused
		}
		t.Fatalf("%q:\nours   %q\nnet/http %q", raw, got, want)
	})
}
