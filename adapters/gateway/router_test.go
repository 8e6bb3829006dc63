package gateway

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// clientBytes builds what an HTTP/2 client sends: preface, SETTINGS, optionally the ACK of the
// server's SETTINGS, then a HEADERS frame with the given content-type.
func clientBytes(t testing.TB, contentType string, ack bool) []byte {
	var buf bytes.Buffer
	buf.WriteString(clientPreface)
	fr := http2.NewFramer(&buf, nil)
	require.NoError(t, fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}))
	require.NoError(t, fr.WriteWindowUpdate(0, 1<<20))
	if ack {
		require.NoError(t, fr.WriteSettingsAck())
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/x"}, {Name: "content-type", Value: contentType}} {
		require.NoError(t, enc.WriteField(f))
	}
	block := hb.Bytes()
	// Split the block over HEADERS + CONTINUATION to exercise reassembly.
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:3], EndHeaders: false, PadLength: 2}))
	require.NoError(t, fr.WriteContinuation(1, true, block[3:]))
	require.NoError(t, fr.WriteData(1, true, []byte("body")))
	return buf.Bytes()
}

// sniffBytes runs sniff on a connection whose client sends in, and returns the decision and
// what the chosen server would read.
func sniffBytes(t testing.TB, in []byte) (grpc bool, replay []byte, err error) {
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	go func() {
		go io.Copy(io.Discard, client) // the router's SETTINGS
		client.Write(in)
		client.Close()
	}()
	grpc, conn, err := sniff(server, 2*time.Second)
	if err != nil {
		return false, nil, err
	}
	replay, _ = io.ReadAll(conn)
	return grpc, replay, nil
}

func TestSniffRoutesByFirstContentType(t *testing.T) {
	for _, tc := range []struct {
		contentType string
		grpc        bool
	}{
		{"application/grpc", true},
		{"application/grpc+proto", true},
		{"application/grpc-web", false},
		{"application/grpc-web+proto", false},
		{"application/proto", false},
		{"application/json", false},
		{"", false},
	} {
		for _, ack := range []bool{true, false} {
			in := clientBytes(t, tc.contentType, ack)
			if !ack {
				// A client that reads the server's SETTINGS only after sending its request ACKs late.
				in = append(in, 0, 0, 0, frameSettings, flagAck, 0, 0, 0, 0)
			}
			grpc, replay, err := sniffBytes(t, in)
			require.NoError(t, err, tc.contentType)
			assert.Equal(t, tc.grpc, grpc, tc.contentType)
			want := clientBytes(t, tc.contentType, false)
			assert.Equal(t, want, replay, "the server sees the client's bytes minus the router's ACK")
		}
	}
}

func TestSniffHTTP1Replayed(t *testing.T) {
	in := []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	grpc, replay, err := sniffBytes(t, in)
	require.NoError(t, err)
	assert.False(t, grpc)
	assert.Equal(t, in, replay)
	short := []byte("GET")
	_, replay, err = sniffBytes(t, short)
	require.NoError(t, err, "a short HTTP/1 request still reaches net/http, which answers it")
	assert.Equal(t, short, replay)
}

func TestSniffRejectsOversizedFrames(t *testing.T) {
	in := []byte(clientPreface)
	hdr := make([]byte, 9)
	hdr[0], hdr[1], hdr[2] = 0xff, 0xff, 0xff // 16 MiB claimed
	hdr[3] = frameHeaders
	binary.BigEndian.PutUint32(hdr[5:], 1)
	_, _, err := sniffBytes(t, append(in, hdr...))
	require.ErrorContains(t, err, "oversized frame before the first request", "refused before allocating or reading it")
}

func TestSniffTimesOutSilentClients(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	go io.Copy(io.Discard, client)
	go client.Write([]byte(clientPreface))
	_, _, err := sniff(server, 50*time.Millisecond)
	require.Error(t, err)
}

func TestHeaderFragment(t *testing.T) {
	p := []byte{2, 0, 0, 0, 1, 7, 'a', 'b', 'c', 0, 0} // pad 2, priority 5 bytes, "abc", padding
	frag, ok := headerFragment(p, flagPadded|flagPriority)
	require.True(t, ok)
	assert.Equal(t, []byte("abc"), frag)
	_, ok = headerFragment([]byte{9, 'a'}, flagPadded)
	assert.False(t, ok, "padding longer than the payload")
	_, ok = headerFragment([]byte{1, 2}, flagPriority)
	assert.False(t, ok)
}

func FuzzSniff(f *testing.F) {
	f.Add(clientBytes(f, "application/grpc", true))
	f.Add(clientBytes(f, "application/json", false))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte(clientPreface))
	f.Add(append([]byte(clientPreface), 0, 0, 5, frameHeaders, flagPadded|flagEndHeaders, 0, 0, 0, 1, 200, 1, 2, 3, 4))
	f.Fuzz(func(t *testing.T, in []byte) {
		grpc, replay, err := sniffBytes(t, in)
		if err != nil {
			return
		}
		if grpc && len(replay) > len(in) {
			t.Fatalf("replayed %d bytes from %d", len(replay), len(in))
		}
	})
}

// flakyListener fails its first Accept with a temporary error, as accept(2) does on EMFILE.
type flakyListener struct {
	net.Listener
	failed bool
}

type temporaryError struct{}

func (temporaryError) Error() string   { return "accept: too many open files" }
func (temporaryError) Temporary() bool { return true }
func (temporaryError) Timeout() bool   { return false }

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, temporaryError{}
	}
	return l.Listener.Accept()
}

func TestRouterSurvivesTemporaryAcceptErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := newRouter(&flakyListener{Listener: ln}, time.Minute)
	served := make(chan error, 1)
	go func() { served <- r.serve() }()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	require.NoError(t, err)
	got, err := r.http.Accept()
	require.NoError(t, err, "the connection after the failed accept is still served")
	got.Close()
	r.close()
	require.ErrorIs(t, <-served, net.ErrClosed)
}

func TestSniffShortHTTP1RequestIsNotKeptWaiting(t *testing.T) {
	server, client := net.Pipe()
	defer server.Close()
	defer client.Close()
	go client.Write([]byte("GET / HTTP/1.0\r\n\r\n")) // 18 bytes, shorter than the HTTP/2 preface; client stays open
	grpc, conn, err := sniff(server, time.Minute)
	require.NoError(t, err, "decided on the first differing byte, long before the deadline")
	assert.False(t, grpc)
	buf := make([]byte, 18)
	_, err = io.ReadFull(conn, buf)
	require.NoError(t, err)
	assert.Equal(t, "GET / HTTP/1.0\r\n\r\n", string(buf))
}
