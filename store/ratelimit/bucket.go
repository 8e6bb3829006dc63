package ratelimit

import "math"

// The bucket arithmetic. Local runs these functions; the Lua script in redis.go performs the
// same operations in the same order on the same IEEE doubles, so both give bit-identical tokens
// for the same inputs (fuzz_test.go checks it). Time is in whole microseconds held in a float64:
// exact up to 2^53 µs (285 years), so Redis TIME (µs since 1970) fits without rounding.

// bucket is a stored bucket: it held tokens at time ts (µs). A missing bucket is full.
type bucket struct {
	tokens float64
	ts     float64
}

// level returns the tokens in b at now. Stored values out of range (which only a corrupted
// store holds) are clamped; elapsed time refills at l.Rate up to l.Burst; a clock that went
// backwards refills nothing. The refill is computed so that it cannot yield NaN: e, l.Rate
// and the tokens are finite and e > 0, so the sum is at worst +Inf, which the clamp turns
// into Burst.
func level(b bucket, now float64, l Limit) float64 {
	t := clamp(b.tokens, l.Burst)
	if e := now - b.ts; e > 0 {
		// The conversion keeps the compiler from fusing into an FMA, which Lua does not do.
		r := t + float64(e/1e6*l.Rate)
		if r < l.Burst {
			t = r
		} else {
			t = l.Burst
		}
	}
	return t
}

// clamp limits t to [0, burst]; NaN becomes 0.
func clamp(t, burst float64) float64 {
	if !(t >= 0) {
		return 0
	}
	if t > burst {
		return burst
	}
	return t
}

// take spends cost tokens from b at now if it holds them. It returns the tokens left, whether
// the request is allowed, and whether the bucket must be stored: when tokens were spent, and
// when the clock went backwards, so that refill resumes from the new reading instead of waiting
// for the clock to pass the old one again (an empty bucket would be refused until then).
// Otherwise the stored state stays as it was, which is exact: level depends only on it and now.
func take(b bucket, now float64, l Limit, cost float64) (tokens float64, allowed, changed bool) {
	tokens = level(b, now, l)
	changed = now < b.ts
	if cost <= tokens {
		allowed = true
		if cost > 0 {
			tokens -= cost
			changed = true
		}
	}
	return tokens, allowed, changed
}

// adjust applies delta (a charge if positive, a refund if negative) to b at now and returns
// the tokens left, clamped to [0, Burst].
func adjust(b bucket, now float64, l Limit, delta float64) float64 {
	return clamp(level(b, now, l)-delta, l.Burst)
}

// maxTTLms bounds a stored bucket's expiry (about 31,700 years, far beyond any clock reading a
// process sees, yet a valid PEXPIRE): a bucket that would take longer to refill is forgotten
// (full) then.
const maxTTLms = 1e15

// ttlMillis is how long a bucket holding tokens must be kept: the time it takes to refill to
// Burst, rounded up to the millisecond, plus a second of margin. After that, a missing bucket
// (full) is what it would hold anyway.
func ttlMillis(tokens float64, l Limit) float64 {
	ms := math.Ceil((l.Burst-tokens)/l.Rate*1000) + 1000
	if !(ms < maxTTLms) {
		return maxTTLms
	}
	return ms
}
