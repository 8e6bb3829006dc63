// Package redistest runs a real redis-server on a loopback port for tests: no persistence, one per
// call, stopped when the test ends. Kill and Restart (on the same port, with an empty dataset)
// exercise failure handling.
//
// Without a redis-server binary, Start skips the test, unless INFERGATE_REQUIRE_REDIS=1 (set by
// .ci/run) makes that a failure.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/logtest"
	"github.com/redis/rueidis"
)

// RequireEnv, set to 1, makes a missing redis-server a test failure instead of a skip.
const RequireEnv = "INFERGATE_REQUIRE_REDIS"

// Server is a running redis-server.
type Server struct {
	// Addr is 127.0.0.1:port; it stays the same across Restart.
	Addr string

	tb   testing.TB
	bin  string
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a redis-server on a free loopback port and waits until it answers PING. It is
// stopped when tb ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		msg := "redis-server not found; install it (apt-get install redis-server) or put it on PATH; " +
			RequireEnv + "=1 makes this a failure instead of a skip"
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	s := &Server{tb: tb, bin: bin}
	tb.Cleanup(s.Kill)
	// A port found free can be taken before redis-server binds it: try a few.
	var lastErr error
	for range 5 {
		if s.port, err = freePort(); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	tb.Fatalf("redistest: %v", lastErr)
	return nil
}

// Kill stops the server at once (SIGKILL), as a crash would, and waits for it to exit. Clients
// see their connections reset.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server if it runs and starts a new one on the same port, with an empty
// dataset (nothing is persisted). Call it from the test's goroutine: it fails the test when the
// server does not come back.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	var err error
	// The old listener's port is free once the process is gone; retry briefly in case the
	// kernel is slow to release it.
	for range 20 {
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: restart on %s: %v", s.Addr, err)
}

// NewClient returns a rueidis client of the server, closed when the test ends.
func (s *Server) NewClient(tb testing.TB) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true})
	if err != nil {
		tb.Fatalf("redistest: client of %s: %v", s.Addr, err)
	}
	tb.Cleanup(c.Close)
	return c
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &logtest.Sink{} // the server's output, for the error if it does not start
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if ping(ctx, s.Addr) == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, strings.TrimSpace(out.String()))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer PING in time: %s", s.port, strings.TrimSpace(out.String()))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// ping sends an inline PING and expects +PONG.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return errors.New("unexpected PING reply " + strconv.Quote(line))
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
