// Package gatewaytest starts a real infergate gateway on a loopback port for tests and benchmarks.
package gatewaytest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/gateway"
)

// Server is a running gateway.
type Server struct {
	// Addr is host:port, for gRPC clients; URL is http://host:port, for Connect and HTTP clients.
	Addr, URL string
	Registry  *engines.Registry
	Gateway   *gateway.Gateway
	done      chan error
}

// Start serves the built-in models (plus extra) on 127.0.0.1 and stops the server when tb ends.
func Start(tb testing.TB, cfg gateway.Config, extra ...engines.Model) *Server {
	tb.Helper()
	reg := engines.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		tb.Fatal(err)
	}
	for _, m := range extra {
		if _, err := reg.Register(m); err != nil {
			tb.Fatal(err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: ln.Addr().String(), URL: "http://" + ln.Addr().String(), Registry: reg,
		Gateway: gateway.New(reg, cfg), done: make(chan error, 1)}
	go func() { s.done <- s.Gateway.Serve(ln) }()
	tb.Cleanup(func() { _ = s.Stop(5 * time.Second) })
	return s
}

// Stop drains the gateway, waiting at most timeout, and returns what Serve returned.
func (s *Server) Stop(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := s.Gateway.Shutdown(ctx)
	if serveErr := <-s.done; serveErr != nil && serveErr != http.ErrServerClosed {
		return serveErr
	}
	s.done <- http.ErrServerClosed // Stop may be called again by Cleanup
	return err
}

// H2CClient returns an HTTP client that speaks cleartext HTTP/2, as Connect's gRPC protocol needs.
func H2CClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}
