// Package breaker is the guard's circuit breaker per upstream endpoint: a state machine
// closed -> open -> half-open -> closed that stops sending requests to an endpoint that keeps
// failing, lets a bounded number of probes through once a timeout has passed, and closes again
// when they succeed.
//
// A caller asks before each call to an endpoint and reports the outcome after:
//
//	t, err := b.Allow(ctx, "vllm-a")
//	if err != nil { // errors.Is(err, breaker.ErrOpen): pick another endpoint
//		...
//	}
//	resp, err := send(...)
//	t.Done(breaker.Classify(status, err)) // or Success / Failure / Throttled / Ignored
//
// Two implementations share the semantics below and one contract test suite (package
// breakertest, which a new implementation runs too): Local (in-process, the default) and Redis
// (state shared by every gateway replica using the same Redis).
//
// Semantics (close to sony/gobreaker's, plus an error-rate rule and a 429 cooldown):
//   - Closed: every request is admitted. The breaker trips (goes Open) after
//     ConsecutiveFailures failures in a row, or when, counting a failure, at least MinRequests
//     outcomes were counted over the last Window and the share of failures reached ErrorRate.
//     Ignored and Throttled outcomes neither count nor break a run of failures.
//   - Open: every request is refused with an *OpenError (errors.Is ErrOpen) carrying RetryAfter,
//     until OpenTimeout has passed; then the breaker is HalfOpen.
//   - HalfOpen: at most HalfOpenProbes requests (probes) are admitted in one round. A probe that
//     fails reopens the breaker; SuccessesToClose probe successes close it. A probe reported as
//     Ignored or Throttled gives its slot back. A round that is not decided within OpenTimeout
//     (a probe never reported: its caller or replica died) starts a new round.
//   - Throttled (HTTP 429 from the upstream) is not a failure: it starts a cooldown during which
//     Allow refuses the endpoint (OpenError.Throttled) without changing its state.
//   - Outcomes of requests admitted before the latest transition are not counted: a success
//     that was in flight when the breaker opened does not close it.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Breaker guards calls to upstream endpoints, named by the caller.
type Breaker interface {
	// Allow reports whether a request may be sent to endpoint now. When it may, the returned
	// Ticket's Done must be called exactly once with the outcome. When it may not, the error is
	// an *OpenError (errors.Is(err, ErrOpen)).
	Allow(ctx context.Context, endpoint string) (Ticket, error)
	// State is the endpoint's state as this process knows it. It reports HalfOpen as soon as the
	// open timeout has passed, so a router that skips Open endpoints still sends the probes.
	State(endpoint string) State
	// RetryAfter is how long, as this process knows, until endpoint may admit a request again:
	// for an open endpoint, until its first half-open probe; for one cooling down after a 429,
	// until the cooldown ends; for a half-open round whose probes are all out, until the round
	// times out; zero when Allow may admit now. A router that found every endpoint cut off
	// tells its client when to retry with it (Retry-After), without asking Allow for a ticket.
	RetryAfter(endpoint string) time.Duration
}

// State of an endpoint's breaker. The values are part of the Redis layout and the metrics.
type State uint8

// The states.
const (
	Closed   State = 0
	Open     State = 1
	HalfOpen State = 2
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Outcome of a call admitted by Allow.
type Outcome uint8

// The outcomes.
const (
	// Success: the upstream answered (2xx, 3xx, or a 4xx caused by the request itself, which
	// says the upstream works).
	Success Outcome = iota
	// Failure: connection error, timeout, or 5xx.
	Failure
	// Throttled: 429. Starts the cooldown instead of counting as a failure.
	Throttled
	// Ignored: says nothing about the upstream (the client cancelled, the request was invalid
	// before it was sent). Not counted; a probe gives its slot back.
	Ignored
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Throttled:
		return "throttled"
	case Ignored:
		return "ignored"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Classify maps an HTTP status (0 when no response arrived) and the call's error to an
// outcome: a context cancellation is Ignored (the client went away), other errors and 5xx are
// Failure, 429 is Throttled, anything else Success.
func Classify(status int, err error) Outcome {
	switch {
	case errors.Is(err, context.Canceled):
		return Ignored
	case err != nil:
		return Failure
	case status == 429:
		return Throttled
	case status >= 500:
		return Failure
	}
	return Success
}

// ErrOpen is matched (errors.Is) by every refusal.
var ErrOpen = errors.New("circuit breaker open")

// OpenError is Allow's refusal.
type OpenError struct {
	Endpoint string
	// State is the endpoint's state: Open, HalfOpen (all probes of the round are out), or Closed
	// with Throttled set.
	State State
	// Throttled is set when the endpoint is cooling down after a 429.
	Throttled bool
	// RetryAfter is how long until the endpoint may admit a request again (an estimate for a
	// half-open round: when it times out).
	RetryAfter time.Duration
}

func (e *OpenError) Error() string {
	why := "circuit breaker " + e.State.String()
	if e.Throttled {
		why = "cooling down after 429"
	}
	return fmt.Sprintf("endpoint %q refused: %s, retry after %s", e.Endpoint, why, e.RetryAfter)
}

// Is makes errors.Is(err, ErrOpen) true.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// Ticket is one admitted request. Its zero value's Done does nothing.
type Ticket struct {
	rec   recorder
	gen   uint64
	probe bool
}

// recorder is the implementation's endpoint that issued a ticket. It is a pointer type, so a
// Ticket holding it does not allocate.
type recorder interface {
	done(gen uint64, probe bool, o Outcome, retryAfter time.Duration)
}

// Done reports the outcome of the admitted request. Call it once.
func (t Ticket) Done(o Outcome) {
	if t.rec != nil {
		t.rec.done(t.gen, t.probe, o, 0)
	}
}

// Throttle reports a 429 whose Retry-After said how long to wait: the cooldown lasts
// retryAfter, within (0, Settings.MaxCooldown]; zero or less uses Settings.Cooldown.
func (t Ticket) Throttle(retryAfter time.Duration) {
	if t.rec != nil {
		t.rec.done(t.gen, t.probe, Throttled, retryAfter)
	}
}

// Probe reports whether the ticket is a half-open probe.
func (t Ticket) Probe() bool { return t.probe }

// Settings are the trip, recovery and cooldown rules. The zero value of a field means its
// default; a negative value disables a rule where said.
type Settings struct {
	// ConsecutiveFailures in a row trip the breaker; default 5; negative: this rule is off.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// ErrorRate in (0, 1]: the share of failures over Window that trips the breaker once at
	// least MinRequests outcomes were counted; default 0.5; negative: this rule is off.
	ErrorRate float64 `yaml:"error_rate"`
	// Window the error rate is measured over, in 10 buckets (so outcomes leave it in steps of
	// Window/10); default 10 s.
	Window time.Duration `yaml:"window"`
	// MinRequests: fewer outcomes in the window never trip on the error rate; default 20.
	MinRequests int `yaml:"min_requests"`
	// OpenTimeout: how long an open breaker refuses before going half-open, and how long a
	// half-open round may wait for its probes; default 30 s.
	OpenTimeout time.Duration `yaml:"open_timeout"`
	// HalfOpenProbes: requests admitted in one half-open round, across all replicas for the
	// Redis breaker; default 1.
	HalfOpenProbes int `yaml:"half_open_probes"`
	// SuccessesToClose: probe successes that close the breaker; default and maximum
	// HalfOpenProbes.
	SuccessesToClose int `yaml:"successes_to_close"`
	// Cooldown after a 429 (Throttled); default 5 s.
	Cooldown time.Duration `yaml:"cooldown"`
	// MaxCooldown bounds a cooldown asked for by Ticket.Throttle; default 60 s.
	MaxCooldown time.Duration `yaml:"max_cooldown"`
}

// withDefaults fills in the defaults and clamps what cannot work.
func (s Settings) withDefaults() Settings {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = 5
	}
	if s.ErrorRate == 0 {
		s.ErrorRate = 0.5
	}
	if s.ErrorRate > 1 {
		s.ErrorRate = 1
	}
	if s.Window <= 0 {
		s.Window = 10 * time.Second
	}
	if s.Window < windowBuckets*time.Millisecond {
		s.Window = windowBuckets * time.Millisecond // the Redis buckets count milliseconds
	}
	if s.MinRequests <= 0 {
		s.MinRequests = 20
	}
	if s.OpenTimeout <= 0 {
		s.OpenTimeout = 30 * time.Second
	}
	if s.OpenTimeout < time.Millisecond {
		s.OpenTimeout = time.Millisecond
	}
	if s.HalfOpenProbes <= 0 {
		s.HalfOpenProbes = 1
	}
	if s.SuccessesToClose <= 0 || s.SuccessesToClose > s.HalfOpenProbes {
		s.SuccessesToClose = s.HalfOpenProbes
	}
	if s.Cooldown <= 0 {
		s.Cooldown = 5 * time.Second
	}
	if s.MaxCooldown <= 0 {
		s.MaxCooldown = 60 * time.Second
	}
	if s.MaxCooldown < s.Cooldown {
		s.MaxCooldown = s.Cooldown
	}
	return s
}

// cooldown is how long a Throttled outcome cools the endpoint down.
func (s *Settings) cooldown(retryAfter time.Duration) time.Duration {
	if retryAfter <= 0 {
		return s.Cooldown
	}
	return min(retryAfter, s.MaxCooldown)
}

// trips reports whether the counts trip a closed breaker.
func (s *Settings) trips(consecutive, total, failures int64) bool {
	if s.ConsecutiveFailures > 0 && consecutive >= int64(s.ConsecutiveFailures) {
		return true
	}
	return s.ErrorRate > 0 && failures > 0 && total >= int64(s.MinRequests) &&
		float64(failures) >= s.ErrorRate*float64(total)
}

// Options configure either implementation.
type Options struct {
	Settings
	// OnStateChange, when set, is called after each state change this process learns of,
	// outside the breaker's locks; calls for one endpoint may come from different goroutines.
	OnStateChange func(endpoint string, from, to State)
	// Now is the clock; default time.Now. Tests inject a fake one (Local only: the Redis
	// breaker's shared timing is Redis's clock).
	Now func() time.Time
}
