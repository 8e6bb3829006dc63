package openai

import (
	"context"
	"github.com/infergate/infergate/adapters/pipeline"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/guard/breaker"
	"github.com/infergate/infergate/adapters/upstream"
	"github.com/stretchr/testify/require"
)

// writeCounter counts the writes on a connection.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestRequestOneWrite: a request goes upstream in one write, head and body together (a body
// net/http does not know to be in memory makes it flush the head first: a second syscall, and a
// second packet, per request).
func TestRequestOneWrite(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	p, err := New(Options{Endpoints: []upstream.Endpoint{{Name: "a", URL: up.URL, Type: upstream.TypeVLLM, CheckInterval: time.Hour}}})
	require.NoError(t, err)
	e := p.endpoints()[0]
	var writes atomic.Int64
	counting := func(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return writeCounter{c, &writes}, nil
		}
	}
	e.tr.DialContext = counting(e.tr.DialContext)
	if h1, ok := e.rt.(*h1Transport); ok {
		h1.dial = counting(h1.dial)
	}
	defer e.rt.CloseIdleConnections()
	rt := &route{ep: e, public: "m", upstream: "m",
		inflight: p.m.inflight.WithLabelValues("m", "a"), latency: p.m.latency.WithLabelValues("m", "a"),
		ttft: p.m.ttft.WithLabelValues("m", "a"), itl: p.m.itl.WithLabelValues("m", "a")}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for i := range 3 {
		req, err := pipeline.NewRequest("/v1/chat/completions", body)
		require.NoError(t, err)
		req.Header, req.RemoteAddr, req.ID, req.Start = http.Header{}, "127.0.0.1:1", "r", time.Now()
		x, err := p.attempt(context.Background(), rt, req, breaker.Ticket{}, true)
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, x)
		require.NoError(t, err)
		x.Finish(nil)
		require.Equal(t, http.StatusOK, x.res.StatusCode)
		require.EqualValues(t, i+1, writes.Load(), "writes after %d requests", i+1)
	}
}
