package h1server

import (
	"bufio"
	"bytes"
	"net/http"
	"net/url"

	"golang.org/x/net/http/httpguts"

	"github.com/infergate/infergate/internal/httphead"
)

// readRequest reads a request head from br as http.ReadRequest does. The common request (an
// HTTP/1.1 head whole in br's buffer, a plain path, a body framed by Content-Length or none, one
// Host) is parsed by httphead; anything else goes to http.ReadRequest, nothing having been
// consumed. FuzzReadRequest holds the two to the same request, and FuzzServer the server to
// net/http's. fieldsChecked reports a head httphead parsed, whose header lines it checked as
// check would (a token name, a value without control characters but tab).
func readRequest(br *bufio.Reader) (req *http.Request, fieldsChecked bool, err error) {
	if req, ok := fastRequest(br); ok {
		return req, true, nil
	}
	req, err = http.ReadRequest(br)
	return req, false, err
}

func fastRequest(br *bufio.Reader) (*http.Request, bool) {
	// The request line: a token, a space, a plain absolute path (and query), " HTTP/1.1".
	buf, line, end, ok := httphead.Buffered(br)
	if !ok {
		return nil, false
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || len(line) < sp+11 || string(line[len(line)-9:]) != " HTTP/1.1" {
		return nil, false
	}
	for _, b := range line[:sp] {
		if !httpguts.IsTokenRune(rune(b)) {
			return nil, false
		}
	}
	target := line[sp+1 : len(line)-9]
	q := bytes.IndexByte(target, '?')
	path := target
	if q >= 0 {
		path = target[:q]
		if q == len(target)-1 || !plainBytes(target[q+1:], queryByte) {
			return nil, false
		}
	}
	if len(path) == 0 || path[0] != '/' || !plainBytes(path, pathByte) {
		return nil, false
	}
	text, f, ok := httphead.Head(buf, len(line), end)
	if !ok || f.Chunked {
		return nil, false // a chunked request body is net/http's to read
	}
	hosts := f.Header["Host"]
	if len(hosts) != 1 || hosts[0] == "" {
		return nil, false
	}
	if _, ok := f.Header["Pragma"]; ok {
		return nil, false // ReadRequest may add a Cache-Control
	}
	delete(f.Header, "Host") // as ReadRequest
	if _, err := br.Discard(end); err != nil {
		return nil, false
	}
	uri := text[sp+1 : len(line)-9]
	// The request, its URL and its body's reader in one allocation.
	p := new(struct {
		req  http.Request
		url  url.URL
		body httphead.LengthBody
	})
	u := &p.url
	u.Path = uri
	if q >= 0 {
		u.Path, u.RawQuery = uri[:q], uri[q+1:]
	}
	req := &p.req
	*req = http.Request{
		Method: text[:sp], URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: f.Header, Body: http.NoBody, Close: f.Close, Host: hosts[0], RequestURI: uri,
	}
	if f.Length > 0 {
		req.ContentLength = f.Length
		p.body = httphead.LengthBody{R: br, N: f.Length}
		req.Body = &p.body
	}
	return req, true
}

// pathByte and queryByte are the bytes a path or a query may hold here: those url.ParseRequestURI
// keeps as they are (a path with others gets a RawPath; '%' is decoded).
func pathByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '.' || b == '_' || b == '~' || b == '/'
}

func queryByte(b byte) bool {
	return pathByte(b) || b == '=' || b == '&' || b == '%' || b == '+' || b == ',' || b == ':' || b == '@'
}

func plainBytes(b []byte, ok func(byte) bool) bool {
	for _, c := range b {
		if !ok(c) {
			return false
		}
	}
	return true
}
