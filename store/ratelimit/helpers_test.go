package ratelimit

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/stretchr/testify/require"
)

// wait bounds every wait for something to happen; it normally happens within milliseconds.
const wait = 5 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeClock is an injectable clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newRedis(t testing.TB, srv *redistest.Server, opts RedisOptions) *Redis {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	// A generous timeout: the machine running the tests may be busy, and these tests are not
	// about Redis failing.
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Second
	}
	r, err := NewRedis(srv.NewClient(t), opts)
	require.NoError(t, err)
	return r
}

// slow refills so slowly (one token per ~3 hours) that no test sees it happen: amounts are
// exact to 1e-3 of a token even on a real clock.
const slow = 1e-4
