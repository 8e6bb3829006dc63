package openaipool

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/h1client"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
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
// second packet, per request), through either upstream client.
func TestRequestOneWrite(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	for _, client := range []string{"fast", "std"} {
		t.Run(client, func(t *testing.T) {
			p, err := New(Options{UpstreamClient: client, Endpoints: []upstream.Endpoint{{Name: "a", URL: up.URL, Type: upstream.TypeVLLM, CheckInterval: time.Hour}}})
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
			e.tr.DialContext = counting(e.tr.DialContext) // h1client dials through it too
			defer e.rt.CloseIdleConnections()
			rt := &route{ep: e, public: "m", upstream: "m",
				inflight: p.m.inflight.WithLabelValues("m", "a"), latency: p.m.latency.WithLabelValues("m", "a"),
				ttft: p.m.ttft.WithLabelValues("m", "a"), itl: p.m.itl.WithLabelValues("m", "a"), stats: p.models.of("m")}
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
		})
	}
}

// TestUpstreamClient: UpstreamClient picks what requests to http:// upstreams go through (fast by
// default: h1client where it is supported), https:// upstreams always use net/http, and any
// other value is refused.
func TestUpstreamClient(t *testing.T) {
	eps := []upstream.Endpoint{{Name: "a", URL: "http://127.0.0.1:1", Type: upstream.TypeVLLM}, {Name: "b", URL: "https://127.0.0.1:2", Type: upstream.TypeVLLM}}
	for client, wantFast := range map[string]bool{"": h1client.Supported, "fast": h1client.Supported, "std": false} {
		p, err := New(Options{UpstreamClient: client, Endpoints: eps})
		require.NoError(t, err, client)
		_, fast := p.endpoints()[0].rt.(fastTransport)
		assert.Equal(t, wantFast, fast, "%q: http:// upstream on h1client", client)
		assert.IsType(t, transport{}, p.endpoints()[1].rt, "%q: https:// upstream", client)
	}
	_, err := New(Options{UpstreamClient: "h2", Endpoints: eps})
	assert.ErrorContains(t, err, `UpstreamClient "h2" is not one of fast, std`)
}
