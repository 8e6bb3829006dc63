package breaker

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// freezer is a TCP proxy to a Redis that can stop forwarding while keeping connections open: a
// Redis that hangs (a partition, a stalled server), where calls wait for replies that do not
// come instead of failing at once as against a killed server.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	closed bool
	conns  []net.Conn
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &freezer{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		p.closed, p.frozen = true, false
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.cond.Broadcast()
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			wg.Go(func() { p.pipe(out, in) })
			wg.Go(func() { p.pipe(in, out) })
		}
	})
	return p
}

func (p *freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.frozen && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezer) set(frozen bool) {
	p.mu.Lock()
	p.frozen = frozen
	p.cond.Broadcast()
	p.mu.Unlock()
}

func TestRedisHangingIsBoundedByTimeout(t *testing.T) {
	srv := redistest.Start(t)
	proxy := startFreezer(t, srv.Addr)
	s := contractSettings
	const timeout = 50 * time.Millisecond
	newReplica := func() *Redis {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proxy.ln.Addr().String()}, DisableCache: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		b := NewRedis(c, RedisOptions{Options: Options{Settings: s}, Timeout: timeout, RetryInterval: 50 * time.Millisecond})
		t.Cleanup(b.Close)
		return b
	}
	a, b := newReplica(), newReplica()
	ctx := context.Background()
	_, err := b.Allow(ctx, "up") // b knows the endpoint
	require.NoError(t, err)
	for range s.ConsecutiveFailures {
		tk, err := a.Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Failure)
	}
	require.Eventually(t, func() bool { return b.State("up") == Open }, 5*time.Second, time.Millisecond)
	time.Sleep(s.OpenTimeout) // the next Allow must ask Redis for a probe

	proxy.set(true)
	bound := timeout + 500*time.Millisecond
	var slowest time.Duration
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		d := time.Since(start)
		slowest = max(slowest, d)
		require.Less(t, d, bound, "%s took %v with Redis hanging", what, d)
	}
	var tk Ticket
	timed("Allow (asks Redis for a probe)", func() { tk, err = b.Allow(ctx, "up") })
	require.NoError(t, err, "the local fallback, starting from the shared state, admits a probe")
	require.True(t, tk.Probe())
	require.True(t, b.Degraded())
	timed("Done (probe)", func() { tk.Done(Success) })
	timed("Allow of a new endpoint", func() { _, err = a.Allow(ctx, "new") })
	require.NoError(t, err)
	tk, err = a.Allow(ctx, "new")
	require.NoError(t, err)
	timed("Done + Flush", func() {
		tk.Done(Failure)
		_ = a.Flush(ctx)
	})
	t.Logf("slowest call with Redis hanging: %v (timeout %v)", slowest, timeout)

	proxy.set(false)
	require.Eventually(t, func() bool { return !a.Degraded() && !b.Degraded() }, 10*time.Second, 5*time.Millisecond)
	// Shared again: the state in Redis (still open, half-open by now) decides on both.
	require.Eventually(t, func() bool {
		tk, err := a.Allow(ctx, "up")
		if err == nil && tk.Probe() {
			tk.Done(Failure)
		}
		return a.State("up") == Open && b.State("up") == Open
	}, 5*time.Second, time.Millisecond)
}
