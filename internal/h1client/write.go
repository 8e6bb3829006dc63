package h1client

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// defaultUserAgent is what Request.Write sends when a request has no User-Agent header.
const defaultUserAgent = "Go-http-client/1.1"

// writeRequest writes req as Request.Write writes it, for the requests Transport carries (a
// known ContentLength, no trailers, not CONNECT, header values vetted by checkHeader), without
// its fmt calls, header sorting and body wrappers: a quarter of the time, and one allocation
// where it makes eight (BenchmarkH1Write), about 1 µs of the gateway's CPU per proxied request.
// A server reads the same request from either (TestWriteRequestMatchesRequestWrite,
// FuzzWriteRequest). Headers go out in map order: HTTP gives no meaning to the order of
// different field names (two keys differing only in case, which the proxy never sends since its
// keys are canonical, would send their values in either order).
func writeRequest(w *bufio.Writer, req *http.Request) (err error) {
	if req.Body != nil {
		defer func() { // closed whatever happens, as Request.Write and RoundTrippers do
			if cerr := req.Body.Close(); err == nil {
				err = cerr
			}
		}()
	}
	if req.URL == nil {
		return errors.New("h1client: request without a URL")
	}
	ruri := req.URL.RequestURI()
	if containsCTL(ruri) {
		return errors.New("h1client: control character in request URL")
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	host, err := requestHost(req)
	if err != nil {
		return err
	}
	w.WriteString(method)
	w.WriteByte(' ')
	w.WriteString(ruri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	ua := defaultUserAgent
	if vv, ok := req.Header["User-Agent"]; ok {
		ua = ""
		if len(vv) > 0 {
			ua = vv[0]
		}
	}
	if ua != "" { // a value of spaces is sent, empty once trimmed, as Request.Write sends it
		writeField(w, "User-Agent", textproto.TrimString(ua))
	}
	// Connection and Content-Length go before the header's own fields, as in Request.Write: a
	// field the header repeats under another case reaches the server in the same order.
	if req.Close && !hasToken(req.Header.Get("Connection"), "close") {
		w.WriteString("Connection: close\r\n")
	}
	length := req.ContentLength
	if req.Body == http.NoBody {
		length = 0 // as Request.Write counts it, whatever ContentLength says
	}
	if length > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), length, 10))
		w.WriteString("\r\n")
	}
	for k, vv := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		for _, v := range vv {
			writeField(w, k, textproto.TrimString(v))
		}
	}
	if _, err := w.WriteString("\r\n"); err != nil {
		return err
	}
	var n int64
	if req.Body != nil {
		// No more than ContentLength bytes are written, whatever the body holds: bytes past the
		// declared length would reach the upstream as the start of another request.
		if n, err = copyAtMost(w, req.Body, length); err != nil {
			return err
		}
		extra, err := io.Copy(io.Discard, req.Body)
		if err != nil {
			return err
		}
		n += extra
	}
	if n != length {
		return fmt.Errorf("h1client: ContentLength=%d with body length %d", length, n)
	}
	return nil
}

func writeField(w *bufio.Writer, k, v string) {
	w.WriteString(k)
	w.WriteString(": ")
	w.WriteString(v)
	w.WriteString("\r\n")
}

// requestHost is the Host header Request.Write sends for req: the request's Host or its URL's, in
// punycode, empty when it is not a valid header value, without an IPv6 zone (RFC 6874).
func requestHost(req *http.Request) (string, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	host, err := httpguts.PunycodeHostPort(host)
	if err != nil {
		return "", err
	}
	if !httpguts.ValidHostHeader(host) {
		return "", nil
	}
	if strings.HasPrefix(host, "[") {
		if i := strings.LastIndex(host, "]"); i >= 0 {
			if j := strings.LastIndex(host[:i], "%"); j >= 0 {
				host = host[:j] + host[i:]
			}
		}
	}
	return host, nil
}

// hasToken reports whether v holds token, in any case, delimited by the value's ends, spaces,
// tabs or commas: how net/http decides a Connection header already says close.
func hasToken(v, token string) bool {
	boundary := func(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
	for i := 0; i+len(token) <= len(v); i++ {
		end := i + len(token)
		if (i == 0 || boundary(v[i-1])) && (end == len(v) || boundary(v[end])) && strings.EqualFold(v[i:end], token) {
			return true
		}
	}
	return false
}

func containsCTL(s string) bool {
	for i := range len(s) {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// copyAtMost copies r into w until r ends or limit bytes have been copied, reading straight into
// w's buffer: io.Copy through an io.LimitedReader made the reader escape, an allocation a
// request.
func copyAtMost(w *bufio.Writer, r io.Reader, limit int64) (int64, error) {
	var n int64
	empty := 0 // reads in a row that gave nothing: a broken reader gives up as in bufio
	for n < limit {
		if w.Available() == 0 {
			if err := w.Flush(); err != nil {
				return n, err
			}
		}
		buf := w.AvailableBuffer()
		buf = buf[:min(int64(cap(buf)), limit-n)]
		m, err := r.Read(buf)
		w.Write(buf[:m]) // its own buffer: nothing is copied, and it has room
		n += int64(m)
		switch {
		case m > 0:
			empty = 0
		case err == nil:
			if empty++; empty >= 100 {
				return n, io.ErrNoProgress
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
