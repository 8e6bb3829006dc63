package ratelimit

// For the external tests (package ratelimit_test), which run ratelimittest's suite: the internal
// tests' helpers, and a Redis limiter that coalesces nothing, as with a Redis Cluster client.
var (
	NewFakeClock = newFakeClock
	NewTestRedis = newRedis
)

// SetCoalesce turns the coalescing of several buckets into one script call on or off.
func (r *Redis) SetCoalesce(on bool) { r.coalesce = on }
