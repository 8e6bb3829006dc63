package h1server_test

import (
	"bufio"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/h1server"
)

// BenchmarkServe serves a small POST (a chat request's size, read whole, answered with 300
// bytes) on keep-alive connections from 16 clients at once, on this server and on net/http's in
// the same process, and reports the time per request of each and their ratio:
//
//	go test ./internal/h1server -run '^$' -bench Serve -benchtime 3s
func BenchmarkServe(b *testing.B) {
	answer := make([]byte, 300)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})
	body := `{"model":"llama","messages":[{"role":"user","content":"Tell me about the weather in Paris."}],"max_tokens":64}`
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	listen := func(serve func(net.Listener) error) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ln.Close() })
		go serve(ln)
		return ln.Addr().String()
	}
	ours := &h1server.Server{Handler: h, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	theirs := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)}
	b.Cleanup(func() { ours.Close(); theirs.Close() })
	oursAddr, theirsAddr := listen(ours.Serve), listen(theirs.Serve)
	// run sends n requests from 16 connections and returns the time per request.
	run := func(addr string, n int) time.Duration {
		const clients = 16
		var wg sync.WaitGroup
		start := time.Now()
		per := n/clients + 1
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				r := bufio.NewReader(c)
				for range per {
					if _, err := c.Write(req); err != nil {
						b.Error(err)
						return
					}
					res, err := http.ReadResponse(r, nil)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}()
		}
		wg.Wait()
		return time.Since(start) / time.Duration(per*clients)
	}
	var o, t time.Duration
	for range 2 { // alternated, twice each
		o += run(oursAddr, b.N/2)
		t += run(theirsAddr, b.N/2)
	}
	b.ReportMetric(float64(o.Nanoseconds())/2, "ns/op")
	b.ReportMetric(float64(t.Nanoseconds())/2, "net/http-ns/op")
	b.ReportMetric(float64(o)/float64(t), "x-net/http")
}
