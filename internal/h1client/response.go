package h1client

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// readResponse reads a response head from br as http.ReadResponse does. The common answer (an
// HTTP/1.1 head with a Content-Length, whole in br's buffer) is parsed here, in one pass over
// the buffered bytes with three allocations for the head's strings; anything else (a head that
// has not arrived whole, chunked or close-delimited bodies, 1xx, 204 and 304, HEAD, obs-folded
// or odd lines, a Trailer, duplicate framing headers) goes to http.ReadResponse, nothing having
// been consumed. http.ReadResponse was a tenth of the gateway's CPU per proxied request; what is
// parsed here is what it would parse (FuzzReadResponse holds the two to the same answer).
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	if res, ok := fastResponse(br, req); ok {
		return res, nil
	}
	return http.ReadResponse(br, req)
}

// commonKeys are header names upstreams send, canonical: a name matching one (in any case) costs
// no allocation.
var commonKeys = []string{
	"Content-Type", "Content-Length", "Date", "Server", "Connection", "Keep-Alive",
	"Cache-Control", "Vary", "X-Request-Id", "Content-Encoding", "Set-Cookie", "Etag",
	"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "X-Content-Type-Options",
}

func fastResponse(br *bufio.Reader, req *http.Request) (*http.Response, bool) {
	if req != nil && req.Method == http.MethodHead {
		return nil, false
	}
	if _, err := br.Peek(1); err != nil {
		return nil, false
	}
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, []byte("\r\n\r\n"))
	if end < 0 {
		return nil, false
	}
	head := buf[:end+2] // each line with its CRLF
	// The status line: "HTTP/1.1 " three digits, then the end or a space and the reason.
	nl := bytes.IndexByte(head, '\n')
	if nl < 1 || head[nl-1] != '\r' {
		return nil, false
	}
	line := head[:nl-1]
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || !isDigit(line[9]) || !isDigit(line[10]) || !isDigit(line[11]) ||
		len(line) > 12 && line[12] != ' ' {
		return nil, false
	}
	code := int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || code >= 600 {
		return nil, false
	}
	// The header lines: count them, and check each as textproto would accept it unchanged.
	lines := 0
	for rest := head[nl+1:]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		l := rest[:i]
		rest = rest[i+1:]
		if len(l) == 0 || l[len(l)-1] != '\r' || !plainHeaderLine(l[:len(l)-1]) {
			return nil, false // a bare LF, obs-fold or a malformed line: ReadResponse decides
		}
		lines++
	}
	// One string holds the status and every value; one array every value slice.
	text := string(head)
	status := text[9 : nl-1]
	h := make(http.Header, lines)
	vals := make([]string, lines)
	length := int64(-1)
	closeConn := false
	for pos, i := nl+1, 0; pos < len(text); i++ {
		e := pos + strings.IndexByte(text[pos:], '\n')
		l := text[pos : e-1]
		pos = e + 1
		colon := strings.IndexByte(l, ':')
		k, v := canonicalKey(l[:colon]), strings.Trim(l[colon+1:], " \t")
		switch k {
		case "Content-Length":
			if length >= 0 {
				return nil, false
			}
			n, ok := parseLength(v)
			if !ok {
				return nil, false
			}
			length = n
		case "Transfer-Encoding", "Trailer":
			return nil, false
		case "Connection":
			closeConn = closeConn || httpguts.HeaderValuesContainsToken([]string{v}, "close")
		}
		vals[i] = v
		if vv, ok := h[k]; ok {
			h[k] = append(vv, v)
		} else {
			h[k] = vals[i : i+1 : i+1]
		}
	}
	if length < 0 {
		return nil, false // chunked or until the end: ReadResponse frames it
	}
	if closeConn {
		delete(h, "Connection") // as ReadResponse: Close says it
	}
	if _, err := br.Discard(end + 4); err != nil {
		return nil, false
	}
	res := &http.Response{
		Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: length, Close: closeConn, Request: req, Body: http.NoBody,
	}
	if length > 0 {
		res.Body = &lengthBody{br: br, n: length}
	}
	return res, true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// plainHeaderLine reports whether l is "name: value" with a token name (no space before the
// colon) and a value of visible characters, spaces and tabs: a line textproto reads as is.
func plainHeaderLine(l []byte) bool {
	colon := bytes.IndexByte(l, ':')
	if colon <= 0 {
		return false
	}
	for _, b := range l[:colon] {
		if !httpguts.IsTokenRune(rune(b)) {
			return false
		}
	}
	for _, b := range l[colon+1:] {
		if b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}

// canonicalKey is k as textproto canonicalizes it, without an allocation for a common name or
// one already canonical.
func canonicalKey(k string) string {
	for _, c := range commonKeys {
		if len(c) == len(k) && strings.EqualFold(c, k) {
			return c
		}
	}
	upper := true
	for i := 0; i < len(k); i++ {
		b := k[i]
		if upper && 'a' <= b && b <= 'z' || !upper && 'A' <= b && b <= 'Z' {
			return http.CanonicalHeaderKey(k)
		}
		upper = b == '-'
	}
	return k
}

// parseLength parses a Content-Length value as net/http accepts it: digits only, no sign, at
// most 19 of them and within int64.
func parseLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

// lengthBody is a body of a known length, read as net/http reads one: an end before the
// length is io.ErrUnexpectedEOF, and the read that reaches the length also returns io.EOF.
type lengthBody struct {
	br *bufio.Reader
	n  int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }
