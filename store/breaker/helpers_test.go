package breaker

import (
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
)

// testSettings are small enough for tests against Redis to run in real time.
var testSettings = Settings{
	ConsecutiveFailures: 3,
	ErrorRate:           0.5,
	MinRequests:         10,
	Window:              time.Minute,
	OpenTimeout:         300 * time.Millisecond,
	HalfOpenProbes:      2,
	SuccessesToClose:    2,
	Cooldown:            300 * time.Millisecond,
	MaxCooldown:         time.Second,
}

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newRedisBreaker is a replica: its own client of srv; closed when the test ends.
func newRedisBreaker(t testing.TB, srv *redistest.Server, opts RedisOptions) *Redis {
	if opts.Timeout == 0 {
		opts.Timeout = time.Second // generous: CI machines are slow; the Kill test sets its own
	}
	b := NewRedis(srv.NewClient(t), opts)
	t.Cleanup(b.Close)
	return b
}
