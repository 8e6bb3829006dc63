package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Redis is the Limiter shared by every gateway replica using the same Redis and prefix.
//
// Each decision is one Lua script call (EVALSHA, falling back to EVAL when Redis does not have
// the script yet, auto-pipelined with concurrent calls by rueidis) that reads the clock with
// Redis TIME, so the replicas' clocks never matter. A bucket is one string key
//
//	<prefix>:{<key>}   value "<tokens> <µs of Redis TIME>", expiring when the bucket is full again
//
// The hash tag is the caller's key (up to its first "}", if it has one), so buckets spread over
// a Redis Cluster's slots; a script touches one key, so it is Cluster safe. A full bucket has
// no key: the expiry (PEXPIRE, time to refill to Burst plus a second) makes idle buckets vanish,
// and a refund that fills a bucket deletes it.
//
// When a call fails or takes longer than Timeout, the failure policy decides (FailOpen: the
// fallback in-process buckets decide, so limits still hold per replica; FailClosed: ErrUnavailable).
// When Redis did not answer (connection lost, timeout) it is considered down: for RetryInterval
// every decision takes the policy's path at once without waiting on Redis, then one call at a
// time probes Redis again, and the first success sends decisions back to Redis. An error reply
// (say, a key of another type under a bucket's name) applies the policy to that call only.
type Redis struct {
	client   rueidis.Client
	opts     RedisOptions
	prefix   string // "<prefix>:{"
	fallback *Local
	metrics  *Metrics

	downUntil atomic.Int64 // unix ns until which Redis is skipped; 0 while it is up
	probing   atomic.Bool  // a call is probing Redis while it is down
}

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
	return &Redis{
		client:   client,
		opts:     opts,
		prefix:   opts.Prefix + ":{",
		fallback: opts.Fallback,
		metrics:  opts.Metrics,
	}, nil
}

// Key returns the Redis key of a bucket.
func (r *Redis) Key(key string) string { return r.prefix + key + "}" }

// luaClock sets now to Redis TIME in µs (exact in a double until the year 2255).
const luaClock = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// luaBucket is bucket.go's arithmetic, operation for operation (keep them in step).
// KEYS[1]: the bucket. ARGV: rate, burst, amount, op ("t": take amount if available, "a":
// adjust by amount). Returns {allowed (0|1), tokens left ("%.17g", exact)}: Redis would
// truncate a Lua number reply to an integer.
const luaBucket = `
local rate, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens, ts = burst, now
local v = redis.call('GET', KEYS[1])
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
  local r = tokens + e / 1000000 * rate
  if r < burst then tokens = r else tokens = burst end
end
local allowed, changed = 0, e < 0
if ARGV[4] == 'a' then
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
if changed then
  if tokens >= burst then
    redis.call('DEL', KEYS[1])
  else
    local ttl = math.ceil((burst - tokens) / rate * 1000) + 1000
    if not (ttl < 1e15) then ttl = 1e15 end
    redis.call('SET', KEYS[1], tk .. ' ' .. string.format('%d', now), 'PX', string.format('%d', ttl))
  end
end
return {allowed, tk}
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

// AllowAll implements BatchLimiter: every bucket's script in one round trip.
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
		if r.opts.Failure == FailClosed {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		r.fallback.adjust(key, l, delta)
	}
	return nil
}

// do runs the script for one bucket; see exec.
func (r *Redis) do(ctx context.Context, key string, l Limit, n float64, op string) (float64, bool, error) {
	out := r.exec(ctx, []call{{key: key, l: l, n: n, op: op}})
	return out[0].tokens, out[0].allowed, out[0].err
}

// call is one script run: a bucket and what to do to it.
type call struct {
	key     string
	l       Limit
	n       float64
	op      string
	tokens  float64
	allowed bool
	err     error
}

// exec runs the script once per call, all in one round trip (pipelined), unless Redis is down,
// and tracks Redis going down and coming back. Each call gets its own result or error.
func (r *Redis) exec(ctx context.Context, calls []call) []call {
	probe := false
	if until := r.downUntil.Load(); until != 0 {
		if time.Now().UnixNano() < until || !r.probing.CompareAndSwap(false, true) {
			for i := range calls {
				calls[i].err = errDown
			}
			return calls
		}
		probe = true
		defer r.probing.Store(false)
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	start := time.Now()
	execs := make([]rueidis.LuaExec, len(calls))
	for i, c := range calls {
		execs[i] = rueidis.LuaExec{Keys: []string{r.Key(c.key)}, Args: []string{
			strconv.FormatFloat(c.l.Rate, 'g', -1, 64),
			strconv.FormatFloat(c.l.Burst, 'g', -1, 64),
			strconv.FormatFloat(c.n, 'g', -1, 64),
			c.op,
		}}
	}
	var res []rueidis.RedisResult
	if len(execs) == 1 {
		res = []rueidis.RedisResult{luaScript.Exec(cctx, r.client, execs[0].Keys, execs[0].Args)}
	} else {
		res = luaScript.ExecMulti(cctx, r.client, execs...)
	}
	var failed error // a failure that says Redis is unreachable, not a refused script
	timedOut := false
	for i := range calls {
		calls[i].tokens, calls[i].allowed, calls[i].err = parseReply(res[i])
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
			r.opts.Logger.Info("ratelimit: redis is back; decisions go to redis again")
		}
		for i := range calls {
			if isReply(calls[i].err) {
				// Redis answered with an error (a key of another type under our name, out of
				// memory): the policy decides this call, but Redis is reachable, so others
				// still go to it. Counted in the errors metric; logged at debug level, as it may
				// repeat on every call.
				r.opts.Logger.Debug("ratelimit: redis refused the script", "key", r.Key(calls[i].key), "err", calls[i].err)
			}
		}
	case failed != nil && ctx.Err() == nil:
		if r.downUntil.Swap(time.Now().Add(r.opts.RetryInterval).UnixNano()) == 0 {
			r.metrics.setRedisUp(false)
			r.opts.Logger.Warn("ratelimit: redis failed; applying the failure policy", "policy", r.opts.Failure.String(), "retry_in", r.opts.RetryInterval, "err", failed)
		}
	}
	return calls
}

// isReply reports an error Redis answered, as opposed to no answer.
func isReply(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && re != rueidis.Nil
}

func parseReply(res rueidis.RedisResult) (tokens float64, allowed bool, err error) {
	vals, err := res.ToArray()
	if err != nil {
		return 0, false, fmt.Errorf("ratelimit script: %w", err)
	}
	if len(vals) != 2 {
		return 0, false, fmt.Errorf("ratelimit script: %d values in reply, want 2", len(vals))
	}
	a, err := vals[0].AsInt64()
	if err != nil {
		return 0, false, fmt.Errorf("ratelimit script: allowed: %w", err)
	}
	s, err := vals[1].ToString()
	if err != nil {
		return 0, false, fmt.Errorf("ratelimit script: tokens: %w", err)
	}
	if tokens, err = strconv.ParseFloat(s, 64); err != nil {
		return 0, false, fmt.Errorf("ratelimit script: tokens: %w", err)
	}
	return tokens, a == 1, nil
}

// String returns "fail-open" or "fail-closed".
func (p FailurePolicy) String() string {
	if p == FailClosed {
		return "fail-closed"
	}
	return "fail-open"
}
