package breaker

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

func TestRedisOneReplicasFailuresOpenTheOther(t *testing.T) {
	srv := redistest.Start(t)
	s := testSettings
	s.OpenTimeout, s.MaxCooldown = time.Minute, time.Minute
	a := newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}})
	b := newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}})
	ctx := context.Background()

	tk, err := b.Allow(ctx, "up") // b knows the endpoint, closed
	require.NoError(t, err)
	tk.Done(Success)

	// No Flush: a failure must reach Redis on its own, promptly.
	start := time.Now()
	for range s.ConsecutiveFailures {
		tk, err := a.Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Failure)
	}
	require.Eventually(t, func() bool { return b.State("up") == Open }, 5*time.Second, time.Millisecond)
	t.Logf("replica B saw the trip %v after replica A's last failure", time.Since(start))
	_, err = b.Allow(ctx, "up")
	require.ErrorIs(t, err, ErrOpen)
	require.Eventually(t, func() bool { return a.State("up") == Open }, 5*time.Second, time.Millisecond)

	// A replica that never used the endpoint learns its state on first use.
	c := newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}})
	_, err = c.Allow(ctx, "up")
	require.ErrorIs(t, err, ErrOpen)

	// A replica that never used an endpoint still follows its announced changes, so its State
	// (what routing and the admin endpoint read) is right before its first request.
	for range s.ConsecutiveFailures {
		tk, err := a.Allow(ctx, "unused-by-b")
		require.NoError(t, err)
		tk.Done(Failure)
	}
	require.Eventually(t, func() bool { return b.State("unused-by-b") == Open }, 5*time.Second, time.Millisecond)

	// A 429 on one replica cools the endpoint down on the other.
	tk, err = a.Allow(ctx, "limited")
	require.NoError(t, err)
	_, err = b.Allow(ctx, "limited")
	require.NoError(t, err)
	tk.Throttle(30 * time.Second)
	require.Eventually(t, func() bool {
		_, err := b.Allow(ctx, "limited")
		var oe *OpenError
		return err != nil && asOpen(err, &oe) && oe.Throttled && oe.RetryAfter > 20*time.Second
	}, 5*time.Second, time.Millisecond)
	require.Equal(t, Closed, b.State("limited"))
}

func asOpen(err error, oe **OpenError) bool {
	e, ok := err.(*OpenError)
	*oe = e
	return ok
}

func TestRedisHalfOpenAdmitsProbesAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	s := testSettings
	s.HalfOpenProbes, s.SuccessesToClose = 3, 3
	reps := []*Redis{
		newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}}),
		newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}}),
	}
	ctx := context.Background()
	for _, r := range reps {
		tk, err := r.Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Success)
	}
	for range s.ConsecutiveFailures {
		tk, err := reps[0].Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Failure)
	}
	for round := range 3 {
		for _, r := range reps {
			require.Eventually(t, func() bool { return r.State("up") == Open }, 5*time.Second, time.Millisecond)
		}
		time.Sleep(s.OpenTimeout + 50*time.Millisecond)

		// Many callers on both replicas at once.
		var (
			mu     sync.Mutex
			probes []Ticket
			wg     sync.WaitGroup
			gate   = make(chan struct{})
		)
		for i := range 32 {
			wg.Go(func() {
				<-gate
				tk, err := reps[i%2].Allow(ctx, "up")
				if err == nil {
					mu.Lock()
					probes = append(probes, tk)
					mu.Unlock()
				}
			})
		}
		close(gate)
		wg.Wait()
		require.Len(t, probes, s.HalfOpenProbes, "round %d", round)
		for _, p := range probes {
			require.True(t, p.Probe())
		}
		if round < 2 {
			probes[0].Done(Failure) // reopens on every replica; the other probes are stale
			for _, p := range probes[1:] {
				p.Done(Success)
			}
			continue
		}
		for _, p := range probes {
			p.Done(Success)
		}
	}
	for _, r := range reps {
		require.Eventually(t, func() bool { return r.State("up") == Closed }, 5*time.Second, time.Millisecond)
	}
}

func TestRedisUnreachableFallsBackToLocalBreaking(t *testing.T) {
	srv := redistest.Start(t)
	s := testSettings
	const timeout = 50 * time.Millisecond
	opts := RedisOptions{Options: Options{Settings: s}, Timeout: timeout, RetryInterval: 50 * time.Millisecond}
	a := newRedisBreaker(t, srv, opts)
	b := newRedisBreaker(t, srv, opts)
	ctx := context.Background()
	for _, r := range []*Redis{a, b} {
		tk, err := r.Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Success)
	}

	srv.Kill()
	// Nothing waits for the dead Redis longer than the timeout (plus a margin for a loaded
	// machine; without the bound a call would wait for rueidis's dial and retries).
	bound := timeout + time.Second
	var slowest time.Duration
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		d := time.Since(start)
		slowest = max(slowest, d)
		require.Less(t, d, bound, "%s took %v with Redis down", what, d)
	}
	// Local breaking: a's own failures open it on a.
	require.Eventually(t, func() bool {
		var tk Ticket
		var err error
		timed("Allow", func() { tk, err = a.Allow(ctx, "up") })
		if err == nil {
			timed("Done", func() { tk.Done(Failure) })
		}
		return a.State("up") == Open
	}, 10*time.Second, 5*time.Millisecond)
	require.True(t, a.Degraded())
	timed("Allow of a new endpoint", func() {
		_, err := a.Allow(ctx, "new")
		require.NoError(t, err)
	})
	timed("Flush", func() { _ = a.Flush(ctx) })
	_, err := a.Allow(ctx, "up")
	require.ErrorIs(t, err, ErrOpen)
	// The fallback goes half-open and closes on its own probes.
	time.Sleep(s.OpenTimeout)
	for range s.SuccessesToClose {
		var tk Ticket
		timed("Allow (probe)", func() { tk, err = a.Allow(ctx, "up") })
		require.NoError(t, err)
		require.True(t, tk.Probe())
		timed("Done (probe)", func() { tk.Done(Success) })
	}
	require.Equal(t, Closed, a.State("up"))
	t.Logf("slowest call with Redis down: %v (timeout %v)", slowest, timeout)

	// Redis comes back (empty): both replicas share again: b's failures open the endpoint on a,
	// which has no failures of its own. (b may notice the outage only now, on its first call
	// over a dead connection, and count a few failures locally meanwhile: keep failing.)
	srv.Restart()
	require.Eventually(t, func() bool { return !a.Degraded() }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		if tk, err := b.Allow(ctx, "up"); err == nil {
			tk.Done(Failure)
		}
		return a.State("up") == Open
	}, 10*time.Second, 5*time.Millisecond)
	require.False(t, a.Degraded())
	require.False(t, b.Degraded())
}

// commandCalls sums INFO commandstats calls, leaving out the commands that are not the
// breaker's (INFO itself, and PING keepalives).
func commandCalls(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" || name == "cmdstat_ping" {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, line)
		n += v
	}
	return n
}

func TestRedisClosedHotPathMakesNoRedisCalls(t *testing.T) {
	srv := redistest.Start(t)
	// Nothing in the background either, so that any call counted is the hot path's.
	b := newRedisBreaker(t, srv, RedisOptions{FlushInterval: time.Hour, SyncInterval: time.Hour})
	stats := srv.NewClient(t)
	ctx := context.Background()
	tk, err := b.Allow(ctx, "up") // first use reads the state once
	require.NoError(t, err)
	tk.Done(Success)
	// Wait for the subscription and the resync it triggers to be over.
	require.Eventually(t, func() bool {
		n, err := stats.Do(ctx, stats.B().PubsubNumsub().Channel(b.channel).Build()).AsIntMap()
		return err == nil && n[b.channel] == 1
	}, 5*time.Second, time.Millisecond)
	last := int64(-1)
	require.Eventually(t, func() bool {
		n := commandCalls(t, stats)
		stable := n == last
		last = n
		return stable
	}, 5*time.Second, 50*time.Millisecond)

	before := commandCalls(t, stats)
	for range 10000 {
		tk, err := b.Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Success)
	}
	require.Equal(t, before, commandCalls(t, stats), "Allow+Done on a closed endpoint must not call Redis")
}

func TestRedisBatchesOutcomes(t *testing.T) {
	srv := redistest.Start(t)
	s := Settings{Window: time.Minute}
	reps := []*Redis{
		newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}, FlushInterval: 20 * time.Millisecond}),
		newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}, FlushInterval: 20 * time.Millisecond}),
	}
	stats := srv.NewClient(t)
	ctx := context.Background()
	for _, r := range reps {
		tk, err := r.Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Success)
		require.NoError(t, r.Flush(ctx))
	}
	before := commandCalls(t, stats)
	const perWorker, workers = 5000, 4
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := range 2 * workers {
		wg.Go(func() {
			for range perWorker {
				tk, err := reps[i%2].Allow(ctx, "up")
				if err == nil {
					admitted.Add(1)
					tk.Done(Success)
				}
			}
		})
	}
	wg.Wait()
	for _, r := range reps {
		require.NoError(t, r.Flush(ctx))
	}
	calls := commandCalls(t, stats) - before
	total := int64(2 * workers * perWorker)
	require.Equal(t, total, admitted.Load())
	t.Logf("%d outcomes on 2 replicas cost %d Redis commands", total, calls)
	require.Less(t, calls, total/20, "outcomes must be sent in batches, not one call each")

	// Every outcome arrived, from both replicas.
	h, err := stats.Do(ctx, stats.B().Hgetall().Key(reps[0].prefix+"{up}").Build()).AsStrMap()
	require.NoError(t, err)
	var sum int64
	for i := range windowBuckets {
		v, _ := strconv.ParseInt(h["t"+strconv.Itoa(i)], 10, 64)
		sum += v
	}
	require.Equal(t, total+2, sum)
}

func TestRedisResyncsAfterAMissedChange(t *testing.T) {
	srv := redistest.Start(t)
	s := testSettings
	s.OpenTimeout = time.Minute
	b := newRedisBreaker(t, srv, RedisOptions{Options: Options{Settings: s}, SyncInterval: 50 * time.Millisecond})
	ctx := context.Background()
	tk, err := b.Allow(ctx, "up")
	require.NoError(t, err)
	tk.Done(Success)

	// Another replica (without the breaker code: a script run by hand, with no subscriber
	// able to hear it because it publishes on another channel) opens the endpoint.
	c := srv.NewClient(t)
	_, err = luaRecord.exec(ctx, c, b.prefix+"{up}", []string{"elsewhere", "up", "60000",
		"0", "0", "5", "5", "0", "5", "0.5", "20", "60000", "60000", "0"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return b.State("up") == Open }, 5*time.Second, time.Millisecond)
}
