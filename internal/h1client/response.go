package h1client

import (
	"bufio"
	"net/http"

	"github.com/infergate/infergate/internal/httphead"
)

// readResponse reads a response head from br as http.ReadResponse does. The common answer (an
// HTTP/1.1 head with a Content-Length or chunked, whole in br's buffer) is parsed by httphead;
// anything else (a head that has not arrived whole, close-delimited bodies, 1xx, 204 and 304,
// HEAD, obs-folded or odd lines, a Trailer or Pragma header, duplicate or conflicting framing
// headers) goes to http.ReadResponse, nothing having been consumed. http.ReadResponse was a
// tenth of the gateway's CPU per proxied request; what is parsed here is what it would parse
// (FuzzReadResponse holds the two to the same answer).
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	return readAnswer(br, req, new(answer))
}

// answer is what an exchange allocates for its response, in one allocation: the response and
// its body's reader when fastResponse parses it, and the body the caller reads.
type answer struct {
	res     http.Response
	length  httphead.LengthBody
	chunked httphead.ChunkedBody
	te      [1]string
	body    body
}

// readAnswer is readResponse with a's response and reader for the common answer's.
func readAnswer(br *bufio.Reader, req *http.Request, a *answer) (*http.Response, error) {
	if res, ok := fastResponse(br, req, a); ok {
		return res, nil
	}
	return http.ReadResponse(br, req)
}

func fastResponse(br *bufio.Reader, req *http.Request, a *answer) (*http.Response, bool) {
	if req != nil && req.Method == http.MethodHead {
		return nil, false
	}
	// The status line: "HTTP/1.1 " three digits, then the end or a space and the reason.
	buf, line, end, ok := httphead.Buffered(br)
	if !ok {
		return nil, false
	}
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || !isDigit(line[9]) || !isDigit(line[10]) || !isDigit(line[11]) ||
		len(line) > 12 && line[12] != ' ' {
		return nil, false
	}
	code := int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || code >= 600 {
		return nil, false
	}
	text, f, ok := httphead.Head(buf, len(line), end)
	if !ok || f.Length < 0 && !f.Chunked {
		return nil, false // an odd line or a body until the end: ReadResponse decides
	}
	if _, ok := f.Header["Pragma"]; ok {
		return nil, false // ReadResponse may add a Cache-Control
	}
	if f.Close {
		delete(f.Header, "Connection") // as ReadResponse: Close says it
	}
	if _, err := br.Discard(end); err != nil {
		return nil, false
	}
	res := &a.res
	*res = http.Response{
		Status: text[9:len(line)], StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: f.Header, ContentLength: f.Length, Close: f.Close, Request: req, Body: http.NoBody,
	}
	switch {
	case f.Chunked:
		a.te[0] = "chunked"
		res.TransferEncoding = a.te[:]
		a.chunked = httphead.ChunkedBody{R: br, Trailer: &res.Trailer}
		res.Body = &a.chunked
	case f.Length > 0:
		a.length = httphead.LengthBody{R: br, N: f.Length}
		res.Body = &a.length
	}
	return res, true
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }
