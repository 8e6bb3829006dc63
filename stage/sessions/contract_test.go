package sessions_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/sessions"
	"github.com/infergate/infergate/stage/sessions/sessionstest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// clock is a fake clock, moved only by Add.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_800_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// luaAdvance brings every key's expiry ARGV[1] ms closer, deleting those it reaches: Redis's
// clock moved on, for a test.
var luaAdvance = rueidis.NewLuaScript(`
for _, k in ipairs(redis.call('KEYS', '*')) do
	local left = redis.call('PTTL', k)
	if left > 0 then
		if left <= tonumber(ARGV[1]) then redis.call('DEL', k) else redis.call('PEXPIRE', k, left - tonumber(ARGV[1])) end
	end
end
return 1`)

func TestContract(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		sessionstest.Run(t, func(t *testing.T) sessionstest.Harness {
			clk := newClock()
			s := sessions.NewMemory(sessions.MemoryOptions{Now: clk.Now})
			return sessionstest.Harness{Store: s, Peer: s, Now: clk.Now, Advance: clk.Add}
		})
	})
	t.Run("redis", func(t *testing.T) {
		sessionstest.Run(t, func(t *testing.T) sessionstest.Harness {
			srv := redistest.Start(t)
			clk := newClock()
			// Two clients: two replicas' stores on one Redis.
			c := srv.NewClient(t)
			a := sessions.NewRedis(c, sessions.RedisOptions{Prefix: "test", Now: clk.Now})
			b := sessions.NewRedis(srv.NewClient(t), sessions.RedisOptions{Prefix: "test", Now: clk.Now})
			return sessionstest.Harness{Store: a, Peer: b, Now: clk.Now, Advance: func(d time.Duration) {
				clk.Add(d)
				ctx := context.Background()
				err := luaAdvance.Exec(ctx, c, nil, []string{strconv.FormatInt(d.Milliseconds(), 10)}).Error()
				require.NoError(t, err)
			}}
		})
	})
}
