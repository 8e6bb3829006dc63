// Package ratelimittest is the contract every ratelimit.Limiter passes: token buckets spent all
// or nothing, refilled at their rate up to their burst, adjusted after the fact, independent per
// key, shared by every replica of a shared limiter, and never overspent by concurrent callers.
// ratelimit.Local and ratelimit.Redis run it in their package's tests; a new implementation runs
// it from its own:
//
//	func TestContract(t *testing.T) {
//		ratelimittest.Run(t, ratelimittest.Features{Batch: true}, func(t *testing.T) ratelimittest.Harness {
//			srv := startServer(t) // fresh, empty state for each case
//			return ratelimittest.Harness{
//				Replica: func() ratelimit.Limiter { return mylimiter.New(srv.Client(t)) },
//				Sleep:   time.Sleep, // its clock is real
//			}
//		})
//	}
//
// Each case is a subtest named after the behaviour it checks (BurstThenDeny, Refill, ...), on a
// Harness of its own from the Factory; the cases run one after another.
package ratelimittest

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/store/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Harness is one limiter under the contract: its replicas and its clock.
type Harness struct {
	// Replica returns a limiter over the same buckets as every other Replica of this Harness,
	// and no other's: for an in-process limiter, the same one each time; for a shared one, a new
	// limiter with its own client of the same store, as another gateway replica has. The
	// buckets start empty of state: every key reads as a full bucket.
	Replica func() ratelimit.Limiter
	// Sleep lets at least d pass on the limiters' clock: a fake clock moves by d at once (see
	// Features.ExactClock), a real one sleeps.
	Sleep func(d time.Duration)
}

// Features declares what the cases may expect of a Harness beyond the Limiter interface; a case
// that needs a feature the harness lacks is skipped.
type Features struct {
	// ExactClock: the limiters' clock moves only through Sleep (a fake clock), so no time passes
	// between two calls. The cases then check amounts exactly (half the refill time gives half
	// a token) and allow no refill for the time the calls took.
	ExactClock bool
	// Batch: every Replica is a ratelimit.BatchLimiter, whose AllowAll decides each request as
	// Allow would, in order.
	Batch bool
}

// Factory builds a fresh Harness for one case. Anything to release when the test ends is
// released through t.Cleanup.
type Factory func(t *testing.T) Harness

// Run runs every case of the contract against harnesses from f, one subtest per case.
func Run(t *testing.T, features Features, f Factory) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := f(t)
			require.NotNil(t, h.Replica, "the harness has no Replica")
			require.NotNil(t, h.Sleep, "the harness has no Sleep")
			c.run(t, h, features)
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, h Harness, f Features)
}{
	{"BurstThenDeny", burstThenDeny},
	{"Refill", refill},
	{"Cost", costs},
	{"TooLarge", tooLarge},
	{"Adjust", adjust},
	{"Reservation", reservation},
	{"IndependentKeys", independentKeys},
	{"Invalid", invalid},
	{"Concurrent", concurrent},
	{"AllowAll", allowAll},
}

// slow refills so slowly (one token per ~3 hours) that no test sees it happen: amounts are
// exact to 1e-3 of a token even on a real clock.
const slow = 1e-4

func burstThenDeny(t *testing.T, h Harness, _ Features) {
	ctx := context.Background()
	lim := h.Replica()
	l := ratelimit.Limit{Rate: slow, Burst: 5}
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
}

func refill(t *testing.T, h Harness, f Features) {
	ctx := context.Background()
	lim := h.Replica()
	l := ratelimit.Limit{Rate: 20, Burst: 2} // one token per 50 ms
	for range 2 {
		d, err := lim.Allow(ctx, "refill", l, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// On a real clock a busy machine may take 50 ms between calls: go on until refused.
	var d ratelimit.Decision
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
	h.Sleep(d.RetryAfter)
	d, err := lim.Allow(ctx, "refill", l, 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "allowed again after RetryAfter")

	// Idle long enough, the bucket is full again, not fuller.
	h.Sleep(200 * time.Millisecond)
	d, err = lim.Allow(ctx, "refill", l, 0)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 2.0, d.Remaining)
	assert.Zero(t, d.ResetAfter)
	if f.ExactClock {
		// Exactly: half of the refill time gives half a token.
		for range 2 {
			_, _ = lim.Allow(ctx, "exact", l, 1)
		}
		h.Sleep(25 * time.Millisecond)
		d, err = lim.Allow(ctx, "exact", l, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.InDelta(t, 0.5, d.Remaining, 1e-9)
		assert.Equal(t, 25*time.Millisecond, d.RetryAfter)
		assert.Equal(t, 75*time.Millisecond, d.ResetAfter)
	}
}

func costs(t *testing.T, h Harness, _ Features) {
	ctx := context.Background()
	lim := h.Replica()
	l := ratelimit.Limit{Rate: slow, Burst: 10}
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
}

func tooLarge(t *testing.T, h Harness, _ Features) {
	ctx := context.Background()
	lim := h.Replica()
	l := ratelimit.Limit{Rate: slow, Burst: 10}
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
}

func adjust(t *testing.T, h Harness, _ Features) {
	ctx := context.Background()
	lim := h.Replica()
	l := ratelimit.Limit{Rate: slow, Burst: 100}
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
}

func reservation(t *testing.T, h Harness, _ Features) {
	ctx := context.Background()
	lim := h.Replica()
	l := ratelimit.Limit{Rate: slow, Burst: 1000}
	d, res, err := ratelimit.ReserveTokens(ctx, lim, "tok", l, 600)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, 600.0, res.Estimate())
	// The estimate leaves no room for another such request...
	d2, res2, err := ratelimit.ReserveTokens(ctx, lim, "tok", l, 600)
	require.NoError(t, err)
	assert.False(t, d2.Allowed)
	require.NoError(t, res2.Settle(ctx, 5), "settling a refused reservation does nothing")
	// ...until the actual usage (100) is known: 500 come back.
	require.NoError(t, res.Settle(ctx, 100))
	d, res, err = ratelimit.ReserveTokens(ctx, lim, "tok", l, 600)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.InDelta(t, 300, d.Remaining, 1e-3)
	// Used more than estimated: charged the difference.
	require.NoError(t, res.Settle(ctx, 800))
	d, err = ratelimit.AllowRequest(ctx, lim, "tok", l)
	require.NoError(t, err)
	assert.InDelta(t, 99, d.Remaining, 1e-3)
}

func independentKeys(t *testing.T, h Harness, _ Features) {
	ctx := context.Background()
	lim := h.Replica()
	l := ratelimit.Limit{Rate: slow, Burst: 1}
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
}

func invalid(t *testing.T, h Harness, _ Features) {
	ctx := context.Background()
	lim := h.Replica()
	ok := ratelimit.Limit{Rate: 1, Burst: 1}
	for _, l := range []ratelimit.Limit{{}, {Rate: 1}, {Burst: 1}, {Rate: -1, Burst: 1}, {Rate: math.NaN(), Burst: 1}, {Rate: 1, Burst: math.Inf(1)}} {
		_, err := lim.Allow(ctx, "bad", l, 1)
		assert.ErrorIs(t, err, ratelimit.ErrInvalid, "limit %+v", l)
		assert.ErrorIs(t, lim.Adjust(ctx, "bad", l, 1), ratelimit.ErrInvalid, "limit %+v", l)
	}
	for _, cost := range []float64{-1, math.NaN(), math.Inf(1)} {
		_, err := lim.Allow(ctx, "bad", ok, cost)
		assert.ErrorIs(t, err, ratelimit.ErrInvalid, "cost %v", cost)
	}
	for _, delta := range []float64{math.NaN(), math.Inf(-1)} {
		assert.ErrorIs(t, lim.Adjust(ctx, "bad", ok, delta), ratelimit.ErrInvalid, "delta %v", delta)
	}
	// Nothing was spent by the refused calls.
	d, err := lim.Allow(ctx, "bad", ok, 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// Concurrent callers (on two replicas for Redis) never get more than the burst plus what the
// elapsed time refilled.
func concurrent(t *testing.T, h Harness, f Features) {
	ctx := context.Background()
	replicas := []ratelimit.Limiter{h.Replica(), h.Replica()}
	l := ratelimit.Limit{Rate: 20, Burst: 10}
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
	if !f.ExactClock {
		refill = l.Rate * elapsed.Seconds()
	}
	assert.EqualValues(t, 32*50, calls.Load())
	assert.GreaterOrEqual(t, admitted.Load(), int64(10), "the burst is available")
	assert.LessOrEqual(t, float64(admitted.Load()), 10+refill+1e-9,
		"admitted %d in %v: at most burst 10 + %.1f refilled", admitted.Load(), elapsed, refill)
}

// allowAll: a batch decides each bucket as Allow would, in order, and reports a bad
// request in its own slot without failing the others.
func allowAll(t *testing.T, h Harness, f Features) {
	if !f.Batch {
		t.Skip("the limiter is no ratelimit.BatchLimiter (Features.Batch)")
	}
	lim, ok := h.Replica().(ratelimit.BatchLimiter)
	require.True(t, ok, "Features.Batch, yet the limiter is no ratelimit.BatchLimiter")
	ctx := context.Background()
	one := ratelimit.Limit{Rate: slow, Burst: 1}
	three := ratelimit.Limit{Rate: slow, Burst: 3}
	reqs := []ratelimit.Request{{Key: "batch-a", Limit: one, Cost: 1}, {Key: "batch-b", Limit: three, Cost: 2},
		{Key: "batch-c", Limit: ratelimit.Limit{Rate: -1, Burst: 1}, Cost: 1}, {Key: "batch-d", Limit: one, Cost: 5}}
	res := lim.AllowAll(ctx, reqs)
	require.Len(t, res, 4)
	require.NoError(t, res[0].Err)
	assert.True(t, res[0].Decision.Allowed)
	require.NoError(t, res[1].Err)
	assert.True(t, res[1].Decision.Allowed)
	assert.InDelta(t, 1, res[1].Decision.Remaining, 1e-3)
	assert.ErrorIs(t, res[2].Err, ratelimit.ErrInvalid)
	require.NoError(t, res[3].Err)
	assert.True(t, res[3].Decision.TooLarge)

	res = lim.AllowAll(ctx, reqs[:2])
	assert.False(t, res[0].Decision.Allowed, "batch-a is spent")
	assert.False(t, res[1].Decision.Allowed, "batch-b holds 1 token, the request costs 2")
	assert.InDelta(t, 1, res[1].Decision.Remaining, 1e-3, "a refused request spends nothing")
}
