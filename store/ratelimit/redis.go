package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/redis/rueidis"
)

// Redis is the Limiter shared by every gateway replica using the same Redis and prefix.
//
// Each decision is made by a Lua script call (EVALSHA, falling back to EVAL when Redis does not
// have the script yet) that reads the clock with Redis TIME, so the replicas' clocks never
// matter. A bucket is one string key
//
//	<prefix>:{<key>}   value "<tokens> <µs of Redis TIME>", expiring when the bucket is full again
//
// The hash tag is the caller's key (up to its first "}", if it has one), so buckets spread over
// a Redis Cluster's slots. A full bucket has no key: the expiry (the time to refill to Burst
// plus a second) makes idle buckets vanish, and a refund that fills a bucket deletes it.
//
// Concurrent decisions are coalesced: while maxInFlight script calls are on their way, further
// decisions queue, and the queue goes out as ONE script call that decides each of its buckets
// in turn (all of them at the same Redis TIME), so under load many decisions share one command,
// one write and one reply. A decision made while the limiter is idle is sent at once. With a
// Redis Cluster client (whose script calls may only touch one slot) nothing is coalesced: each
// bucket is its own script call, auto-pipelined by rueidis.
//
// When a call fails or takes longer than Timeout, the failure policy decides (FailOpen: the
// fallback in-process buckets decide, so limits still hold per replica; FailClosed: ErrUnavailable).
// When Redis did not answer (connection lost, timeout) it is considered down: for RetryInterval
// every decision takes the policy's path at once without waiting on Redis, then one call at a
// time probes Redis again, and the first success sends decisions back to Redis. An error reply
// (say, a key of another type under a bucket's name) applies the policy to that bucket only.
//
// Every decision the policy makes instead of Redis is worth a warning, but one per request would
// flood the log during an outage: they go through a logthrottle.Throttle (one line per interval,
// with the count of decisions since the last one), and Redis coming back is logged only after
// an outage that was, so a flapping Redis costs one pair of lines per interval.
type Redis struct {
	client   rueidis.Client
	opts     RedisOptions
	prefix   string // "<prefix>:{"
	fallback *Local
	metrics  *Metrics
	warn     *logthrottle.Throttle
	// downLogged: a "redis failed" line was written since the last "redis is back" one.
	downLogged atomic.Bool

	downUntil atomic.Int64 // unix ns until which Redis is skipped; 0 while it is up
	probing   atomic.Bool  // a call is probing Redis while it is down

	coalesce bool // several buckets may share a script call (not with a Cluster client)
	mu       sync.Mutex
	inFlight int       // script calls on their way (at most maxInFlight)
	queue    []*waiter // decisions waiting for one of them to come back
}

const (
	// maxInFlight is how many coalesced script calls may be on their way at once: more than one,
	// so that Redis works on one while the next is being written and the last is being read.
	maxInFlight = 2
	// maxBatch bounds the buckets of one script call (a queue longer than that goes out in
	// several), so that no call keeps Redis busy for long.
	maxBatch = 128
)

// waiter is a queued decision (or AllowAll's batch of them) waiting for a script call.
type waiter struct {
	ctx   context.Context
	calls []call
	state atomic.Uint32 // waiting, then delivered (calls hold the results) or abandoned
	done  chan struct{} // receives once delivered
}

const (
	waiting uint32 = iota
	delivered
	abandoned
)

var waiters = sync.Pool{New: func() any { return &waiter{done: make(chan struct{}, 1)} }}

// FailurePolicy says what a Redis limiter does when Redis fails.
type FailurePolicy uint8

const (
	// FailOpen decides with in-process buckets (RedisOptions.Fallback) while Redis fails: each
	// replica enforces the limit on its own, so a key may get up to one limit per replica.
	FailOpen FailurePolicy = iota
	// FailClosed refuses every request with ErrUnavailable while Redis fails.
	FailClosed
)

// RedisOptions configures a Redis limiter.
type RedisOptions struct {
	// Prefix starts every key; default "infergate:rl". It may not contain "{" or "}".
	Prefix string
	// Timeout bounds each call to Redis, the script's retry after NOSCRIPT included; default
	// 50 ms. A slower answer counts as a failure.
	Timeout time.Duration
	// Failure is the policy while Redis fails; default FailOpen.
	Failure FailurePolicy
	// RetryInterval is how long Redis is left alone after a failure before a call probes it
	// again; default 250 ms.
	RetryInterval time.Duration
	// Fallback holds the buckets FailOpen decides with; default a new Local.
	Fallback *Local
	// Metrics, if set, counts decisions (store "redis" or "fallback"), Redis latency and errors.
	Metrics *Metrics
	// Logger reports Redis going down and coming back; default slog.Default().
	Logger *slog.Logger
	// Throttle writes the warnings that repeat on every decision while Redis fails or refuses
	// the script, at most once per its interval, with a count; default
	// logthrottle.New(Logger, logthrottle.DefaultInterval).
	Throttle *logthrottle.Throttle
}

// NewRedis returns a limiter over client. The client stays the caller's to close; keep its
// auto-pipelining on (the default) so concurrent decisions share round trips.
func NewRedis(client rueidis.Client, opts RedisOptions) (*Redis, error) {
	if opts.Prefix == "" {
		opts.Prefix = "infergate:rl"
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("ratelimit: prefix %q may not contain { or }: it would take the hash tag", opts.Prefix)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 50 * time.Millisecond
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 250 * time.Millisecond
	}
	if opts.Failure > FailClosed {
		return nil, fmt.Errorf("ratelimit: unknown failure policy %d", opts.Failure)
	}
	if opts.Fallback == nil {
		opts.Fallback = NewLocal(LocalOptions{})
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Throttle == nil {
		opts.Throttle = logthrottle.New(opts.Logger, logthrottle.DefaultInterval)
	}
	if opts.Metrics != nil {
		opts.Metrics.redis = true
	}
	return &Redis{
		client:   client,
		opts:     opts,
		prefix:   opts.Prefix + ":{",
		fallback: opts.Fallback,
		metrics:  opts.Metrics,
		warn:     opts.Throttle,
		coalesce: client != nil && client.Mode() != rueidis.ClientModeCluster,
	}, nil
}

// Key returns the Redis key of a bucket.
func (r *Redis) Key(key string) string { return r.prefix + key + "}" }

// luaClock sets now to Redis TIME in µs (exact in a double until the year 2255).
const luaClock = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// luaBucket is bucket.go's arithmetic, operation for operation (keep them in step), applied to
// each bucket of KEYS in turn at the same clock reading now. ARGV holds four values per bucket:
// rate, burst, amount, op ("t": take amount if available, "a": adjust by amount). Returns two
// values per bucket: allowed (0|1), or the error Redis answered for that bucket's key, and the
// tokens left ("%.17g", exact: Redis would truncate a Lua number reply to an integer).
// Numbers given to redis.call are written by Redis with "%.17g", which is exact for the
// integers here (ttl <= 1e15 and now < 2^53).
const luaBucket = `
local r, sfx = {}, ' ' .. string.format('%d', now)
for i = 1, #KEYS do
  local k, a = KEYS[i], 4 * i
  local rate, burst, n = tonumber(ARGV[a - 3]), tonumber(ARGV[a - 2]), tonumber(ARGV[a - 1])
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    r[2 * i - 1], r[2 * i] = v, ''
  else
    local tokens, ts = burst, now
    if v then
      local sp = string.find(v, ' ', 1, true)
      if sp then
        tokens = tonumber(string.sub(v, 1, sp - 1)) or burst
        ts = tonumber(string.sub(v, sp + 1)) or now
      end
    end
    if not (tokens >= 0) then tokens = 0 end
    if tokens > burst then tokens = burst end
    local e = now - ts
    if e > 0 then
      local x = tokens + e / 1000000 * rate
      if x < burst then tokens = x else tokens = burst end
    end
    local allowed, changed = 0, e < 0
    if ARGV[a] == 'a' then
      tokens = tokens - n
      if not (tokens >= 0) then tokens = 0 end
      if tokens > burst then tokens = burst end
      changed = true
    elseif n <= tokens then
      allowed = 1
      if n > 0 then
        tokens = tokens - n
        changed = true
      end
    end
    local tk = string.format('%.17g', tokens)
    r[2 * i - 1], r[2 * i] = allowed, tk
    if changed then
      local w
      if tokens >= burst then
        w = redis.pcall('DEL', k)
      else
        local ttl = math.ceil((burst - tokens) / rate * 1000) + 1000
        if not (ttl < 1e15) then ttl = 1e15 end
        w = redis.pcall('SET', k, tk .. sfx, 'PX', ttl)
      end
      if type(w) == 'table' and w.err then r[2 * i - 1] = w end
    end
  end
end
return r
`

var luaScript = rueidis.NewLuaScript(luaClock + luaBucket)

const (
	opTake   = "t"
	opAdjust = "a"
)

// errDown stands for the failure while Redis is skipped.
var errDown = errors.New("redis failed recently; retrying shortly")

// Allow implements Limiter.
func (r *Redis) Allow(ctx context.Context, key string, l Limit, cost float64) (Decision, error) {
	if err := validateCost(l, cost); err != nil {
		return Decision{}, err
	}
	tokens, allowed, err := r.do(ctx, key, l, cost, opTake)
	return r.decide(ctx, key, l, cost, tokens, allowed, err)
}

// AllowAll implements BatchLimiter: the buckets go to Redis together, in one script call (one
// round trip with a Cluster client).
func (r *Redis) AllowAll(ctx context.Context, reqs []Request) []Result {
	out := make([]Result, len(reqs))
	calls := make([]call, 0, len(reqs))
	idx := make([]int, 0, len(reqs))
	for i, q := range reqs {
		if err := validateCost(q.Limit, q.Cost); err != nil {
			out[i].Err = err
			continue
		}
		calls = append(calls, call{key: q.Key, l: q.Limit, n: q.Cost, op: opTake})
		idx = append(idx, i)
	}
	if len(calls) == 0 {
		return out
	}
	for j, c := range r.exec(ctx, calls) {
		out[idx[j]].Decision, out[idx[j]].Err = r.decide(ctx, c.key, c.l, c.n, c.tokens, c.allowed, c.err)
	}
	return out
}

// decide turns one script's outcome into a Decision, applying the failure policy to an error.
func (r *Redis) decide(ctx context.Context, key string, l Limit, cost, tokens float64, allowed bool, err error) (Decision, error) {
	if err != nil {
		if ctx.Err() != nil {
			return Decision{}, fmt.Errorf("ratelimit: %w", err)
		}
		r.warnFailed(err)
		if r.opts.Failure == FailClosed {
			r.metrics.unavailable()
			return Decision{Limit: l}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		d := r.fallback.take(key, l, cost)
		r.metrics.decision(storeFallback, d)
		return d, nil
	}
	d := decision(l, cost, tokens, allowed)
	r.metrics.decision(storeRedis, d)
	return d, nil
}

// Adjust implements Limiter. While Redis fails, FailOpen adjusts the fallback bucket.
func (r *Redis) Adjust(ctx context.Context, key string, l Limit, delta float64) error {
	if err := validateDelta(l, delta); err != nil {
		return err
	}
	_, _, err := r.do(ctx, key, l, delta, opAdjust)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("ratelimit: %w", err)
		}
		r.warnFailed(err)
		if r.opts.Failure == FailClosed {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		r.fallback.adjust(key, l, delta)
	}
	return nil
}

// The throttled warnings' keys, which are also their messages.
const (
	warnFailed  = "ratelimit: redis failed; applying the failure policy"
	warnRefused = "ratelimit: redis refused the script; applying the failure policy to the bucket"
)

// warnFailed reports a decision or adjustment the failure policy made because Redis did not
// answer: the first at once, then one line per interval counting the others. An error Redis
// answered is run's to report, with the bucket's key.
func (r *Redis) warnFailed(err error) {
	if isReply(err) {
		return
	}
	if r.warn.Warn(warnFailed, warnFailed, "policy", r.opts.Failure.String(), "retry_in", r.opts.RetryInterval, "err", err) {
		r.downLogged.Store(true)
	}
}

// do runs the script for one bucket; see exec.
func (r *Redis) do(ctx context.Context, key string, l Limit, n float64, op string) (float64, bool, error) {
	out := r.exec(ctx, []call{{key: key, l: l, n: n, op: op}})
	return out[0].tokens, out[0].allowed, out[0].err
}

// call is one bucket's script run: a bucket and what to do to it.
type call struct {
	key     string
	l       Limit
	n       float64
	op      string
	tokens  float64
	allowed bool
	err     error
}

// exec decides calls on Redis, unless Redis is down, and returns them with their results (each
// its own result or error). While the limiter is idle (fewer than maxInFlight script calls on
// their way) the calls go out at once, in one script call; otherwise they queue, and the first
// script call to come back sends the queue. A queued call thus waits for at most one script
// call before its own (each bounded by Timeout), and for none when that one failed.
func (r *Redis) exec(ctx context.Context, calls []call) []call {
	if until := r.downUntil.Load(); until != 0 {
		if time.Now().UnixNano() < until || !r.probing.CompareAndSwap(false, true) {
			for i := range calls {
				calls[i].err = errDown
			}
			return calls
		}
		defer r.probing.Store(false)
		r.run(ctx, calls, true)
		return calls
	}
	if err := ctx.Err(); err != nil {
		for i := range calls {
			calls[i].err = err
		}
		return calls
	}
	if !r.coalesce {
		r.run(ctx, calls, false)
		return calls
	}
	r.mu.Lock()
	if r.inFlight < maxInFlight {
		r.inFlight++
		r.mu.Unlock()
		r.run(ctx, calls, false)
		if batch := r.next(); batch != nil {
			go r.drain(batch)
		}
		return calls
	}
	w := waiters.Get().(*waiter)
	w.ctx, w.calls = ctx, calls
	w.state.Store(waiting)
	r.queue = append(r.queue, w)
	r.mu.Unlock()
	select {
	case <-w.done:
	case <-ctx.Done():
		if w.state.CompareAndSwap(waiting, abandoned) {
			// The queue still holds w (and reads its calls): answer from a copy, and leave w
			// to the garbage collector.
			out := slices.Clone(calls)
			for i := range out {
				out[i].err = ctx.Err()
			}
			return out
		}
		<-w.done // being delivered
	}
	w.ctx, w.calls = nil, nil
	waiters.Put(w)
	return calls
}

// next is called when a script call came back: it returns the queued waiters the caller is to
// send next (keeping its place in flight), or nil when the queue is empty (giving its place
// up).
func (r *Redis) next() []*waiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		r.inFlight--
		return nil
	}
	n, i := 0, 0
	for i < len(r.queue) && (i == 0 || n+len(r.queue[i].calls) <= maxBatch) {
		n += len(r.queue[i].calls)
		i++
	}
	batch := slices.Clone(r.queue[:i])
	clear(r.queue[:i])
	if r.queue = r.queue[i:]; len(r.queue) == 0 {
		r.queue = r.queue[:0:0]
	}
	return batch
}

// drain sends queued waiters, one script call per batch, until the queue is empty.
func (r *Redis) drain(batch []*waiter) {
	for ; batch != nil; batch = r.next() {
		// Redis went down while they waited (the calls before them failed): they take the
		// failure policy now rather than wait for Redis again. Probes are left to new calls.
		down := r.downUntil.Load() != 0
		calls := make([]call, 0, maxBatch)
		sent := batch[:0]
		for _, w := range batch {
			err := w.ctx.Err() // the caller is gone: spend nothing for it
			if err == nil && down {
				err = errDown
			}
			if err != nil {
				if w.state.CompareAndSwap(waiting, delivered) {
					for i := range w.calls {
						w.calls[i].err = err
					}
					w.done <- struct{}{}
				}
				continue
			}
			calls = append(calls, w.calls...)
			sent = append(sent, w)
		}
		if len(calls) > 0 {
			// The batch is nobody's in particular: its callers' contexts are checked above and
			// while they wait; Timeout bounds it.
			r.run(context.Background(), calls, false)
		}
		for _, w := range sent {
			n := len(w.calls)
			if w.state.CompareAndSwap(waiting, delivered) {
				copy(w.calls, calls[:n])
				w.done <- struct{}{}
			}
			calls = calls[n:]
		}
	}
}

// run decides calls on Redis: in one script call (several with a Cluster client, pipelined in
// one round trip), and tracks Redis going down and coming back. probe says Redis was down.
func (r *Redis) run(ctx context.Context, calls []call, probe bool) {
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	start := time.Now()
	switch {
	case len(calls) == 1 || r.coalesce:
		keys, args := make([]string, len(calls)), make([]string, 0, 4*len(calls))
		for i, c := range calls {
			keys[i] = r.Key(c.key)
			args = append(args, formatFloat(c.l.Rate), formatFloat(c.l.Burst), formatFloat(c.n), c.op)
		}
		parseReplies(luaScript.Exec(cctx, r.client, keys, args), calls)
	default:
		execs := make([]rueidis.LuaExec, len(calls))
		for i, c := range calls {
			execs[i] = rueidis.LuaExec{Keys: []string{r.Key(c.key)}, Args: []string{
				formatFloat(c.l.Rate), formatFloat(c.l.Burst), formatFloat(c.n), c.op}}
		}
		for i, res := range luaScript.ExecMulti(cctx, r.client, execs...) {
			parseReplies(res, calls[i:i+1])
		}
	}
	var failed error // a failure that says Redis is unreachable, not a refused script
	timedOut := false
	for i := range calls {
		err := calls[i].err
		if err == nil || ctx.Err() != nil || isReply(err) {
			continue
		}
		// rueidis may report the deadline through the connection's, a moment before cctx's timer.
		if cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			timedOut = true
			err = fmt.Errorf("no answer within %v: %w", r.opts.Timeout, err)
			calls[i].err = err
		}
		failed = err
	}
	cancel()
	elapsed := time.Since(start)
	for i := range calls {
		r.metrics.redisCall(elapsed, calls[i].err, timedOut && calls[i].err != nil && !isReply(calls[i].err))
	}
	switch {
	case failed == nil && ctx.Err() == nil:
		if probe || r.downUntil.Load() != 0 {
			r.downUntil.Store(0)
			r.metrics.setRedisUp(true)
			if r.downLogged.Swap(false) {
				r.opts.Logger.Info("ratelimit: redis is back; decisions go to redis again")
			}
		}
		for i := range calls {
			if isReply(calls[i].err) {
				// Redis answered with an error (a key of another type under our name, out of
				// memory): the policy decides this call, but Redis is reachable, so others
				// still go to it. It may repeat on every call: throttled.
				r.warn.Warn(warnRefused, warnRefused, "key", r.Key(calls[i].key), "policy", r.opts.Failure.String(), "err", calls[i].err)
			}
		}
	case failed != nil && ctx.Err() == nil:
		// Reported by the decisions the policy makes (warnFailed), one line per interval.
		if r.downUntil.Swap(time.Now().Add(r.opts.RetryInterval).UnixNano()) == 0 {
			r.metrics.setRedisUp(false)
		}
	}
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// isReply reports an error Redis answered, as opposed to no answer.
func isReply(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && re != rueidis.Nil
}

// parseReply reads the script's reply for one bucket.
func parseReply(res rueidis.RedisResult) (tokens float64, allowed bool, err error) {
	var c [1]call
	parseReplies(res, c[:])
	return c[0].tokens, c[0].allowed, c[0].err
}

// parseReplies reads the script's reply into calls, one pair of values per bucket. An error
// for the whole call is every bucket's; an error Redis answered for one bucket's key is that
// bucket's.
func parseReplies(res rueidis.RedisResult, calls []call) {
	vals, err := res.ToArray()
	if err == nil && len(vals) != 2*len(calls) {
		err = fmt.Errorf("%d values in reply, want %d", len(vals), 2*len(calls))
	}
	if err != nil {
		for i := range calls {
			calls[i].err = fmt.Errorf("ratelimit script: %w", err)
		}
		return
	}
	for i := range calls {
		c := &calls[i]
		a, err := vals[2*i].AsInt64()
		if err != nil {
			c.err = fmt.Errorf("ratelimit script: allowed: %w", err)
			continue
		}
		s, err := vals[2*i+1].ToString()
		if err != nil {
			c.err = fmt.Errorf("ratelimit script: tokens: %w", err)
			continue
		}
		if c.tokens, err = strconv.ParseFloat(s, 64); err != nil {
			c.err = fmt.Errorf("ratelimit script: tokens: %w", err)
			continue
		}
		c.allowed = a == 1
	}
}

// String returns "fail-open" or "fail-closed".
func (p FailurePolicy) String() string {
	if p == FailClosed {
		return "fail-closed"
	}
	return "fail-open"
}
