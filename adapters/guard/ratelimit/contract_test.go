package ratelimit

import (
	"context"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/stretchr/testify/assert"
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

// harness is one implementation under the contract.
type harness struct {
	// replica returns another limiter over the same buckets: the same Local, or a Redis limiter
	// with its own client (another gateway replica).
	replica func() Limiter
	// sleep lets d pass: the fake clock moves at once, or real time passes.
	sleep func(d time.Duration)
	// exact reports a clock that moves only through sleep, so amounts are exact.
	exact bool
}

// limiters runs a contract against both implementations.
func limiters(t *testing.T, contract func(t *testing.T, h harness)) {
	t.Run("local", func(t *testing.T) {
		clock := newFakeClock()
		l := NewLocal(LocalOptions{Now: clock.Now})
		contract(t, harness{replica: func() Limiter { return l }, sleep: clock.Advance, exact: true})
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		contract(t, harness{
			replica: func() Limiter { return newRedis(t, srv, RedisOptions{}) },
			sleep:   time.Sleep,
		})
	})
	// As with a Redis Cluster client: one script call per bucket, never coalesced.
	t.Run("redis-per-bucket", func(t *testing.T) {
		srv := redistest.Start(t)
		contract(t, harness{
			replica: func() Limiter {
				r := newRedis(t, srv, RedisOptions{})
				r.coalesce = false
				return r
			},
			sleep: time.Sleep,
		})
	})
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

func TestContractBurstThenDeny(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica()
		l := Limit{Rate: slow, Burst: 5}
		for i := range 5 {
			d, err := lim.Allow(ctx, "burst", l, 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "request %d of a burst of 5", i+1)
			assert.InDelta(t, float64(4-i), d.Remaining, 1e-3)
			assert.Zero(t, d.RetryAfter)
			assert.Equal(t, l, d.Limit)
		}
		d, err := lim.Allow(ctx, "burst", l, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "the 6th request of a burst of 5")
		assert.False(t, d.TooLarge)
		assert.InDelta(t, 0, d.Remaining, 1e-3)
		// One token at 1e-4/s takes 10,000 s; the full bucket 50,000 s.
		assert.InDelta(t, 10_000, d.RetryAfter.Seconds(), 10)
		assert.InDelta(t, 50_000, d.ResetAfter.Seconds(), 10)
		assert.LessOrEqual(t, d.RetryAfter, 10_000*time.Second)
	})
}

func TestContractRefill(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica()
		l := Limit{Rate: 20, Burst: 2} // one token per 50 ms
		for range 2 {
			d, err := lim.Allow(ctx, "refill", l, 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		// On a real clock a busy machine may take 50 ms between calls: go on until refused.
		var d Decision
		for range 10 {
			var err error
			d, err = lim.Allow(ctx, "refill", l, 1)
			require.NoError(t, err)
			if !d.Allowed {
				break
			}
		}
		require.False(t, d.Allowed, "a bucket refilling at 20/s is emptied by 10 calls in a row")
		assert.Greater(t, d.RetryAfter, time.Duration(0))
		assert.LessOrEqual(t, d.RetryAfter, 50*time.Millisecond)
		assert.LessOrEqual(t, d.ResetAfter, 100*time.Millisecond)
		// Waiting RetryAfter is enough.
		h.sleep(d.RetryAfter)
		d, err := lim.Allow(ctx, "refill", l, 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "allowed again after RetryAfter")

		// Idle long enough, the bucket is full again, not fuller.
		h.sleep(200 * time.Millisecond)
		d, err = lim.Allow(ctx, "refill", l, 0)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		assert.Equal(t, 2.0, d.Remaining)
		assert.Zero(t, d.ResetAfter)
		if h.exact {
			// Exactly: half of the refill time gives half a token.
			for range 2 {
				_, _ = lim.Allow(ctx, "exact", l, 1)
			}
			h.sleep(25 * time.Millisecond)
			d, err = lim.Allow(ctx, "exact", l, 1)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.InDelta(t, 0.5, d.Remaining, 1e-9)
			assert.Equal(t, 25*time.Millisecond, d.RetryAfter)
			assert.Equal(t, 75*time.Millisecond, d.ResetAfter)
		}
	})
}

func TestContractCost(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica()
		l := Limit{Rate: slow, Burst: 10}
		want := []struct {
			cost      float64
			allowed   bool
			remaining float64
		}{
			{4, true, 6}, {4, true, 2},
			{4, false, 2}, // all or nothing: 2 tokens are not spent on a request of 4
			{2, true, 0}, {0.5, false, 0},
		}
		for _, w := range want {
			d, err := lim.Allow(ctx, "cost", l, w.cost)
			require.NoError(t, err)
			assert.Equal(t, w.allowed, d.Allowed, "cost %v", w.cost)
			assert.InDelta(t, w.remaining, d.Remaining, 1e-3, "cost %v", w.cost)
			if !w.allowed {
				assert.InDelta(t, (w.cost-w.remaining)/slow, d.RetryAfter.Seconds(), 10, "cost %v", w.cost)
			}
		}
	})
}

func TestContractTooLarge(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica()
		l := Limit{Rate: slow, Burst: 10}
		for _, cost := range []float64{10.5, 1e6, math.MaxFloat64} {
			d, err := lim.Allow(ctx, "large", l, cost)
			require.NoError(t, err)
			assert.False(t, d.Allowed, "cost %v > burst", cost)
			assert.True(t, d.TooLarge, "cost %v > burst", cost)
			assert.Zero(t, d.RetryAfter, "waiting never helps a cost above the burst")
			assert.Equal(t, 10.0, d.Remaining, "a refused request spends nothing")
		}
		d, err := lim.Allow(ctx, "large", l, 10)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "a cost of exactly the burst fits a full bucket")
		assert.False(t, d.TooLarge)
		// Refused because the bucket is empty, not too large: RetryAfter says when.
		d, err = lim.Allow(ctx, "large", l, 10)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.False(t, d.TooLarge)
		assert.InDelta(t, 10/slow, d.RetryAfter.Seconds(), 10)
	})
}

func TestContractAdjust(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica()
		l := Limit{Rate: slow, Burst: 100}
		peek := func() float64 {
			t.Helper()
			d, err := lim.Allow(ctx, "adj", l, 0)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			return d.Remaining
		}
		d, err := lim.Allow(ctx, "adj", l, 60)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		require.NoError(t, lim.Adjust(ctx, "adj", l, -30)) // refund
		assert.InDelta(t, 70, peek(), 1e-3)
		require.NoError(t, lim.Adjust(ctx, "adj", l, 50)) // charge
		assert.InDelta(t, 20, peek(), 1e-3)
		require.NoError(t, lim.Adjust(ctx, "adj", l, 1e300)) // never below 0
		assert.InDelta(t, 0, peek(), 1e-3)
		d, err = lim.Allow(ctx, "adj", l, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		require.NoError(t, lim.Adjust(ctx, "adj", l, -1e300)) // never above the burst
		assert.Equal(t, 100.0, peek())
		d, err = lim.Allow(ctx, "adj", l, 100)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
		d, err = lim.Allow(ctx, "adj", l, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "a refund above the burst is not kept")

		// Adjusting a bucket never used starts from a full one.
		require.NoError(t, lim.Adjust(ctx, "adj-new", l, 40))
		d, err = lim.Allow(ctx, "adj-new", l, 0)
		require.NoError(t, err)
		assert.InDelta(t, 60, d.Remaining, 1e-3)
	})
}

func TestContractReservation(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica()
		l := Limit{Rate: slow, Burst: 1000}
		d, res, err := ReserveTokens(ctx, lim, "tok", l, 600)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, 600.0, res.Estimate())
		// The estimate leaves no room for another such request...
		d2, res2, err := ReserveTokens(ctx, lim, "tok", l, 600)
		require.NoError(t, err)
		assert.False(t, d2.Allowed)
		require.NoError(t, res2.Settle(ctx, 5), "settling a refused reservation does nothing")
		// ...until the actual usage (100) is known: 500 come back.
		require.NoError(t, res.Settle(ctx, 100))
		d, res, err = ReserveTokens(ctx, lim, "tok", l, 600)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.InDelta(t, 300, d.Remaining, 1e-3)
		// Used more than estimated: charged the difference.
		require.NoError(t, res.Settle(ctx, 800))
		d, err = AllowRequest(ctx, lim, "tok", l)
		require.NoError(t, err)
		assert.InDelta(t, 99, d.Remaining, 1e-3)
	})
}

func TestContractIndependentKeys(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica()
		l := Limit{Rate: slow, Burst: 1}
		// Keys that a careless key layout would confuse, braces (the hash tag) included.
		keys := []string{"a", "b", "a:b", "a}b", "{a}", "", "ключ", "a b"}
		for _, k := range keys {
			d, err := lim.Allow(ctx, k, l, 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "first request on %q", k)
		}
		for _, k := range keys {
			d, err := lim.Allow(ctx, k, l, 1)
			require.NoError(t, err)
			assert.False(t, d.Allowed, "second request on %q", k)
		}
	})
}

func TestContractInvalid(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica()
		ok := Limit{Rate: 1, Burst: 1}
		for _, l := range []Limit{{}, {Rate: 1}, {Burst: 1}, {Rate: -1, Burst: 1}, {Rate: math.NaN(), Burst: 1}, {Rate: 1, Burst: math.Inf(1)}} {
			_, err := lim.Allow(ctx, "bad", l, 1)
			assert.ErrorIs(t, err, ErrInvalid, "limit %+v", l)
			assert.ErrorIs(t, lim.Adjust(ctx, "bad", l, 1), ErrInvalid, "limit %+v", l)
		}
		for _, cost := range []float64{-1, math.NaN(), math.Inf(1)} {
			_, err := lim.Allow(ctx, "bad", ok, cost)
			assert.ErrorIs(t, err, ErrInvalid, "cost %v", cost)
		}
		for _, delta := range []float64{math.NaN(), math.Inf(-1)} {
			assert.ErrorIs(t, lim.Adjust(ctx, "bad", ok, delta), ErrInvalid, "delta %v", delta)
		}
		// Nothing was spent by the refused calls.
		d, err := lim.Allow(ctx, "bad", ok, 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed)
	})
}

// Concurrent callers (on two replicas for Redis) never get more than the burst plus what the
// elapsed time refilled.
func TestContractConcurrent(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		replicas := []Limiter{h.replica(), h.replica()}
		l := Limit{Rate: 20, Burst: 10}
		var admitted, calls atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				lim := replicas[g%2]
				for range 50 {
					d, err := lim.Allow(ctx, "conc", l, 1)
					if !assert.NoError(t, err) {
						return
					}
					calls.Add(1)
					if d.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		refill := 0.0
		if !h.exact {
			refill = l.Rate * elapsed.Seconds()
		}
		assert.EqualValues(t, 32*50, calls.Load())
		assert.GreaterOrEqual(t, admitted.Load(), int64(10), "the burst is available")
		assert.LessOrEqual(t, float64(admitted.Load()), 10+refill+1e-9,
			"admitted %d in %v: at most burst 10 + %.1f refilled", admitted.Load(), elapsed, refill)
	})
}

func TestSetHeaders(t *testing.T) {
	l := Limit{Rate: 2, Burst: 60}
	h := make(map[string][]string)
	decision(l, 1, 10.7, true).SetHeaders(h)
	assert.Equal(t, map[string][]string{
		"X-Ratelimit-Limit": {"60"}, "X-Ratelimit-Remaining": {"10"}, "X-Ratelimit-Reset": {"25"},
	}, h)
	h = make(map[string][]string)
	d := decision(l, 5, 0.5, false)
	assert.Equal(t, 2250*time.Millisecond, d.RetryAfter)
	d.SetHeaders(h)
	assert.Equal(t, []string{"3"}, h["Retry-After"])
	assert.Equal(t, []string{"30"}, h["X-Ratelimit-Reset"])
	h = make(map[string][]string)
	decision(l, 61, 60, false).SetHeaders(h)
	assert.NotContains(t, h, "Retry-After", "waiting does not help a request too large")
	assert.Equal(t, []string{"0"}, h["X-Ratelimit-Reset"])
}

func TestEstimateTokens(t *testing.T) {
	assert.Equal(t, 3.0+100, EstimateTokens(9, 100))
	assert.Equal(t, 0.0, EstimateTokens(-5, -1))
}

func TestPerMinute(t *testing.T) {
	assert.Equal(t, Limit{Rate: 1, Burst: 60}, PerMinute(60))
}

// TestContractAllowAll: a batch decides each bucket as Allow would, in order, and reports a bad
// request in its own slot without failing the others.
func TestContractAllowAll(t *testing.T) {
	limiters(t, func(t *testing.T, h harness) {
		ctx := context.Background()
		lim := h.replica().(BatchLimiter)
		one := Limit{Rate: slow, Burst: 1}
		three := Limit{Rate: slow, Burst: 3}
		reqs := []Request{{"batch-a", one, 1}, {"batch-b", three, 2}, {"batch-c", Limit{Rate: -1, Burst: 1}, 1}, {"batch-d", one, 5}}
		res := lim.AllowAll(ctx, reqs)
		require.Len(t, res, 4)
		require.NoError(t, res[0].Err)
		assert.True(t, res[0].Decision.Allowed)
		require.NoError(t, res[1].Err)
		assert.True(t, res[1].Decision.Allowed)
		assert.InDelta(t, 1, res[1].Decision.Remaining, 1e-3)
		assert.ErrorIs(t, res[2].Err, ErrInvalid)
		require.NoError(t, res[3].Err)
		assert.True(t, res[3].Decision.TooLarge)

		res = lim.AllowAll(ctx, reqs[:2])
		assert.False(t, res[0].Decision.Allowed, "batch-a is spent")
		assert.False(t, res[1].Decision.Allowed, "batch-b holds 1 token, the request costs 2")
		assert.InDelta(t, 1, res[1].Decision.Remaining, 1e-3, "a refused request spends nothing")
	})
}
