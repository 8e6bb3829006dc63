package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func value(t testing.TB, m prometheus.Metric) float64 {
	t.Helper()
	var pb dto.Metric
	require.NoError(t, m.Write(&pb))
	switch {
	case pb.Counter != nil:
		return pb.Counter.GetValue()
	case pb.Gauge != nil:
		return pb.Gauge.GetValue()
	}
	t.Fatalf("not a counter or gauge: %v", &pb)
	return 0
}

func (m *Metrics) count(t testing.TB, s store, r result) float64 { return value(t, m.byStore[s][r]) }

// Two replicas (two clients, two limiters) share one bucket: together they admit the burst plus
// the refill, not one burst each.
func TestRedisReplicasShareBucket(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newRedis(t, srv, RedisOptions{}), newRedis(t, srv, RedisOptions{})
	l := Limit{Rate: 10, Burst: 20}
	ctx := context.Background()
	var admitted, calls [2]atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for g := range 16 {
		lim := []*Redis{a, b}[g%2]
		wg.Go(func() {
			for time.Since(start) < 500*time.Millisecond {
				d, err := lim.Allow(ctx, "shared", l, 1)
				if !assert.NoError(t, err) {
					return
				}
				calls[g%2].Add(1)
				if d.Allowed {
					admitted[g%2].Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := admitted[0].Load() + admitted[1].Load()
	t.Logf("admitted %d + %d of %d + %d calls in %v", admitted[0].Load(), admitted[1].Load(), calls[0].Load(), calls[1].Load(), elapsed)
	assert.Positive(t, calls[0].Load())
	assert.Positive(t, calls[1].Load())
	assert.GreaterOrEqual(t, total, int64(20), "the burst")
	assert.LessOrEqual(t, float64(total), 20+l.Rate*elapsed.Seconds(), "burst + refill, shared")

	// What one replica spends, the other sees.
	slowL := Limit{Rate: slow, Burst: 20}
	d, err := a.Allow(ctx, "seen", slowL, 15)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = b.Allow(ctx, "seen", slowL, 0)
	require.NoError(t, err)
	assert.InDelta(t, 5, d.Remaining, 1e-3)
}

// The bucket lives in <prefix>:{<key>}, expires when it would be full again, and holds Redis
// TIME, not the gateway's clock.
func TestRedisKeyLayoutAndExpiry(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.NewClient(t)
	lim := newRedis(t, srv, RedisOptions{Prefix: "gw1"})
	ctx := context.Background()
	l := Limit{Rate: 1, Burst: 10}
	key := "key:abc:model:m{1}"
	assert.Equal(t, "gw1:{key:abc:model:m{1}}", lim.Key(key))

	d, err := lim.Allow(ctx, key, l, 0)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	n, err := client.Do(ctx, client.B().Exists().Key(lim.Key(key)).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n, "a full bucket is not stored")

	d, err = lim.Allow(ctx, key, l, 4)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	pttl, err := client.Do(ctx, client.B().Pttl().Key(lim.Key(key)).Build()).AsInt64()
	require.NoError(t, err)
	// 4 tokens at 1/s refill in 4 s, plus a second of margin.
	assert.LessOrEqual(t, pttl, int64(5000))
	assert.Greater(t, pttl, int64(2000)) // less the time since, on a busy machine

	v, err := client.Do(ctx, client.B().Get().Key(lim.Key(key)).Build()).ToString()
	require.NoError(t, err)
	tm, err := client.Do(ctx, client.B().Time().Build()).AsStrSlice()
	require.NoError(t, err)
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	fields := strings.Fields(v)
	require.Len(t, fields, 2, "value %q", v)
	ts, err := strconv.ParseFloat(fields[1], 64)
	require.NoError(t, err)
	assert.InDelta(t, float64(sec*1e6+usec), ts, 5e6, "the bucket's clock is Redis TIME in µs")

	// A refund that fills the bucket removes the key.
	require.NoError(t, lim.Adjust(ctx, key, l, -100))
	n, err = client.Do(ctx, client.B().Exists().Key(lim.Key(key)).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n)

	// The key vanishes by itself once full: 0.5 tokens at 1/s, so 1.5 s.
	_, err = lim.Allow(ctx, "short", l, 0.5)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := client.Do(ctx, client.B().Exists().Key(lim.Key("short")).Build()).AsInt64()
		return err == nil && n == 0
	}, wait, 50*time.Millisecond)
}

func TestRedisScriptFlushed(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.NewClient(t)
	lim := newRedis(t, srv, RedisOptions{})
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 2}
	_, err := lim.Allow(ctx, "f", l, 1)
	require.NoError(t, err)
	require.NoError(t, client.Do(ctx, client.B().ScriptFlush().Build()).Error())
	d, err := lim.Allow(ctx, "f", l, 1)
	require.NoError(t, err, "EVALSHA falls back to EVAL")
	assert.True(t, d.Allowed)
	d, err = lim.Allow(ctx, "f", l, 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
}

func TestNewRedisOptions(t *testing.T) {
	_, err := NewRedis(nil, RedisOptions{Prefix: "a{b"})
	assert.ErrorContains(t, err, "may not contain")
	_, err = NewRedis(nil, RedisOptions{Failure: 7})
	assert.ErrorContains(t, err, "unknown failure policy")
	r, err := NewRedis(nil, RedisOptions{})
	require.NoError(t, err)
	assert.Equal(t, "infergate:rl:{k}", r.Key("k"))
	assert.Equal(t, 50*time.Millisecond, r.opts.Timeout)
	assert.Equal(t, FailOpen, r.opts.Failure)
}

// callBound is the most any call may take while Redis is dead or stuck: the configured timeout
// (failTimeout) plus a margin for a busy machine. A hang (rueidis's dial timeout is 5 s) would
// exceed it.
const (
	failTimeout = 100 * time.Millisecond
	callBound   = failTimeout + time.Second
)

// timed runs f and fails the test if it took longer than callBound.
func timed(t *testing.T, what string, f func()) {
	t.Helper()
	start := time.Now()
	f()
	took := time.Since(start)
	assert.Less(t, took, callBound, "%s took %v with a timeout of %v", what, took, failTimeout)
}

// traffic keeps callers going against lim until stopped, and checks that none fails and none
// takes longer than callBound.
func traffic(t *testing.T, lim Limiter, failClosed bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var slowest atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			key := "traffic" + strconv.Itoa(g)
			for {
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
				start := time.Now()
				_, err := lim.Allow(context.Background(), key, Limit{Rate: 1e6, Burst: 1e6}, 1)
				if took := time.Since(start); took > time.Duration(slowest.Load()) {
					slowest.Store(int64(took))
				}
				if !failClosed {
					assert.NoError(t, err, "fail-open decides without error")
				} else if err != nil {
					assert.ErrorIs(t, err, ErrUnavailable)
				}
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
		took := time.Duration(slowest.Load())
		t.Logf("slowest call of the background traffic: %v", took)
		assert.Less(t, took, callBound, "a call took %v with a timeout of %v", took, failTimeout)
	}
}

func TestRedisKilledFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	m := NewMetrics()
	lim := newRedis(t, srv, RedisOptions{Timeout: failTimeout, RetryInterval: 50 * time.Millisecond, Metrics: m})
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 3}
	for range 3 {
		d, err := lim.Allow(ctx, "k", l, 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	stop := traffic(t, lim, false)

	srv.Kill()
	// The fallback bucket, new, admits its own burst and no more: the limit still holds here.
	for i := range 4 {
		var d Decision
		var err error
		timed(t, "Allow with Redis dead", func() { d, err = lim.Allow(ctx, "k", l, 1) })
		require.NoError(t, err)
		assert.Equal(t, i < 3, d.Allowed, "request %d on the fallback bucket of 3", i+1)
	}
	timed(t, "Adjust with Redis dead", func() { require.NoError(t, lim.Adjust(ctx, "k", l, -1)) })
	d, err := lim.Allow(ctx, "k", l, 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "Adjust refunded the fallback bucket")
	assert.Positive(t, m.count(t, storeFallback, resultAllowed))
	assert.Positive(t, m.count(t, storeFallback, resultDenied))
	assert.Positive(t, value(t, m.failed))
	assert.Zero(t, value(t, m.redisUp))

	// Redis comes back empty: the next decisions are Redis's (a full bucket admits, where the
	// drained fallback bucket refuses), and the bucket is stored there again.
	srv.Restart()
	require.Eventually(t, func() bool {
		d, err := lim.Allow(ctx, "k", l, 1)
		return err == nil && d.Allowed
	}, wait, 20*time.Millisecond)
	client := srv.NewClient(t)
	n, err := client.Do(ctx, client.B().Exists().Key(lim.Key("k")).Build()).AsInt64()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the bucket is in Redis again")
	assert.Equal(t, 1.0, value(t, m.redisUp))
	stop()
}

func TestRedisKilledFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	m := NewMetrics()
	lim := newRedis(t, srv, RedisOptions{Timeout: failTimeout, RetryInterval: 50 * time.Millisecond, Failure: FailClosed, Metrics: m})
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 100}
	d, err := lim.Allow(ctx, "k", l, 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	stop := traffic(t, lim, true)

	srv.Kill()
	for range 5 {
		timed(t, "Allow with Redis dead", func() { d, err = lim.Allow(ctx, "k", l, 1) })
		assert.ErrorIs(t, err, ErrUnavailable)
		assert.False(t, d.Allowed)
	}
	timed(t, "Adjust with Redis dead", func() { err = lim.Adjust(ctx, "k", l, -1) })
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.Positive(t, m.count(t, storeRedis, resultUnavailable))

	srv.Restart()
	require.Eventually(t, func() bool {
		d, err := lim.Allow(ctx, "k", l, 1)
		return err == nil && d.Allowed
	}, wait, 20*time.Millisecond)
	stop()
}

// luaBusy keeps Redis busy for ARGV[1] µs, as a stuck or overloaded server would be.
var luaBusy = rueidis.NewLuaScript(`
local s = redis.call('TIME')
local start = tonumber(s[1]) * 1000000 + tonumber(s[2])
while true do
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) - start > tonumber(ARGV[1]) then return 1 end
end`)

// A Redis that does not answer (here: busy with a long script) costs each decision at most the
// timeout; fail-open decides locally meanwhile and goes back to Redis when it answers again.
func TestRedisStuckFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	m := NewMetrics()
	lim := newRedis(t, srv, RedisOptions{Timeout: failTimeout, RetryInterval: 50 * time.Millisecond, Metrics: m})
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 1}
	d, err := lim.Allow(ctx, "k", l, 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	blocker, probe := srv.NewClient(t), srv.NewClient(t)
	blocked := make(chan error, 1)
	// 4 s: below Redis's busy-reply-threshold (5 s), after which it would answer BUSY errors.
	go func() { blocked <- luaBusy.Exec(ctx, blocker, nil, []string{"4000000"}).Error() }()
	require.Eventually(t, func() bool {
		// An idle Redis answers a PING well within 500 ms, even on a busy machine.
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return probe.Do(pctx, probe.B().Ping().Build()).Error() != nil
	}, wait, 10*time.Millisecond, "Redis busy")

	timed(t, "Allow with Redis stuck", func() { d, err = lim.Allow(ctx, "k", l, 1) })
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the fallback bucket decided (Redis's is empty)")
	assert.Positive(t, value(t, m.timeout), "counted as a timeout: %v / %v", value(t, m.timeout), value(t, m.failed))

	require.NoError(t, <-blocked)
	require.Eventually(t, func() bool {
		d, err := lim.Allow(ctx, "k", l, 1)
		return err == nil && m.count(t, storeRedis, resultDenied) > 0 && !d.Allowed
	}, wait, 20*time.Millisecond, "decisions go back to Redis, whose bucket is empty")
}

// A caller whose context ends gets its context's error, and Redis is not marked down for it.
func TestRedisCallerCanceled(t *testing.T) {
	srv := redistest.Start(t)
	lim := newRedis(t, srv, RedisOptions{Failure: FailClosed})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := lim.Allow(ctx, "k", Limit{Rate: 1, Burst: 1}, 1)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Zero(t, lim.downUntil.Load())
	d, err := lim.Allow(context.Background(), "k", Limit{Rate: 1, Burst: 1}, 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

// A key Redis refuses to use (another type under the bucket's name) gets the failure policy;
// the other keys still go to Redis.
func TestRedisErrorReply(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.NewClient(t)
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 1}
	for _, policy := range []FailurePolicy{FailOpen, FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			m := NewMetrics()
			lim := newRedis(t, srv, RedisOptions{Failure: policy, Metrics: m, Prefix: policy.String()})
			require.NoError(t, client.Do(ctx, client.B().Hset().Key(lim.Key("broken")).FieldValue().FieldValue("a", "b").Build()).Error())
			d, err := lim.Allow(ctx, "broken", l, 1)
			if policy == FailOpen {
				require.NoError(t, err)
				assert.True(t, d.Allowed, "decided by the fallback bucket")
				assert.Equal(t, 1.0, m.count(t, storeFallback, resultAllowed))
			} else {
				assert.ErrorIs(t, err, ErrUnavailable)
				assert.ErrorContains(t, err, "WRONGTYPE")
			}
			assert.Zero(t, lim.downUntil.Load(), "Redis answered: not down")
			assert.Equal(t, 1.0, value(t, m.failed))
			for range 2 {
				d, err = lim.Allow(ctx, "fine", l, 1)
				require.NoError(t, err)
			}
			assert.False(t, d.Allowed, "other keys are decided by Redis")
			assert.Equal(t, 1.0, m.count(t, storeRedis, resultDenied))
		})
	}
}

// TestRedisAllowAllWhenDown: a batch follows the failure policy like single decisions do.
func TestRedisAllowAllWhenDown(t *testing.T) {
	srv := redistest.Start(t)
	open := newRedis(t, srv, RedisOptions{Timeout: 100 * time.Millisecond})
	closed := newRedis(t, srv, RedisOptions{Timeout: 100 * time.Millisecond, Failure: FailClosed})
	l := Limit{Rate: slow, Burst: 2}
	reqs := []Request{{"down-a", l, 1}, {"down-b", l, 1}}
	srv.Kill()
	ctx := context.Background()
	for _, r := range open.AllowAll(ctx, reqs) {
		require.NoError(t, r.Err, "fail-open decides locally")
		assert.True(t, r.Decision.Allowed)
	}
	for _, r := range closed.AllowAll(ctx, reqs) {
		assert.ErrorIs(t, r.Err, ErrUnavailable)
	}
}

// scriptCalls returns how many times Redis ran a script (EVALSHA and EVAL) since the last
// CONFIG RESETSTAT.
func scriptCalls(t *testing.T, client rueidis.Client) int64 {
	t.Helper()
	info, err := client.Do(context.Background(), client.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	var n int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				c, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				n += c
			}
		}
	}
	return n
}

// Concurrent decisions share script calls, and each is still decided exactly once: every
// caller's bucket ends up short of exactly what it spent.
func TestRedisCoalesces(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.NewClient(t)
	lim := newRedis(t, srv, RedisOptions{})
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 1e6}
	const callers, each = 64, 50
	require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			key := "co" + strconv.Itoa(g)
			for i := range each {
				d, err := lim.Allow(ctx, key, l, float64(1+g%3))
				if !assert.NoError(t, err) || !assert.True(t, d.Allowed, "caller %d decision %d", g, i) {
					return
				}
			}
		})
	}
	wg.Wait()
	calls := scriptCalls(t, client)
	t.Logf("%d decisions in %d script calls", callers*each, calls)
	assert.Less(t, calls, int64(callers*each/4), "concurrent decisions share script calls")
	for g := range callers {
		d, err := lim.Allow(ctx, "co"+strconv.Itoa(g), l, 0)
		require.NoError(t, err)
		assert.InDelta(t, l.Burst-float64(each*(1+g%3)), d.Remaining, 1e-3, "caller %d", g)
	}
	assert.Zero(t, lim.downUntil.Load())
}

// One script call decides several buckets; an error reply for one bucket's key is that
// bucket's alone, and the others are decided by Redis in the same call.
func TestRedisBatchErrorIsPerBucket(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.NewClient(t)
	ctx := context.Background()
	lim := newRedis(t, srv, RedisOptions{Failure: FailClosed})
	_, err := lim.Allow(ctx, "load", Limit{Rate: 1, Burst: 1}, 0) // Redis learns the script
	require.NoError(t, err)
	require.NoError(t, client.Do(ctx, client.B().Hset().Key(lim.Key("broken")).FieldValue().FieldValue("a", "b").Build()).Error())
	l := Limit{Rate: slow, Burst: 2}
	require.NoError(t, client.Do(ctx, client.B().ConfigResetstat().Build()).Error())
	res := lim.AllowAll(ctx, []Request{{"ok-a", l, 1}, {"broken", l, 1}, {"ok-b", l, 2}, {"ok-a", l, 1}, {"ok-a", l, 1}})
	assert.EqualValues(t, 1, scriptCalls(t, client), "one script call")
	require.NoError(t, res[0].Err)
	assert.True(t, res[0].Decision.Allowed)
	assert.ErrorIs(t, res[1].Err, ErrUnavailable)
	assert.ErrorContains(t, res[1].Err, "WRONGTYPE")
	require.NoError(t, res[2].Err)
	assert.True(t, res[2].Decision.Allowed)
	assert.Zero(t, res[2].Decision.Remaining)
	// The same bucket twice in one call: decided in order.
	require.NoError(t, res[3].Err)
	assert.True(t, res[3].Decision.Allowed)
	assert.InDelta(t, 0, res[3].Decision.Remaining, 1e-3)
	require.NoError(t, res[4].Err)
	assert.False(t, res[4].Decision.Allowed)
	assert.Zero(t, lim.downUntil.Load(), "Redis answered: not down")
}

// A caller queued behind busy script calls whose context ends gets its context's error at
// once, spends nothing, and does not mark Redis down; the calls in flight complete.
func TestRedisQueuedCallerCanceled(t *testing.T) {
	srv := redistest.Start(t)
	lim := newRedis(t, srv, RedisOptions{Timeout: 5 * time.Second, Failure: FailClosed})
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 10}
	blocker, probe := srv.NewClient(t), srv.NewClient(t)
	blocked := make(chan error, 1)
	go func() { blocked <- luaBusy.Exec(ctx, blocker, nil, []string{"1500000"}).Error() }()
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return probe.Do(pctx, probe.B().Ping().Build()).Error() != nil
	}, wait, 10*time.Millisecond, "Redis busy")

	// Fill the script calls in flight; they wait for Redis.
	inFlight := make(chan error, maxInFlight)
	for i := range maxInFlight {
		go func() {
			_, err := lim.Allow(ctx, "busy"+strconv.Itoa(i), l, 1)
			inFlight <- err
		}()
	}
	require.Eventually(t, func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return lim.inFlight == maxInFlight
	}, wait, time.Millisecond)

	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := lim.Allow(cctx, "queued", l, 1)
	took := time.Since(start)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 500*time.Millisecond, "a queued caller leaves when its context ends")

	require.NoError(t, <-blocked)
	for range maxInFlight {
		require.NoError(t, <-inFlight)
	}
	assert.Zero(t, lim.downUntil.Load())
	d, err := lim.Allow(ctx, "queued", l, 0)
	require.NoError(t, err)
	assert.Equal(t, l.Burst, d.Remaining, "the canceled caller spent nothing")
}

// Decisions queued behind script calls that time out are not sent to Redis once it is marked
// down: they take the failure policy at once instead of waiting another Timeout.
func TestRedisQueuedWhenDown(t *testing.T) {
	srv := redistest.Start(t)
	m := NewMetrics()
	lim := newRedis(t, srv, RedisOptions{Timeout: 300 * time.Millisecond, RetryInterval: time.Hour, Metrics: m})
	ctx := context.Background()
	l := Limit{Rate: slow, Burst: 10}
	_, err := lim.Allow(ctx, "warm", l, 0) // Redis learns the script
	require.NoError(t, err)
	blocker, probe := srv.NewClient(t), srv.NewClient(t)
	blocked := make(chan error, 1)
	go func() { blocked <- luaBusy.Exec(ctx, blocker, nil, []string{"1500000"}).Error() }()
	require.Eventually(t, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		return probe.Do(pctx, probe.B().Ping().Build()).Error() != nil
	}, wait, 10*time.Millisecond, "Redis busy")

	results := make(chan error, maxInFlight+1)
	for i := range maxInFlight {
		go func() {
			_, err := lim.Allow(ctx, "busy"+strconv.Itoa(i), l, 1)
			results <- err
		}()
	}
	require.Eventually(t, func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return lim.inFlight == maxInFlight
	}, wait, time.Millisecond)
	go func() {
		_, err := lim.Allow(ctx, "queued", l, 1)
		results <- err
	}()
	for range maxInFlight + 1 {
		require.NoError(t, <-results, "fail-open decides")
	}
	assert.Equal(t, float64(maxInFlight), value(t, m.timeout), "only the calls in flight waited for Redis")
	assert.Equal(t, float64(maxInFlight+1), m.count(t, storeFallback, resultAllowed))
	require.NoError(t, <-blocked)
}
