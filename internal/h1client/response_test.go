package h1client

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzReadResponse: readResponse makes of any bytes what http.ReadResponse makes of them: the
// same failure, or the same response head, body and what follows it; whether the head is in
// the buffer whole (the fast path) or arrives a byte at a time (ReadResponse's).
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ndate: Mon, 30 Nov 2026 00:00:00 GMT\r\nserver: uvicorn\r\nx-a: 1\r\nX-A: 2\r\n\r\nhello next",
		"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 4\r\n\r\nbusy",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 01\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
		"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nBad Key: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nX:\x01\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length:  7 \r\n\r\n1234567",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\ntransfer-encoding: Chunked\r\n\r\n6\r\ndata: \r\n0\r\n\r\nnext",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-T: 1\r\nX-T: 2\r\n\r\nrest",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX-T: 1",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\nbad line\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nx",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nx\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n1\r\nx\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chun\u212aed\r\n\r\n0\r\n\r\n", // a Kelvin sign: not ASCII "k"
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 1\r\n\r\nx",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"), true)
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		req, _ := http.NewRequest(http.MethodPost, "http://up/v1", nil)
		if head {
			req.Method = http.MethodHead
		}
		want := readAll(http.ReadResponse, bufio.NewReaderSize(bytes.NewReader(raw), 4096), req)
		for name, r := range map[string]io.Reader{"buffered": bytes.NewReader(raw), "a byte at a time": iotest.OneByteReader(bytes.NewReader(raw))} {
			got := readAll(readResponse, bufio.NewReaderSize(r, 4096), req)
			if !assert.Equal(t, want, got, name) {
				t.Logf("response %q", raw)
			}
		}
	})
}

// read is what a response reader made of the bytes, in comparable form.
type read struct {
	Err                         string
	Status                      string
	StatusCode                  int
	Proto                       string
	ProtoMajor, ProtoMinor      int
	Header, Trailer             http.Header
	ContentLength               int64
	TransferEncoding            []string
	Close, NoBody               bool
	Body, BodyErr, Rest, RestEr string
}

func readAll(parse func(*bufio.Reader, *http.Request) (*http.Response, error), br *bufio.Reader, req *http.Request) read {
	res, err := parse(br, req)
	if err != nil {
		return read{Err: err.Error()}
	}
	body, berr := io.ReadAll(res.Body)
	r := read{
		Status: res.Status, StatusCode: res.StatusCode, Proto: res.Proto, ProtoMajor: res.ProtoMajor, ProtoMinor: res.ProtoMinor,
		Header: res.Header, Trailer: res.Trailer, ContentLength: res.ContentLength, TransferEncoding: res.TransferEncoding,
		Close: res.Close, NoBody: res.Body == http.NoBody, Body: string(body),
	}
	if berr != nil {
		r.BodyErr = berr.Error()
	}
	rest, rerr := io.ReadAll(br)
	r.Rest = string(rest)
	if rerr != nil {
		r.RestEr = rerr.Error()
	}
	return r
}

// TestReadResponseAllocs: the common answer's head costs a handful of allocations (http.ReadResponse
// makes 11 of this one).
func TestReadResponseAllocs(t *testing.T) {
	raw := []byte("HTTP/1.1 200 OK\r\ndate: Mon, 30 Nov 2026 00:00:00 GMT\r\nserver: uvicorn\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}")
	req, _ := http.NewRequest(http.MethodPost, "http://up/v1", nil)
	src := bytes.NewReader(raw)
	br := bufio.NewReaderSize(src, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(raw)
		br.Reset(src)
		res, err := readResponse(br, req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
	})
	assert.LessOrEqual(t, allocs, 6.0)
}

func BenchmarkReadResponse(b *testing.B) {
	// A vLLM answer (uvicorn's head), whole and streamed (its first event and the rest to come).
	var stream strings.Builder
	stream.WriteString("HTTP/1.1 200 OK\r\ndate: Mon, 30 Nov 2026 00:00:00 GMT\r\nserver: uvicorn\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n")
	for i := range 3 {
		event := fmt.Sprintf("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
		fmt.Fprintf(&stream, "%x\r\n%s\r\n", len(event), event)
	}
	stream.WriteString("e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
	for _, answer := range []struct{ name, raw string }{
		{"whole", "HTTP/1.1 200 OK\r\ndate: Mon, 30 Nov 2026 00:00:00 GMT\r\nserver: uvicorn\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}"},
		{"stream", stream.String()},
	} {
		b.Run(answer.name, func(b *testing.B) { benchmarkReadResponse(b, []byte(answer.raw)) })
	}
}

func benchmarkReadResponse(b *testing.B, raw []byte) {
	req, _ := http.NewRequest(http.MethodPost, "http://up/v1", nil)
	for _, arm := range []struct {
		name  string
		parse func(*bufio.Reader, *http.Request) (*http.Response, error)
	}{{"net/http", http.ReadResponse}, {"h1client", readResponse}} {
		b.Run(arm.name, func(b *testing.B) {
			src := bytes.NewReader(raw)
			br := bufio.NewReaderSize(src, 4096)
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(raw)
				br.Reset(src)
				res, err := arm.parse(br, req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
			}
		})
	}
}
