// Package ratelimit is the guard's token bucket rate limiter: one Limiter interface with an
// in-process implementation (Local) and a shared one in Redis (Redis), tested by the same
// contract test suite (package ratelimittest, which a new implementation runs too).
//
// A bucket holds up to Limit.Burst tokens and refills at Limit.Rate tokens per second. Allow
// spends cost tokens if the bucket holds them, all or nothing; Adjust corrects an earlier charge.
// Two kinds of limits use it:
//
//   - request limits: every request costs 1 (AllowRequest);
//   - token limits: a request is admitted against an estimate of its tokens (ReserveTokens, with
//     EstimateTokens as a rough estimator), and once the upstream reports its usage the
//     reservation is settled with the actual count (Reservation.Settle), which refunds or charges
//     the difference.
//
// Buckets are named by a caller-built key (for example "key:<hash of API key>:model:<m>:tokens");
// the same key must always come with the same Limit, or the bucket is read with the new one.
//
// Arithmetic guarantees, whatever the inputs that pass validation and whatever the clock does:
// tokens stay within [0, Burst], never NaN or infinite; a clock going backwards refills nothing
// (and is never held against the bucket: refill resumes from the new reading); a clock jumping
// forwards refills at most to Burst; a cost larger than Burst is refused at once with
// Decision.TooLarge (it would never fit, so there is no RetryAfter to wait for).
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Limiter decides whether a request may proceed. Implementations are safe for concurrent use.
type Limiter interface {
	// Allow spends cost tokens from key's bucket if it holds them (all or nothing) and reports
	// the bucket's state. A cost of 0 only reads the state. An error means no decision was made:
	// ErrInvalid for a bad Limit or cost, ErrUnavailable when a shared store failed and the
	// policy is to fail closed (map it to 503 / UNAVAILABLE), or the caller's context error.
	Allow(ctx context.Context, key string, l Limit, cost float64) (Decision, error)
	// Adjust changes key's bucket by delta tokens after the fact: a negative delta refunds, a
	// positive one charges. The result is clamped to [0, Burst]: a charge beyond what the bucket
	// holds empties it (the debt is not carried), a refund beyond Burst fills it.
	Adjust(ctx context.Context, key string, l Limit, delta float64) error
}

var (
	_ Limiter      = (*Local)(nil)
	_ BatchLimiter = (*Local)(nil)
	_ Limiter      = (*Redis)(nil)
	_ BatchLimiter = (*Redis)(nil)
)

// BatchLimiter decides several buckets at once: with Redis, in one round trip. Each bucket is
// decided as Allow would; the caller sees every result and refunds what it does not use.
type BatchLimiter interface {
	Limiter
	AllowAll(ctx context.Context, reqs []Request) []Result
}

// Request is one bucket of a batch: what Allow takes.
type Request struct {
	Key   string
	Limit Limit
	Cost  float64
}

// Result is one bucket's outcome in a batch: what Allow returns.
type Result struct {
	Decision Decision
	Err      error
}

// Limit is a token bucket's shape.
type Limit struct {
	// Rate is how many tokens the bucket regains per second; finite and > 0.
	Rate float64
	// Burst is the bucket's capacity, and so the most a burst of requests can spend at once;
	// finite and > 0. A new (or idle long enough) bucket is full.
	Burst float64
}

// PerMinute is a Limit of n tokens per minute with a burst of n: the usual shape of "RPM" and
// "TPM" limits.
func PerMinute(n float64) Limit { return Limit{Rate: n / 60, Burst: n} }

// Decision is the outcome of Allow.
type Decision struct {
	// Allowed reports whether cost tokens were spent and the request may proceed.
	Allowed bool
	// TooLarge reports a cost above Limit.Burst: it can never be allowed, however long the
	// caller waits, so RetryAfter is 0. Map it to a 4xx that says the request is too large for
	// the limit (OpenAI answers 429 with a message; 413 also fits), not to "retry later".
	TooLarge bool
	// Remaining is the tokens left in the bucket after this decision, in [0, Limit.Burst].
	Remaining float64
	// RetryAfter, when the request was refused and is not TooLarge, is how long until the
	// bucket holds cost tokens (if nobody else spends them meanwhile); > 0. 0 when allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
	// Limit is the Limit the decision was made with.
	Limit Limit
}

// SetHeaders writes the decision as X-RateLimit-Limit (Burst), X-RateLimit-Remaining (whole
// tokens left), X-RateLimit-Reset (seconds until the bucket is full again, rounded up) and,
// when refused and not TooLarge, Retry-After (seconds, rounded up, at least 1).
func (d Decision) SetHeaders(h http.Header) {
	h.Set("X-RateLimit-Limit", strconv.FormatFloat(math.Floor(d.Limit.Burst), 'f', 0, 64))
	h.Set("X-RateLimit-Remaining", strconv.FormatFloat(math.Floor(d.Remaining), 'f', 0, 64))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(d.ResetAfter), 10))
	if !d.Allowed && !d.TooLarge {
		h.Set("Retry-After", strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10))
	}
}

func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

var (
	// ErrInvalid is returned for a Limit, cost or delta that is not a finite number in range.
	ErrInvalid = errors.New("ratelimit: invalid limit or cost")
	// ErrUnavailable is returned when the shared store failed and the policy is FailClosed.
	ErrUnavailable = errors.New("ratelimit: limiter unavailable")
)

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func (l Limit) validate() error {
	if !finite(l.Rate) || l.Rate <= 0 || !finite(l.Burst) || l.Burst <= 0 {
		return fmt.Errorf("%w: rate %v and burst %v must be finite and > 0", ErrInvalid, l.Rate, l.Burst)
	}
	return nil
}

func validateCost(l Limit, cost float64) error {
	if err := l.validate(); err != nil {
		return err
	}
	if !finite(cost) || cost < 0 {
		return fmt.Errorf("%w: cost %v must be finite and >= 0", ErrInvalid, cost)
	}
	return nil
}

func validateDelta(l Limit, delta float64) error {
	if err := l.validate(); err != nil {
		return err
	}
	if !finite(delta) {
		return fmt.Errorf("%w: delta %v must be finite", ErrInvalid, delta)
	}
	return nil
}

// decision builds the Decision for a bucket left holding tokens after a request of cost.
func decision(l Limit, cost, tokens float64, allowed bool) Decision {
	d := Decision{
		Allowed:    allowed,
		Remaining:  tokens,
		ResetAfter: seconds((l.Burst - tokens) / l.Rate),
		Limit:      l,
	}
	if !allowed {
		if cost > l.Burst {
			d.TooLarge = true
		} else {
			// At least 1 ns: a refused request always has something to wait for, even when
			// the shortfall over the rate underflows.
			d.RetryAfter = max(seconds((cost-tokens)/l.Rate), 1)
		}
	}
	return d
}

// seconds converts to a Duration rounded up to the nanosecond (waiting that long suffices),
// saturating instead of overflowing.
func seconds(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	ns := math.Ceil(s * 1e9)
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// AllowRequest admits one request against a request-count limit: a cost of 1.
func AllowRequest(ctx context.Context, lim Limiter, key string, l Limit) (Decision, error) {
	return lim.Allow(ctx, key, l, 1)
}

// Reservation is a token estimate admitted by ReserveTokens, to settle once the actual usage is
// known. The zero Reservation (from a refused or failed request) settles to nothing.
type Reservation struct {
	lim      Limiter
	key      string
	limit    Limit
	estimate float64
}

// ReserveTokens admits a request against a token limit by spending estimate tokens now. When it
// is allowed, settle the returned Reservation with the usage the upstream reports; when the
// response never comes (upstream error, client gone), settle with what was generated, 0 if
// nothing.
func ReserveTokens(ctx context.Context, lim Limiter, key string, l Limit, estimate float64) (Decision, Reservation, error) {
	d, err := lim.Allow(ctx, key, l, estimate)
	if err != nil || !d.Allowed {
		return d, Reservation{}, err
	}
	return d, Reservation{lim: lim, key: key, limit: l, estimate: estimate}, nil
}

// Settle charges actual - estimate: a refund when the request used fewer tokens than estimated,
// a further charge when it used more (emptying the bucket at most, see Limiter.Adjust). It runs
// after the response, usually when the request's context is done: pass a context that is not
// (context.WithoutCancel).
func (r Reservation) Settle(ctx context.Context, actual float64) error {
	if r.lim == nil {
		return nil
	}
	delta := actual - r.estimate
	if delta == 0 {
		return nil
	}
	return r.lim.Adjust(ctx, r.key, r.limit, delta)
}

// Estimate is the number of tokens the reservation spent.
func (r Reservation) Estimate() float64 { return r.estimate }

// EstimateTokens is a rough estimate of a completion request's tokens before it runs: about 4
// bytes of prompt text per token, plus the most the request may generate (its max_tokens or
// max_completion_tokens, or the deployment's default when it gives none). It errs high, which
// Settle refunds.
func EstimateTokens(promptBytes, maxTokens int) float64 {
	return math.Ceil(float64(max(promptBytes, 0))/4) + float64(max(maxTokens, 0))
}

// Reserved is the Reservation of estimate tokens already spent from key's bucket (by Allow or
// AllowAll), to settle once the actual usage is known.
func Reserved(lim Limiter, key string, l Limit, estimate float64) Reservation {
	return Reservation{lim: lim, key: key, limit: l, estimate: estimate}
}
