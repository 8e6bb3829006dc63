package breaker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Local is the in-process breaker: each gateway replica breaks on its own outcomes. Allow and
// Done on a closed, healthy endpoint are a map read and a few atomic operations, no lock and no
// allocation; the lock is taken for failures and for transitions.
type Local struct {
	s     Settings
	n     *notifier
	clock func() time.Time
	base  time.Time
	mu    sync.Mutex // serializes writers of eps
	eps   atomic.Pointer[map[string]*lendpoint]
}

// NewLocal returns an in-process breaker.
func NewLocal(opts Options) *Local {
	return newLocal(opts, &notifier{m: newMetrics(), hook: opts.OnStateChange})
}

func newLocal(opts Options, n *notifier) *Local {
	l := &Local{s: opts.Settings.withDefaults(), n: n, clock: opts.Now}
	if l.clock == nil {
		l.clock = time.Now
	}
	l.base = l.clock()
	l.eps.Store(&map[string]*lendpoint{})
	return l
}

// Collectors are the breaker's Prometheus metrics.
func (l *Local) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.n.m.state, l.n.m.transitions, l.n.m.refused}
}

// now is the clock in nanoseconds since the breaker was made (monotonic with time.Now).
func (l *Local) now() int64 { return int64(l.clock().Sub(l.base)) }

// Allow implements Breaker.
func (l *Local) Allow(_ context.Context, endpoint string) (Ticket, error) {
	return l.endpoint(endpoint).allow()
}

// State implements Breaker.
func (l *Local) State(endpoint string) State {
	e := (*l.eps.Load())[endpoint]
	if e == nil {
		return Closed
	}
	return e.state()
}

// RetryAfter implements Breaker.
func (l *Local) RetryAfter(endpoint string) time.Duration {
	e := (*l.eps.Load())[endpoint]
	if e == nil {
		return 0
	}
	return e.retryAfter()
}

// Remove forgets an endpoint (one removed from the routing table); a later Allow starts it
// closed with empty counts.
func (l *Local) Remove(endpoint string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := *l.eps.Load()
	if _, ok := old[endpoint]; !ok {
		return
	}
	eps := make(map[string]*lendpoint, len(old))
	for k, v := range old {
		if k != endpoint {
			eps[k] = v
		}
	}
	l.eps.Store(&eps)
	l.n.m.state.DeleteLabelValues(endpoint)
}

// endpoint returns the endpoint's state, creating it closed. The map is copied on write:
// endpoints are added rarely and looked up on every request.
func (l *Local) endpoint(name string) *lendpoint {
	if e := (*l.eps.Load())[name]; e != nil {
		return e
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := *l.eps.Load()
	if e := old[name]; e != nil {
		return e
	}
	e := &lendpoint{name: name, l: l}
	e.win.init(int64(l.s.Window / windowBuckets))
	eps := make(map[string]*lendpoint, len(old)+1)
	for k, v := range old {
		eps[k] = v
	}
	eps[name] = e
	l.eps.Store(&eps)
	l.n.m.state.WithLabelValues(name).Set(float64(Closed))
	return e
}

// lendpoint is one endpoint's state machine.
type lendpoint struct {
	name string
	l    *Local

	// sg packs the generation (bumped by every transition) and the state: gen<<2 | state. One
	// word, so the hot path reads both consistently with one load.
	sg     atomic.Uint64
	cool   atomic.Int64 // cooldown deadline (clock ns); 0: none
	consec atomic.Int64 // consecutive failures while closed
	win    window

	mu     sync.Mutex // held by transitions, failures and probe bookkeeping
	until  int64      // Open: when it may go half-open; HalfOpen: when the round times out
	probes int        // admitted in this half-open round
	succ   int        // probe successes in this round
}

func pack(gen uint64, s State) uint64 { return gen<<2 | uint64(s) }

func (e *lendpoint) state() State {
	sg := e.sg.Load()
	s := State(sg & 3)
	if s == Open {
		e.mu.Lock()
		if e.sg.Load() == sg && e.l.now() >= e.until {
			s = HalfOpen
		}
		e.mu.Unlock()
	}
	return s
}

func (e *lendpoint) retryAfter() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.l.now()
	var wait int64
	switch s := State(e.sg.Load() & 3); {
	case s == Open, s == HalfOpen && e.probes >= e.l.s.HalfOpenProbes:
		wait = e.until - now // negative once the deadline passed: Allow starts a round
	}
	return time.Duration(max(wait, e.cool.Load()-now, 0))
}

func (e *lendpoint) allow() (Ticket, error) {
	sg := e.sg.Load()
	if State(sg&3) == Closed {
		c := e.cool.Load()
		if c == 0 {
			return Ticket{rec: e, gen: sg >> 2}, nil
		}
		now := e.l.now()
		if now >= c {
			e.cool.CompareAndSwap(c, 0)
			return Ticket{rec: e, gen: sg >> 2}, nil
		}
		return Ticket{}, e.l.n.refuse(&OpenError{Endpoint: e.name, State: Closed, Throttled: true, RetryAfter: time.Duration(c - now)})
	}
	return e.allowSlow()
}

// allowSlow decides for an endpoint that is not closed, under the lock.
func (e *lendpoint) allowSlow() (Ticket, error) {
	e.mu.Lock()
	now := e.l.now()
	from := State(e.sg.Load() & 3)
	e.advance(now)
	sg := e.sg.Load()
	gen, s := sg>>2, State(sg&3)
	var t Ticket
	var refusal *OpenError
	switch c := e.cool.Load(); {
	case c > now:
		refusal = &OpenError{Endpoint: e.name, State: s, Throttled: true, RetryAfter: time.Duration(c - now)}
	case s == Closed:
		t = Ticket{rec: e, gen: gen}
	case s == HalfOpen && e.probes < e.l.s.HalfOpenProbes:
		e.probes++
		t = Ticket{rec: e, gen: gen, probe: true}
	default:
		refusal = &OpenError{Endpoint: e.name, State: s, RetryAfter: time.Duration(e.until - now)}
	}
	e.mu.Unlock()
	e.l.n.changed(e.name, from, s)
	if refusal != nil {
		return Ticket{}, e.l.n.refuse(refusal)
	}
	return t, nil
}

// advance applies the transitions that time alone makes: open -> half-open after the open
// timeout, and a new half-open round when one timed out with all its probes out. Called with
// the lock held.
func (e *lendpoint) advance(now int64) {
	sg := e.sg.Load()
	switch s := State(sg & 3); {
	case s == Open && now >= e.until:
		e.transition(HalfOpen, now)
	case s == HalfOpen && now >= e.until && e.probes >= e.l.s.HalfOpenProbes:
		e.transition(HalfOpen, now)
	}
}

// transition moves to state to, in a new generation, with fresh counts. Called with the lock
// held; the caller notifies after unlocking.
func (e *lendpoint) transition(to State, now int64) {
	gen := e.sg.Load()>>2 + 1
	e.probes, e.succ = 0, 0
	e.until = 0
	if to != Closed {
		e.until = now + int64(e.l.s.OpenTimeout)
	}
	e.consec.Store(0)
	e.win.reset()
	e.sg.Store(pack(gen, to))
}

func (e *lendpoint) done(gen uint64, probe bool, o Outcome, retryAfter time.Duration) {
	if o == Throttled {
		// A 429 says the upstream wants a pause whatever generation the request was sent in.
		e.coolDown(e.l.s.cooldown(retryAfter))
	}
	if probe {
		e.probeDone(gen, o)
		return
	}
	sg := e.sg.Load()
	if sg != pack(gen, Closed) {
		return // admitted before a transition: says nothing about the current state
	}
	switch o {
	case Success:
		e.win.add(e.l.now(), false)
		if e.consec.Load() != 0 {
			e.consec.Store(0)
		}
	case Failure:
		e.failure(sg)
	}
}

// doneCurrent records the outcome of a request this endpoint did not admit (the Redis breaker
// admitted it before losing Redis) as one of the current generation.
func (e *lendpoint) doneCurrent(o Outcome, retryAfter time.Duration) {
	e.done(e.sg.Load()>>2, false, o, retryAfter)
}

func (e *lendpoint) failure(sg uint64) {
	e.mu.Lock()
	if e.sg.Load() != sg {
		e.mu.Unlock()
		return
	}
	now := e.l.now()
	e.win.add(now, true)
	c := e.consec.Add(1)
	total, failures := e.win.sum(now)
	tripped := e.l.s.trips(c, total, failures)
	if tripped {
		e.transition(Open, now)
	}
	e.mu.Unlock()
	if tripped {
		e.l.n.changed(e.name, Closed, Open)
	}
}

func (e *lendpoint) probeDone(gen uint64, o Outcome) {
	e.mu.Lock()
	sg := e.sg.Load()
	if sg != pack(gen, HalfOpen) {
		e.mu.Unlock()
		return
	}
	now := e.l.now()
	to := HalfOpen
	switch o {
	case Success:
		e.succ++
		if e.succ >= e.l.s.SuccessesToClose {
			to = Closed
		}
	case Failure:
		to = Open
	default: // Ignored, Throttled: the probe says nothing; give its slot back
		e.probes = max(e.probes-1, 0)
	}
	if to != HalfOpen {
		e.transition(to, now)
	}
	e.mu.Unlock()
	e.l.n.changed(e.name, HalfOpen, to)
}

func (e *lendpoint) coolDown(d time.Duration) {
	until := e.l.now() + int64(d)
	for {
		c := e.cool.Load()
		if c >= until || e.cool.CompareAndSwap(c, until) {
			return
		}
	}
}

// seed replaces the endpoint's state (the Redis breaker's fallback starts from the last shared
// state it knew): open for openFor (zero: half-open may start now), closed, or half-open with a
// fresh round, and a cooldown of coolFor.
func (e *lendpoint) seed(s State, openFor, coolFor time.Duration) {
	e.mu.Lock()
	now := e.l.now()
	from := State(e.sg.Load() & 3)
	e.transition(s, now)
	if s == Open {
		e.until = now + int64(openFor)
	}
	e.cool.Store(0)
	if coolFor > 0 {
		e.cool.Store(now + int64(coolFor))
	}
	e.mu.Unlock()
	e.l.n.changed(e.name, from, s)
}
