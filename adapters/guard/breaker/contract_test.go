package breaker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/stretchr/testify/require"
)

// harness is one implementation under the contract.
type harness struct {
	b Breaker
	// settle returns once the outcomes reported so far are part of the state (Redis: flushed).
	settle func()
	// advance moves time on: a fake clock for Local, a sleep for Redis (whose clock is Redis's).
	advance func(time.Duration)
}

// contractSettings are small enough for the Redis harness to run in real time.
var contractSettings = Settings{
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

func newLocalHarness(_ *testing.T, s Settings) harness {
	clk := newFakeClock()
	return harness{
		b:       NewLocal(Options{Settings: s, Now: clk.Now}),
		settle:  func() {},
		advance: clk.Add,
	}
}

func newRedisHarness(t *testing.T, s Settings) harness {
	srv := redistest.Start(t)
	b := newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}})
	return harness{
		b: b,
		settle: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, b.Flush(ctx))
		},
		// Redis stamps an outcome when its batch arrives, a little after the call: wait a
		// little longer than asked.
		advance: func(d time.Duration) { time.Sleep(d + 50*time.Millisecond) },
	}
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

// contract runs f against every implementation.
func contract(t *testing.T, s Settings, f func(t *testing.T, h harness)) {
	t.Run("local", func(t *testing.T) { f(t, newLocalHarness(t, s)) })
	t.Run("redis", func(t *testing.T) { f(t, newRedisHarness(t, s)) })
}

func allow(t *testing.T, h harness, ep string) Ticket {
	t.Helper()
	tk, err := h.b.Allow(context.Background(), ep)
	require.NoError(t, err, "endpoint %s should admit", ep)
	return tk
}

func refused(t *testing.T, h harness, ep string) *OpenError {
	t.Helper()
	_, err := h.b.Allow(context.Background(), ep)
	require.ErrorIs(t, err, ErrOpen, "endpoint %s should refuse", ep)
	var oe *OpenError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, ep, oe.Endpoint)
	return oe
}

// outcomes admits one request per outcome and reports them in order, then settles.
func outcomes(t *testing.T, h harness, ep string, os ...Outcome) {
	t.Helper()
	for _, o := range os {
		allow(t, h, ep).Done(o)
	}
	h.settle()
}

// trip opens ep with consecutive failures.
func trip(t *testing.T, h harness, ep string) {
	t.Helper()
	outcomes(t, h, ep, Failure, Failure, Failure)
	require.Equal(t, Open, h.b.State(ep))
}

func TestContractTripsAfterConsecutiveFailures(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		outcomes(t, h, "up", Failure, Failure, Success, Failure, Failure)
		require.Equal(t, Closed, h.b.State("up"), "a success in between resets the run")
		outcomes(t, h, "up", Failure)
		require.Equal(t, Open, h.b.State("up"))
		oe := refused(t, h, "up")
		require.Equal(t, Open, oe.State)
		require.False(t, oe.Throttled)
		require.Greater(t, oe.RetryAfter, time.Duration(0))
		require.LessOrEqual(t, oe.RetryAfter, contractSettings.OpenTimeout)
	})
}

func TestContractTripsOnErrorRateWithMinimumVolume(t *testing.T) {
	s := contractSettings
	s.ConsecutiveFailures = -1 // only the rate
	contract(t, s, func(t *testing.T, h harness) {
		// 9 outcomes, 5 failures: over the rate but under the volume.
		outcomes(t, h, "up", Failure, Success, Failure, Success, Failure, Success, Failure, Success, Failure)
		require.Equal(t, Closed, h.b.State("up"), "below MinRequests the rate does not trip")
		// 8 successes more: 17 outcomes, 5 failures (29%).
		outcomes(t, h, "up", Success, Success, Success, Success, Success, Success, Success, Success)
		require.Equal(t, Closed, h.b.State("up"))
		// Failures alternating with nothing else: 6/18, 7/19, 8/20, 9/21, 10/22, 11/23 < 0.5 ...
		for range 6 {
			outcomes(t, h, "up", Failure)
			require.Equal(t, Closed, h.b.State("up"))
		}
		// ... 12/24 = 0.5 trips.
		outcomes(t, h, "up", Failure)
		require.Equal(t, Open, h.b.State("up"))
		refused(t, h, "up")
	})
}

func TestContractHalfOpenAdmitsExactlyProbes(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		trip(t, h, "up")
		h.advance(contractSettings.OpenTimeout)
		require.Equal(t, HalfOpen, h.b.State("up"), "half-open once the open timeout passed")
		var probes []Ticket
		for range 5 {
			tk, err := h.b.Allow(context.Background(), "up")
			if err == nil {
				require.True(t, tk.Probe())
				probes = append(probes, tk)
				continue
			}
			var oe *OpenError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, HalfOpen, oe.State)
		}
		require.Len(t, probes, contractSettings.HalfOpenProbes)

		// An ignored probe gives its slot back.
		probes[0].Done(Ignored)
		probes[0] = allow(t, h, "up")
		require.True(t, probes[0].Probe())
		refused(t, h, "up")

		// Closes after SuccessesToClose probe successes.
		probes[0].Done(Success)
		require.Equal(t, HalfOpen, h.b.State("up"))
		probes[1].Done(Success)
		require.Equal(t, Closed, h.b.State("up"))
		require.False(t, allow(t, h, "up").Probe())
	})
}

func TestContractReopensOnProbeFailure(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		trip(t, h, "up")
		h.advance(contractSettings.OpenTimeout)
		p1, p2 := allow(t, h, "up"), allow(t, h, "up")
		p1.Done(Success)
		p2.Done(Failure)
		require.Equal(t, Open, h.b.State("up"))
		oe := refused(t, h, "up")
		require.Equal(t, Open, oe.State)
		require.Greater(t, oe.RetryAfter, time.Duration(0))

		// The next round works again.
		h.advance(contractSettings.OpenTimeout)
		allow(t, h, "up").Done(Success)
		allow(t, h, "up").Done(Success)
		require.Equal(t, Closed, h.b.State("up"))
	})
}

func TestContractHalfOpenRoundTimesOut(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		trip(t, h, "up")
		h.advance(contractSettings.OpenTimeout)
		allow(t, h, "up") // two probes that are never reported (their caller died)
		allow(t, h, "up")
		refused(t, h, "up")
		h.advance(contractSettings.OpenTimeout)
		p := allow(t, h, "up")
		require.True(t, p.Probe(), "a new round after the round timed out")
	})
}

func TestContractThrottledCoolsDownWithoutFailure(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		allow(t, h, "up").Done(Throttled)
		oe := refused(t, h, "up")
		require.True(t, oe.Throttled)
		require.Equal(t, Closed, oe.State)
		require.Greater(t, oe.RetryAfter, time.Duration(0))
		require.LessOrEqual(t, oe.RetryAfter, contractSettings.Cooldown)
		require.Equal(t, Closed, h.b.State("up"))

		h.advance(contractSettings.Cooldown)
		// Throttled outcomes are no failures: more than ConsecutiveFailures of them do not trip,
		// nor break a run of failures.
		for range 5 {
			allow(t, h, "up").Done(Throttled)
			h.advance(contractSettings.Cooldown)
		}
		h.settle()
		require.Equal(t, Closed, h.b.State("up"))
		outcomes(t, h, "up", Failure, Failure)
		allow(t, h, "up").Throttle(2 * contractSettings.Cooldown)
		h.settle()
		require.Equal(t, Closed, h.b.State("up"))
		// Throttle's Retry-After lengthens the cooldown.
		oe = refused(t, h, "up")
		require.Greater(t, oe.RetryAfter, contractSettings.Cooldown)
		h.advance(2 * contractSettings.Cooldown)
		outcomes(t, h, "up", Failure)
		require.Equal(t, Open, h.b.State("up"))
	})
}

func TestContractIgnoredOutcomes(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		outcomes(t, h, "up", Failure, Failure)
		for range 20 {
			allow(t, h, "up").Done(Ignored)
		}
		h.settle()
		require.Equal(t, Closed, h.b.State("up"))
		outcomes(t, h, "up", Failure)
		require.Equal(t, Open, h.b.State("up"), "ignored outcomes do not break a run of failures")
	})
}

func TestContractIndependentEndpoints(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		outcomes(t, h, "b", Success)
		trip(t, h, "a")
		require.Equal(t, Closed, h.b.State("b"))
		require.Equal(t, Closed, h.b.State("never-used"))
		allow(t, h, "b").Done(Success)
		outcomes(t, h, "b", Failure, Failure)
		require.Equal(t, Closed, h.b.State("b"), "a's failures are not b's")
	})
}

func TestContractOutcomesOfAnOlderPeriodDoNotCount(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		old := []Ticket{allow(t, h, "up"), allow(t, h, "up"), allow(t, h, "up")}
		trip(t, h, "up")
		h.advance(contractSettings.OpenTimeout)
		allow(t, h, "up").Done(Success)
		allow(t, h, "up").Done(Success)
		require.Equal(t, Closed, h.b.State("up"))
		for _, tk := range old {
			tk.Done(Failure)
		}
		h.settle()
		require.Equal(t, Closed, h.b.State("up"), "failures admitted before the trip do not count after it")
	})
}

// TestContractRetryAfter: RetryAfter says, without taking a ticket, how long until an endpoint
// admits again: zero while it does, the open timeout's rest while open, the cooldown's rest
// after a 429, the round's rest while every probe is out.
func TestContractRetryAfter(t *testing.T) {
	contract(t, contractSettings, func(t *testing.T, h harness) {
		require.Zero(t, h.b.RetryAfter("never-used"))
		outcomes(t, h, "up", Success)
		require.Zero(t, h.b.RetryAfter("up"), "closed: admits now")

		trip(t, h, "up")
		wait := h.b.RetryAfter("up")
		require.Greater(t, wait, time.Duration(0), "open: until the first probe")
		require.LessOrEqual(t, wait, contractSettings.OpenTimeout)
		// A moment later, a refusal says no more: with Redis, give or take its clock's
		// millisecond (the refusal counts from Redis's TIME, RetryAfter from the replica's view).
		require.LessOrEqual(t, refused(t, h, "up").RetryAfter, wait+time.Millisecond, "what a refusal says, a moment later")

		h.advance(contractSettings.OpenTimeout)
		require.Zero(t, h.b.RetryAfter("up"), "half-open with probes to give: admits now")
		p1, p2 := allow(t, h, "up"), allow(t, h, "up")
		refused(t, h, "up") // every probe of the round is out
		wait = h.b.RetryAfter("up")
		require.Greater(t, wait, time.Duration(0), "half-open, probes all out: until the round times out")
		require.LessOrEqual(t, wait, contractSettings.OpenTimeout)
		p1.Done(Success)
		p2.Done(Success)
		require.Equal(t, Closed, h.b.State("up"))
		require.Zero(t, h.b.RetryAfter("up"))

		allow(t, h, "up").Done(Throttled)
		wait = h.b.RetryAfter("up")
		require.Greater(t, wait, time.Duration(0), "cooling down after a 429: until the cooldown ends")
		require.LessOrEqual(t, wait, contractSettings.Cooldown)
		h.advance(contractSettings.Cooldown)
		require.Zero(t, h.b.RetryAfter("up"))
	})
}

func TestClassify(t *testing.T) {
	require.Equal(t, Success, Classify(200, nil))
	require.Equal(t, Success, Classify(404, nil))
	require.Equal(t, Throttled, Classify(429, nil))
	require.Equal(t, Failure, Classify(500, nil))
	require.Equal(t, Failure, Classify(503, nil))
	require.Equal(t, Failure, Classify(0, errors.New("connection refused")))
	require.Equal(t, Failure, Classify(0, context.DeadlineExceeded))
	require.Equal(t, Ignored, Classify(0, context.Canceled))
}
