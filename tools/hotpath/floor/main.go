// Command floor is the least an OpenAI proxy can do on each HTTP/1.1 server a Go gateway could
// be built on, for BenchmarkHotPath's floors arms (issue 39: which server path is worth it, on
// numbers, before one is built). Each one reads a request, sends its body to the one upstream
// on the gateway's own upstream client (internal/h1client) and copies the answer back: no
// routing, headers, metrics or checks. What separates them is only the server:
//
//   - nethttp: net/http's Server, as infergate serves today;
//   - fasthttp: github.com/valyala/fasthttp's Server (its own connection loop, pooled request
//     and response objects, no goroutine per request beyond the connection's);
//   - loop: a hand-written loop on the connection: one goroutine per connection, a bufio pair
//     over internal/sockio as the gateway's own server has (raw system calls, an answer's last
//     write made with the wait for the next request), a request parsed just far enough to find
//     its body (Content-Length only), and the answer's head and body written in one call.
//
// It lives in its own module so that fasthttp stays out of the gateway's go.mod until a decision
// takes it in. It is a measuring device, not a server: the loop speaks only as much HTTP/1.1 as
// the benchmark's client does.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/infergate/infergate/internal/h1client"
	"github.com/infergate/infergate/internal/sockio"
	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := flag.String("upstream", "", "the upstream's host:port")
	server := flag.String("server", "nethttp", "nethttp, fasthttp or loop")
	flag.Parse()
	up := h1client.New(*upstream, http.DefaultTransport)
	target := &url.URL{Scheme: "http", Host: *upstream}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	// send posts body to path upstream and returns the answer, whose body the caller closes.
	send := func(ctx context.Context, path string, body []byte, contentType string) (*http.Response, error) {
		u := *target
		u.Path = path
		req := &http.Request{Method: http.MethodPost, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {contentType}}, Body: io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)), Host: u.Host}
		return up.RoundTrip(ctx, req)
	}
	switch *server {
	case "nethttp":
		err = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			res, err := send(r.Context(), r.URL.Path, body, r.Header.Get("Content-Type"))
			if err != nil {
				http.Error(w, err.Error(), 502)
				return
			}
			defer res.Body.Close()
			w.Header()["Content-Type"] = res.Header["Content-Type"]
			if res.ContentLength >= 0 {
				w.Header()["Content-Length"] = []string{strconv.FormatInt(res.ContentLength, 10)}
			}
			w.WriteHeader(res.StatusCode)
			copyFlushing(w, res.Body, func() { http.NewResponseController(w).Flush() })
		}))
	case "fasthttp":
		err = fasthttp.Serve(ln, func(ctx *fasthttp.RequestCtx) {
			res, err := send(ctx, string(ctx.Path()), ctx.PostBody(), string(ctx.Request.Header.ContentType()))
			if err != nil {
				ctx.Error(err.Error(), 502)
				return
			}
			ctx.SetStatusCode(res.StatusCode)
			ctx.Response.Header.SetContentType(res.Header.Get("Content-Type"))
			if res.ContentLength >= 0 {
				b := make([]byte, res.ContentLength)
				_, err := io.ReadFull(res.Body, b)
				res.Body.Close()
				if err != nil {
					ctx.Error(err.Error(), 502)
					return
				}
				ctx.SetBody(b)
				return
			}
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				defer res.Body.Close()
				copyFlushing(w, res.Body, func() { _ = w.Flush() })
			})
		})
	case "loop":
		for {
			c, err := ln.Accept()
			if err != nil {
				log.Fatal(err)
			}
			go serveLoop(c, send)
		}
	default:
		err = fmt.Errorf("-server %q: nethttp, fasthttp or loop", *server)
	}
	log.Fatal(err)
}

// copyFlushing copies src to w, flushing after each read so a stream's events leave as they come.
func copyFlushing(w io.Writer, src io.Reader, flush func()) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			flush()
		}
		if err != nil {
			return
		}
	}
}

// serveLoop serves one connection's requests in turn until it closes.
func serveLoop(c net.Conn, send func(context.Context, string, []byte, string) (*http.Response, error)) {
	defer c.Close()
	var in sockio.Reader
	var out sockio.Writer
	in.Init(c, nil)
	out.Init(c, nil)
	br := bufio.NewReaderSize(&in, 16<<10)
	bw := bufio.NewWriterSize(&out, 16<<10)
	// flush sends an answer's last bytes and waits for the next request in one step.
	flush := func() error {
		out.Wait = true
		err := bw.Flush()
		out.Wait = false
		return err
	}
	ctx := context.Background()
	var body []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		_, rest, _ := bytes.Cut(line, []byte(" "))
		path, _, _ := bytes.Cut(rest, []byte(" "))
		p := string(path)
		length, contentType := -1, "application/json"
		for {
			h, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(h) <= 2 {
				break
			}
			k, v, _ := bytes.Cut(h, []byte(":"))
			v = bytes.TrimSpace(v)
			switch {
			case bytes.EqualFold(k, []byte("Content-Length")):
				length, _ = strconv.Atoi(string(v))
			case bytes.EqualFold(k, []byte("Content-Type")):
				contentType = string(v)
			}
		}
		if length < 0 {
			return // the floor reads Content-Length bodies only
		}
		body = append(body[:0], make([]byte, length)...)
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		res, err := send(ctx, p, body, contentType)
		if err != nil {
			fmt.Fprintf(bw, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
			_ = bw.Flush()
			continue
		}
		fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n", res.StatusCode, http.StatusText(res.StatusCode), res.Header.Get("Content-Type"))
		if res.ContentLength >= 0 {
			fmt.Fprintf(bw, "Content-Length: %d\r\n\r\n", res.ContentLength)
			_, err = io.Copy(bw, res.Body)
			res.Body.Close()
			if err != nil || flush() != nil {
				return
			}
			continue
		}
		bw.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		cw := &chunked{bw}
		copyFlushing(cw, res.Body, func() { _ = bw.Flush() })
		res.Body.Close()
		bw.WriteString("0\r\n\r\n")
		if flush() != nil {
			return
		}
	}
}

// chunked writes each Write as one HTTP/1.1 chunk.
type chunked struct{ w *bufio.Writer }

func (c *chunked) Write(p []byte) (int, error) {
	fmt.Fprintf(c.w, "%x\r\n", len(p))
	c.w.Write(p)
	_, err := c.w.WriteString("\r\n")
	if err != nil {
		return 0, err
	}
	return len(p), nil
}
