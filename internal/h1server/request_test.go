package h1server

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
)

// FuzzReadRequest: readRequest makes of any bytes what http.ReadRequest makes of them: the same
// failure, or the same request, body and what follows it; whether the head is in the buffer
// whole (the fast path) or arrives a byte at a time (ReadRequest's).
func FuzzReadRequest(f *testing.F) {
	for _, s := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"GET /v1/models?x=1&y=%41 HTTP/1.1\r\nhost: gw\r\nuser-agent: curl\r\naccept: */*\r\n\r\nGET / HTTP/1.1\r\n",
		"GET /a!b HTTP/1.1\r\nHost: gw\r\n\r\n",
		"GET /x? HTTP/1.1\r\nHost: gw\r\n\r\n",
		"GET //x/y HTTP/1.1\r\nHost: gw\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: gw\r\nHost: other\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: \r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: gw\r\nPragma: no-cache\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 5\r\nConnection: close\r\n\r\nab",
		"POST /x HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"G@T /x HTTP/1.1\r\nHost: gw\r\n\r\n",
		"GET http://gw/x HTTP/1.1\r\nHost: gw\r\n\r\n",
		"GET /x HTTP/1.0\r\nHost: gw\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: gw\r\nX: a\r\n b\r\n\r\n",
		"GET /x HTTP/1.1\nHost: gw\n\n",
		"GET  /x HTTP/1.1\r\nHost: gw\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: gw\r\nX-Custom-thing:  v \r\nx-custom-thing: w\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: gw\r\nX: a\x01b\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: gw\r\nX\x7f: a\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want := readAll(bufio.NewReaderSize(bytes.NewReader(raw), 4096), http.ReadRequest)
		// What check skips for a head whose fields readRequest says it checked must hold.
		read := func(br *bufio.Reader) (*http.Request, error) {
			req, fieldsChecked, err := readRequest(br)
			if fieldsChecked {
				if ferr := checkFields(req.Header); ferr != nil {
					t.Errorf("fields said checked, but %v: %q", ferr, raw)
				}
			}
			return req, err
		}
		for name, r := range map[string]io.Reader{"buffered": bytes.NewReader(raw), "a byte at a time": iotest.OneByteReader(bytes.NewReader(raw))} {
			got := readAll(bufio.NewReaderSize(r, 4096), read)
			if !assert.Equal(t, want, got, name) {
				t.Logf("request %q", raw)
			}
		}
	})
}

// read is what a request reader made of the bytes, in comparable form.
type read struct {
	Err                                  string
	Method, URL, Path, RawPath, RawQuery string
	ForceQuery                           bool
	Proto                                string
	ProtoMajor, ProtoMinor               int
	Header, Trailer                      http.Header
	ContentLength                        int64
	TransferEncoding                     []string
	Close, NoBody                        bool
	Host, RequestURI                     string
	Body, BodyErr, Rest, RestErr         string
}

func readAll(br *bufio.Reader, parse func(*bufio.Reader) (*http.Request, error)) read {
	req, err := parse(br)
	if err != nil {
		return read{Err: err.Error()}
	}
	body, berr := io.ReadAll(req.Body)
	r := read{
		Method: req.Method, URL: req.URL.String(), Path: req.URL.Path, RawPath: req.URL.RawPath, RawQuery: req.URL.RawQuery,
		ForceQuery: req.URL.ForceQuery, Proto: req.Proto, ProtoMajor: req.ProtoMajor, ProtoMinor: req.ProtoMinor,
		Header: req.Header, Trailer: req.Trailer, ContentLength: req.ContentLength, TransferEncoding: req.TransferEncoding,
		Close: req.Close, NoBody: req.Body == http.NoBody, Host: req.Host, RequestURI: req.RequestURI, Body: string(body),
	}
	if berr != nil {
		r.BodyErr = berr.Error()
	}
	rest, rerr := io.ReadAll(br)
	r.Rest = string(rest)
	if rerr != nil {
		r.RestErr = rerr.Error()
	}
	return r
}

func BenchmarkReadRequest(b *testing.B) {
	raw := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: OpenAI/Python 1.99.0\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: 2\r\n\r\n{}")
	for _, arm := range []struct {
		name  string
		parse func(*bufio.Reader) (*http.Request, error)
	}{{"net/http", http.ReadRequest}, {"h1server", func(br *bufio.Reader) (*http.Request, error) {
		req, _, err := readRequest(br)
		return req, err
	}}} {
		b.Run(arm.name, func(b *testing.B) {
			src := bytes.NewReader(raw)
			br := bufio.NewReaderSize(src, 4096)
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(raw)
				br.Reset(src)
				req, err := arm.parse(br)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, req.Body)
			}
		})
	}
}
