package upstream

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// State is one endpoint's run-time state as routing sees it: whether it is in rotation (healthy),
// how many requests it has outstanding, and the requests for an early health check that failing
// requests make. A pool's endpoint embeds it and calls Init before use; its methods are safe for
// concurrent use.
type State struct {
	cfg         *Resolved
	log         *slog.Logger
	healthy     atomic.Bool
	checked     atomic.Bool // the first health check ran
	outstanding atomic.Int64
	reported    atomic.Int64  // the server's own queue, as it last reported it; 0 unknown
	kick        chan struct{} // asks the health loop for an early check
	// checks is what the last health checks found, for status pages; nil before the first.
	checks atomic.Pointer[Health]
}

// Health is what an endpoint's health checks found, for status pages (the console).
type Health struct {
	// LastCheck is when the last check ended; NextCheck when the next is due at the latest (a
	// failing request brings it forward).
	LastCheck, NextCheck time.Time
	// Failures counts the checks failed in a row; LastError is the last failure's, a check's or
	// a request's, kept once the endpoint recovers ("" before any).
	Failures  int
	LastError string
}

// Health is what the endpoint's health checks found so far.
func (s *State) Health() Health {
	if h := s.checks.Load(); h != nil {
		return *h
	}
	return Health{}
}

// noteCheck records a check's outcome (err nil: passed), or a failed request's (check false).
func (s *State) noteCheck(err error, check bool) {
	var h Health
	if p := s.checks.Load(); p != nil {
		h = *p
	}
	if check {
		h.LastCheck = time.Now()
		h.Failures++
		if err == nil {
			h.Failures = 0
		}
		interval := 5 * time.Second
		if s.cfg != nil && s.cfg.CheckInterval > 0 {
			interval = s.cfg.CheckInterval
		}
		h.NextCheck = h.LastCheck.Add(Backoff(interval, h.Failures))
	}
	if err != nil {
		h.LastError = err.Error()
	}
	s.checks.Store(&h)
}

// Init sets the endpoint's config (its name, priority and check interval are what routing reads)
// and the logger its state changes are written to (with the endpoint's name already attached).
func (s *State) Init(cfg *Resolved, log *slog.Logger) {
	s.cfg, s.log = cfg, log
	s.kick = make(chan struct{}, 1)
}

// Healthy reports whether the endpoint is in rotation.
func (s *State) Healthy() bool { return s.healthy.Load() }

// SetHealthy puts the endpoint in rotation or takes it out, silently, and reports whether it was
// in rotation.
func (s *State) SetHealthy(healthy bool) (was bool) { return s.healthy.Swap(healthy) }

// Outstanding is the number of requests the endpoint is serving.
func (s *State) Outstanding() int64 { return s.outstanding.Load() }

// AddOutstanding counts requests that start (delta 1) or end (-1) on the endpoint.
func (s *State) AddOutstanding(delta int64) { s.outstanding.Add(delta) }

// SetReportedQueue records the requests the server itself reports running and waiting (a vLLM
// server's /metrics, scraped by its health checks): among endpoints with as many requests
// outstanding from this gateway, the default picker prefers the shorter queue. Negative means
// unknown.
func (s *State) SetReportedQueue(n int64) { s.reported.Store(max(n, 0)) }

// maxReported bounds a reported queue to the bits loadKey gives it.
const maxReported = 1<<20 - 1

func (s *State) reportedQueue() int64 { return min(s.reported.Load(), maxReported) }

// Check runs one health check and records a failure: the endpoint leaves rotation, with a
// warning ("upstream unhealthy") when it was in rotation and on the very first check, so an
// upstream that is unreachable from the start is not silent. It reports whether the endpoint was
// in rotation when the check ended, and the check's error. A check that passes does not put the
// endpoint back in rotation: that is for the pool to do (SetHealthy), once it has what it needs
// to route to it.
func (s *State) Check(ctx context.Context, check func(context.Context) error) (was bool, err error) {
	err = check(ctx)
	if ctx.Err() == nil {
		s.noteCheck(err, true)
	}
	was = s.healthy.Load()
	if err != nil {
		if was || !s.checked.Swap(true) {
			s.log.Warn("upstream unhealthy", "err", err)
		}
		s.healthy.Store(false)
		return was, err
	}
	s.checked.Store(true)
	return was, nil
}

// Failed records a request that failed for the endpoint's sake (its connection failed): the
// endpoint leaves rotation at once and the health loop checks it again soon, with backoff,
// instead of waiting a full interval.
func (s *State) Failed(err error) {
	s.Down("upstream failed; out of rotation until a health check passes", err)
	s.Kick()
}

// Down takes the endpoint out of rotation until a health check passes, warning msg with err when
// it was in rotation (so a failing endpoint is logged once, not once per request).
func (s *State) Down(msg string, err error) {
	if err != nil {
		s.noteCheck(err, false)
	}
	if s.healthy.Swap(false) {
		s.log.Warn(msg, "err", err)
	}
}

// Kick asks the health loop for an early check; a request already pending absorbs it.
func (s *State) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Kicks is what HealthLoop's kick reads.
func (s *State) Kicks() <-chan struct{} { return s.kick }
