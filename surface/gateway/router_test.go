package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
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
	grpc, _, conn, err := sniff(server, 2*time.Second, 2*time.Second, func() {})
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

// A client that has shown HTTP/2 no longer holds a pending slot while it waits to make its first
// request, so what it makes the router keep meanwhile is bounded on its own: frames of unknown
// types (or PINGs, WINDOW_UPDATEs, ...) past a few KiB end the connection, where each one could
// park 256 KiB for the idle timeout. A real client's frames before its request pass.
func TestSniffBoundsFramesBeforeTheFirstRequest(t *testing.T) {
	in := []byte(clientPreface)
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	require.NoError(t, fr.WriteSettings())
	for range 15 {
		require.NoError(t, fr.WriteRawFrame(0xfa, 0, 0, make([]byte, 16000)))
	}
	_, _, err := sniffBytes(t, append(in, buf.Bytes()...))
	require.ErrorContains(t, err, "too many frames before the first request")

	grpc, _, err := sniffBytes(t, clientBytes(t, "application/grpc", true))
	require.NoError(t, err)
	assert.True(t, grpc)
}

func TestSniffTimesOutSilentClients(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	go io.Copy(io.Discard, client)
	go client.Write([]byte(clientPreface))
	_, _, _, err := sniff(server, 50*time.Millisecond, 50*time.Millisecond, func() {})
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
	r := newRouter(&flakyListener{Listener: ln}, time.Minute, time.Minute)
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
	grpc, h1, conn, err := sniff(server, time.Minute, time.Minute, func() {})
	require.NoError(t, err, "decided on the first differing byte, long before the deadline")
	assert.False(t, grpc)
	assert.True(t, h1, "an HTTP/1 connection")
	buf := make([]byte, 18)
	_, err = io.ReadFull(conn, buf)
	require.NoError(t, err)
	assert.Equal(t, "GET / HTTP/1.0\r\n\r\n", string(buf))
}

// startRouter serves ln through a router that holds at most maxPending connections before their
// first request: net/http answers HTTP/1.1 requests with "ok", grpc-go's health service answers
// gRPC calls.
func startRouter(t *testing.T, ln net.Listener, maxPending int, firstByte, idle time.Duration) *router {
	t.Helper()
	r := newRouter(ln, firstByte, idle)
	r.maxPending = maxPending
	httpSrv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: time.Minute,
	}
	grpcSrv := grpc.NewServer()
	healthgrpc.RegisterHealthServer(grpcSrv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- r.serve() }()
	go func() { _ = httpSrv.Serve(r.http) }()
	go func() { _ = grpcSrv.Serve(r.grpc) }()
	t.Cleanup(func() {
		r.close()
		assert.ErrorIs(t, <-served, net.ErrClosed)
		httpSrv.Close()
		grpcSrv.Stop()
	})
	return r
}

// get sends an HTTP/1.1 request on c and returns the status and body of the answer.
func get(c net.Conn) (string, error) {
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return "", err
	}
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return "", err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.Status + " " + string(body), err
}

// TestRouterBurstLosesNoConnections: eight times as many clients as the router holds before
// their first request connect at once, and every one is answered, HTTP/1.1 and gRPC alike: at the
// bound the router stops accepting instead of closing what it accepted (issue 17: a burst of
// 5,000 streamed requests lost 9-13% of them to EOF).
func TestRouterBurstLosesNoConnections(t *testing.T) {
	const bound, h1Clients, grpcClients = 8, 48, 16
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	startRouter(t, ln, bound, time.Minute, time.Minute)
	addr := ln.Addr().String()
	// Every HTTP/1.1 client connects before any sends a byte: the first ones take every slot
	// while the others are still arriving.
	conns := make([]net.Conn, h1Clients)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	errs := make(chan error, h1Clients+grpcClients)
	var wg sync.WaitGroup
	for i := range grpcClients {
		wg.Go(func() {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{})
			if err == nil && res.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
				err = fmt.Errorf("status %v", res.GetStatus())
			}
			if err != nil {
				errs <- fmt.Errorf("gRPC client %d: %w", i, err)
			}
		})
	}
	for i, c := range conns {
		wg.Go(func() {
			got, err := get(c)
			if err == nil && got != "200 OK ok" {
				err = fmt.Errorf("answered %q", got)
			}
			if err != nil {
				errs <- fmt.Errorf("HTTP/1.1 client %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	var lost []string
	for err := range errs {
		lost = append(lost, err.Error())
	}
	assert.Empty(t, lost, "every connection of the burst is answered")
}

// TestRouterFirstByteTimeoutFreesPendingSlot: with room for one connection before its first
// request, a client that connects and sends nothing is closed after FirstByteTimeout (not after
// the minute of IdleTimeout), and the connection waiting behind it is then accepted and answered.
func TestRouterFirstByteTimeoutFreesPendingSlot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := startRouter(t, ln, 1, 200*time.Millisecond, time.Minute)
	silent, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer silent.Close()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.pending) == 1
	}, 10*time.Second, time.Millisecond, "the silent connection takes the slot")

	waiting, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer waiting.Close()
	type answer struct {
		got string
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		got, err := get(waiting)
		answered <- answer{got, err}
	}()

	require.NoError(t, silent.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = silent.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the router closed the silent connection, well before IdleTimeout")
	a := <-answered
	require.NoError(t, a.err, "the connection behind it was accepted, not dropped")
	assert.Equal(t, "200 OK ok", a.got)
}

// TestRouterClosesSlowloris: a client trickling its HTTP/2 preface, or the SETTINGS frame after
// it, a byte at a time is closed once FirstByteTimeout has passed since it connected, however
// steadily it keeps sending.
func TestRouterClosesSlowloris(t *testing.T) {
	var settings bytes.Buffer
	require.NoError(t, http2.NewFramer(&settings, nil).WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}))
	for name, tc := range map[string]struct{ burst, trickle []byte }{
		"preface":  {nil, append([]byte(clientPreface), settings.Bytes()...)},
		"settings": {[]byte(clientPreface), settings.Bytes()},
	} {
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			const firstByte = 300 * time.Millisecond
			startRouter(t, ln, 4, firstByte, time.Minute)
			c, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			_, err = c.Write(tc.burst)
			require.NoError(t, err)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				// Slower than FirstByteTimeout allows for the whole trickle.
				tick := time.NewTicker(firstByte / 3)
				defer tick.Stop()
				for _, b := range tc.trickle {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if _, err := c.Write([]byte{b}); err != nil {
						return
					}
				}
			}()
			require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
			_, err = io.Copy(io.Discard, c) // nil at EOF; a reset is a close too
			var ne net.Error
			require.False(t, errors.As(err, &ne) && ne.Timeout(), "the router closed the connection, well before IdleTimeout: %v", err)
		})
	}
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	accepted atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

// TestRouterKeepsIdleHTTP2ClientPastFirstByteTimeout: a gRPC client that connected ahead of its
// first call (grpc-go's Connect, a round_robin balancer reconnecting) has sent its preface and
// SETTINGS at once; it may then wait longer than FirstByteTimeout before calling, on the same
// connection.
func TestRouterKeepsIdleHTTP2ClientPastFirstByteTimeout(t *testing.T) {
	base, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := &countingListener{Listener: base}
	const firstByte = 100 * time.Millisecond
	startRouter(t, ln, 4, firstByte, time.Minute)
	conn, err := grpc.NewClient(base.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	conn.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		require.True(t, conn.WaitForStateChange(ctx, s), "never connected")
	}
	idle, cancelIdle := context.WithTimeout(ctx, 10*firstByte)
	defer cancelIdle()
	assert.False(t, conn.WaitForStateChange(idle, connectivity.Ready), "the connection stays up with no call")
	res, err := healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthgrpc.HealthCheckResponse_SERVING, res.GetStatus())
	assert.Equal(t, int32(1), ln.accepted.Load(), "the call went on the first connection")
}

// TestGatewayFirstByteTimeout: Config.FirstByteTimeout reaches the router: a connection that
// sends nothing is closed after it, not after the five minutes of the default IdleTimeout.
func TestGatewayFirstByteTimeout(t *testing.T) {
	g := New(engines.NewRegistry(), Config{FirstByteTimeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, g.Shutdown(context.Background()))
		<-served
	})
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}
