package breaker

// For the external tests (package breaker_test), which run breakertest's suite: the internal
// tests' helpers.
var (
	NewFakeClock    = newFakeClock
	NewRedisBreaker = newRedisBreaker
)
