// Package httphead parses the common HTTP/1.1 message head, the one a proxy meets on nearly every
// request and answer, for internal/h1server and internal/h1client: header lines that are plain
// "Name: value" with a CRLF each, a body framed by one Content-Length, by one "Transfer-Encoding:
// chunked" (a stream's answer; h1server leaves chunked requests to net/http) or by neither. Its
// callers give every other head (obs-fold, bare LF, other transfer codings, both framings, odd
// lines, a head not yet whole in the buffer) to net/http's parser, with nothing consumed, so what
// is accepted and how it reads is net/http's; each caller has a fuzz target that holds the two
// parsers to the same result. A chunked body is read by net/http's own chunk reader
// (httputil.NewChunkedReader); only its end (the trailer) is handled here, as net/http does.
//
// Why it is written here: http.ReadRequest and http.ReadResponse, with textproto under them,
// were about a sixth of the gateway's CPU per proxied request and a third of its allocations
// (BenchmarkHotPath's profiles). They read line by line through textproto and allocate a string
// per line and per value; this makes one string of the whole head and slices every value out of
// it, and names common header fields without an allocation. No library parses into net/http's
// types (fasthttp has its own).
package httphead

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// End returns the length of the head at the start of buf, its final blank line included, or -1
// when buf does not hold a whole head ending in CRLF CRLF.
func End(buf []byte) int {
	i := bytes.Index(buf, []byte("\r\n\r\n"))
	if i < 0 {
		return -1
	}
	return i + 4
}

// Buffered returns the head at the start of br's buffer when it is there whole (reading once
// when the buffer is empty, never more): buf is the buffer from the head's start, line the head's
// first line without its CRLF, end the head's length with its final blank line. A first line
// that does not end in CRLF is not ok.
func Buffered(br *bufio.Reader) (buf, line []byte, end int, ok bool) {
	if _, err := br.Peek(1); err != nil {
		return nil, nil, 0, false
	}
	buf, _ = br.Peek(br.Buffered())
	if end = End(buf); end < 0 {
		return nil, nil, 0, false
	}
	nl := bytes.IndexByte(buf, '\n')
	if nl < 1 || buf[nl-1] != '\r' {
		return nil, nil, 0, false
	}
	return buf, buf[:nl-1], end, true
}

// Head reads the header lines of the head Buffered found (buf, the length of its first line,
// end): when every one is plain (see lines), it returns the head but its final CRLF as one
// string, which the first line's pieces and every value are sliced from, and what the lines
// say (see parse). Not ok is for net/http's parser.
func Head(buf []byte, line, end int) (text string, f Fields, ok bool) {
	n, ok := lines(buf[line+2 : end-2])
	if !ok {
		return "", Fields{}, false
	}
	text = string(buf[:end-2])
	f, ok = parse(text[line+2:], n)
	return text, f, ok
}

// lines counts the header lines in b (each ending in CRLF) and reports whether every one is a
// plain "name: value" line textproto reads as it is: a token name, no space before the colon,
// a value of visible characters, spaces and tabs.
func lines(b []byte) (int, bool) {
	n := 0
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 1 || b[i-1] != '\r' || !plainLine(b[:i-1]) {
			return 0, false
		}
		b = b[i+1:]
		n++
	}
	return n, true
}

func plainLine(l []byte) bool {
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

// Fields is what a head's header lines say.
type Fields struct {
	Header  http.Header
	Length  int64 // the Content-Length; -1 when there is none
	Close   bool  // Connection names close
	Chunked bool  // one Transfer-Encoding line, "chunked", and no Content-Length; not in Header
}

// parse reads n header lines (checked by lines) from text. It reports false for what its
// callers leave to net/http: a Transfer-Encoding other than one "chunked" line without a
// Content-Length, Trailer, and a Content-Length that is repeated or not plain digits. The one
// Transfer-Encoding it takes is left out of Header, as net/http leaves it out.
func parse(text string, n int) (Fields, bool) {
	f := Fields{Header: make(http.Header, n), Length: -1}
	vals := make([]string, n) // every value's slice, in one array
	for pos, i := 0, 0; pos < len(text); i++ {
		e := pos + strings.IndexByte(text[pos:], '\n')
		l := text[pos : e-1]
		pos = e + 1
		colon := strings.IndexByte(l, ':')
		k, v := canonicalKey(l[:colon]), strings.Trim(l[colon+1:], " \t")
		switch k {
		case "Content-Length":
			if f.Length >= 0 {
				return f, false
			}
			length, ok := parseLength(v)
			if !ok {
				return f, false
			}
			f.Length = length
		case "Transfer-Encoding":
			// ASCII only, as net/http matches it: of the two non-ASCII letters that fold to
			// ASCII ones, K's Kelvin sign is 3 bytes and "chunked" has no s (ſ), so seven bytes
			// that fold to it are ASCII.
			if f.Chunked || len(v) != len("chunked") || !strings.EqualFold(v, "chunked") {
				return f, false
			}
			f.Chunked = true
			continue
		case "Trailer":
			return f, false
		case "Connection":
			f.Close = f.Close || httpguts.HeaderValuesContainsToken([]string{v}, "close")
		}
		vals[i] = v
		if vv, ok := f.Header[k]; ok {
			f.Header[k] = append(vv, v)
		} else {
			f.Header[k] = vals[i : i+1 : i+1]
		}
	}
	if f.Chunked && f.Length >= 0 {
		return f, false // both framings: net/http drops the length, and that is its call
	}
	return f, true
}

// commonKeys are header names clients and upstreams send, canonical: a name matching one (in
// any case) costs no allocation.
var commonKeys = []string{
	"Host", "User-Agent", "Accept", "Accept-Encoding", "Authorization", "Content-Type",
	"Content-Length", "Date", "Server", "Connection", "Keep-Alive", "Cache-Control", "Vary",
	"X-Request-Id", "Content-Encoding", "Set-Cookie", "Etag", "X-Api-Key", "Anthropic-Version",
	"Openai-Organization", "Openai-Project", "Traceparent", "Tracestate", "Expect", "Pragma",
	"Transfer-Encoding",
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

// parseLength parses a Content-Length value as net/http accepts it: digits only, no sign; longer
// than 18 digits is left to net/http.
func parseLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

// LengthBody is a body of n bytes from r, read as net/http reads one: an end before the length
// is io.ErrUnexpectedEOF, and the read that reaches the length also returns io.EOF.
type LengthBody struct {
	R *bufio.Reader
	N int64
}

func (b *LengthBody) Read(p []byte) (int, error) {
	if b.N <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.N {
		p = p[:b.N]
	}
	n, err := b.R.Read(p)
	b.N -= int64(n)
	switch {
	case b.N == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// Close does nothing: the connection's owner decides what becomes of the rest.
func (b *LengthBody) Close() error { return nil }

// ChunkedBody is a chunked body from R, read as net/http reads one: the chunks through
// httputil's reader (net/http's own), then the trailer. The common end, a bare CRLF, is
// consumed here; a trailer with fields goes to textproto, bounded as net/http bounds it (its
// end must come within R's buffer), and its fields are added to *Trailer.
type ChunkedBody struct {
	R       *bufio.Reader
	Trailer *http.Header

	chunks io.Reader
	end    error // the end, once reached: io.EOF, or what went wrong in the trailer
	failed bool  // the end was an error, already returned
}

// The errors net/http gives for a trailer it cannot read.
var (
	errTrailerEOF     = errors.New("http: unexpected EOF reading trailer")
	errTrailerTooLong = errors.New("http: suspiciously long trailer after chunked body")
)

func (b *ChunkedBody) Read(p []byte) (int, error) {
	switch {
	case b.failed:
		return 0, http.ErrBodyReadAfterClose // as net/http's body, closed by a bad trailer
	case b.end != nil:
		b.failed = b.end != io.EOF
		return 0, b.end
	}
	if b.chunks == nil {
		b.chunks = httputil.NewChunkedReader(b.R)
	}
	n, err := b.chunks.Read(p)
	if err == io.EOF {
		if err = b.readTrailer(); err == nil {
			err = io.EOF
		}
		b.end, b.failed = err, err != io.EOF
	}
	return n, err
}

// Close does nothing: the connection's owner decides what becomes of the rest.
func (b *ChunkedBody) Close() error { return nil }

func (b *ChunkedBody) readTrailer() error {
	end, err := b.R.Peek(2)
	switch {
	case len(end) == 2 && end[0] == '\r' && end[1] == '\n':
		_, err = b.R.Discard(2)
		return err
	case len(end) < 2:
		return errTrailerEOF
	case err != nil:
		return err
	case !trailerFits(b.R):
		return errTrailerTooLong
	}
	fields, err := textproto.NewReader(b.R).ReadMIMEHeader()
	if err == io.EOF {
		return errTrailerEOF
	}
	if err != nil {
		return err
	}
	if *b.Trailer == nil {
		*b.Trailer = http.Header(fields)
		return nil
	}
	for k, vv := range fields {
		(*b.Trailer)[k] = vv
	}
	return nil
}

// trailerFits reports whether a CRLF CRLF comes within the first bytes r can buffer, reading
// no further than it: net/http's bound on a trailer before it parses one.
func trailerFits(r *bufio.Reader) bool {
	for n := 4; ; n = r.Buffered() + 1 {
		buf, err := r.Peek(max(n, r.Buffered()))
		if bytes.Contains(buf, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil { // the end of the stream, or of the buffer
			return false
		}
	}
}
