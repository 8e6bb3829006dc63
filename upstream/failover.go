package upstream

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/store/breaker"
)

// Route is one way to serve a request: an endpoint, with whatever its pool attaches to it (the
// name the endpoint knows the model by, metric children). Routes of one request are of distinct
// endpoints.
type Route interface {
	// State is the route's endpoint's.
	State() *State
}

// Router is a pool's routing policy: which endpoint a request tries next, and the breaker that
// may refuse one. Its zero value picks with LeastOutstanding and has no breaker. Do not copy a
// Router once used.
type Router struct {
	// Picker chooses among the usable endpoints; nil means LeastOutstanding.
	Picker Picker
	// Breaker, when set, guards every endpoint: an open one is not picked, and each attempt asks
	// it for a ticket first.
	Breaker breaker.Breaker
	// Last makes Failover tell each attempt whether it is the last one (no other endpoint would
	// be picked after it), at the cost of one more pick per attempt. Without it, last is false.
	Last bool
	rr   atomic.Uint32 // rotates ties
}

// Forget drops what the breaker keeps of a removed endpoint, if it keeps anything.
func (rt *Router) Forget(name string) {
	if r, ok := rt.Breaker.(interface{ Remove(string) }); ok {
		r.Remove(name)
	}
}

// Attempt sends a request on one route. t is the breaker's ticket for it (the zero Ticket when
// the Router has no breaker): the attempt owns it and must see that its Done (or Throttle) is
// called once, now or when the response ends. last is Router.Last's report. It returns nil when
// the request was served; otherwise its error, and whether the request may be tried on the next
// endpoint (next) or the error is the answer.
type Attempt[R Route] func(ctx context.Context, r R, t breaker.Ticket, last bool) (next bool, err error)

// Result is what Failover did; the pool builds its answer from it.
type Result[R Route] struct {
	// OK: an attempt served the request, on Route.
	OK bool
	// Route is the route of the last attempt or refusal: the one that served, or whose error
	// ended the loop; the zero R when no endpoint was usable.
	Route R
	// Stopped: an attempt's error was the answer (next was false), or ctx ended after a failed
	// attempt or a refusal. Err is then that error. Otherwise Failover ran out of endpoints.
	Stopped bool
	// Err is the last error, an attempt's or a breaker's refusal (Allow's error, an
	// *breaker.OpenError unless ctx ended); nil when no endpoint was usable.
	Err error
	// Refused: Err is a breaker's refusal.
	Refused bool
	// Failure is the last attempt's error, refusals aside; nil when no attempt failed.
	Failure error
	// When no attempt failed and the loop was not stopped: why no endpoint took the request.
	// CircuitOpen: an endpoint in rotation was cut off by its breaker, skipped by the pick for
	// being open or refused a ticket; RetryAfter is then the soonest breaker's wait. Otherwise
	// every endpoint was out of rotation (or there was none), and RetryAfter is the shortest
	// health check interval among them (0 when none): an endpoint that recovers is back after its
	// next check.
	CircuitOpen bool
	RetryAfter  time.Duration
}

// Failover tries routes (sorted by priority, highest first) one endpoint after another, as the
// request's Picker (WithPicker) or else the Router's chooses among those usable (in rotation, breaker not open, not tried yet, and
// the endpoint only when only is set), until an attempt serves the request, an attempt's error
// is the answer, ctx has ended after a failed attempt or a refusal, or no endpoint is left.
// Before each attempt it asks the Router's breaker for a ticket; an endpoint that is refused one
// is skipped, as the pick skips an open one, and the soonest refusal's RetryAfter is kept for
// Result.RetryAfter.
func Failover[R Route](ctx context.Context, rt *Router, routes []R, only *State, attempt Attempt[R]) Result[R] {
	v := view[R]{routes: routes, only: only, br: rt.Breaker}
	var res Result[R]
	// refusal: the soonest Retry-After of the breakers that refused a ticket (an endpoint
	// cooling down after a 429, or half-open with every probe out); -1 while none did.
	refusal := time.Duration(-1)
	tried := 0
	picker := rt.Picker
	if p, ok := ctx.Value(pickerKey{}).(Picker); ok {
		picker = p
	}
	if allow, ok := ctx.Value(filterKey{}).(func(string) bool); ok {
		v.allow = allow
	}
	prefer, _ := ctx.Value(preferKey{}).(string)
	for {
		i := -1
		if prefer != "" && tried == 0 {
			c := v // a copy for the interface, as in pick: v itself stays on the stack
			i = preferred(&c, prefer)
		}
		if i < 0 {
			i = pick(rt, picker, &v)
		}
		if i < 0 {
			break
		}
		r := routes[i]
		v.tried.set(i)
		tried++
		// Whether any endpoint is left, asked without the picker: a pick would also move the
		// rotation on, and two picks per request would send every request to the same one of two
		// equal endpoints.
		last := rt.Last && (tried == len(routes) || !v.anyUsable())
		res.Route = r
		var t breaker.Ticket
		if rt.Breaker != nil {
			var err error
			if t, err = rt.Breaker.Allow(ctx, r.State().cfg.Name); err != nil {
				res.Err, res.Refused = err, true
				var open *breaker.OpenError
				if errors.As(err, &open) && (refusal < 0 || open.RetryAfter < refusal) {
					refusal = open.RetryAfter
				}
				if ctx.Err() != nil {
					res.Stopped = true
					return res
				}
				continue
			}
		}
		next, err := attempt(ctx, r, t, last)
		if err == nil {
			res.OK, res.Err, res.Refused = true, nil, false
			return res
		}
		res.Err, res.Refused, res.Failure = err, false, err
		if !next || ctx.Err() != nil {
			res.Stopped = true
			return res
		}
	}
	if res.Failure == nil {
		res.CircuitOpen, res.RetryAfter = v.unavailable(refusal)
	}
	return res
}

// pick asks picker (the Router's, or the request's own) for the next route.
func pick[R Route](rt *Router, picker Picker, v *view[R]) int {
	rotate := rt.rr.Add(1)
	if picker == nil {
		return leastOutstanding(len(v.routes), v.Priority, v.Usable, v.loadKey, rotate)
	}
	c := *v // a copy for the interface: v itself stays on Failover's stack
	return picker.Pick(&c, rotate)
}

// view is one request's routes as Candidates.
type view[R Route] struct {
	routes []R
	only   *State
	allow  func(endpoint string) bool // WithFilter's; nil allows every endpoint
	br     breaker.Breaker
	tried  bitset // indices into routes
}

func (v *view[R]) Len() int { return len(v.routes) }

// anyUsable reports whether a route is still usable.
func (v *view[R]) anyUsable() bool {
	for i := range v.routes {
		if v.Usable(i) {
			return true
		}
	}
	return false
}

func (v *view[R]) allowed(s *State) bool { return v.allow == nil || v.allow(s.cfg.Name) }

func (v *view[R]) Name(i int) string { return v.routes[i].State().cfg.Name }

func (v *view[R]) Priority(i int) int { return v.routes[i].State().cfg.Priority }

func (v *view[R]) Outstanding(i int) int64 { return v.routes[i].State().Outstanding() }

// loadKey orders endpoints for the default picker: by requests outstanding here, then by the
// queue the server last reported (what other gateways and clients send it too).
func (v *view[R]) loadKey(i int) int64 {
	s := v.routes[i].State()
	return s.Outstanding()<<20 | s.reportedQueue()
}

func (v *view[R]) Usable(i int) bool {
	s := v.routes[i].State()
	return s.Healthy() && (v.only == nil || s == v.only) && !v.tried.has(i) && v.allowed(s) &&
		(v.br == nil || v.br.State(s.cfg.Name) != breaker.Open)
}

// unavailable is Result's CircuitOpen and RetryAfter when no endpoint took the request; refusal
// is the soonest refusal's RetryAfter, -1 if there was none.
func (v *view[R]) unavailable(refusal time.Duration) (cutOff bool, wait time.Duration) {
	wait, cutOff = refusal, refusal >= 0
	var check time.Duration
	for i, r := range v.routes {
		s := r.State()
		switch {
		case v.only != nil && s != v.only, !v.allowed(s):
		case !s.Healthy():
			if check == 0 || s.cfg.CheckInterval < check {
				check = s.cfg.CheckInterval
			}
		case v.br != nil && !v.tried.has(i):
			// In rotation yet not picked: its breaker is open. (Should it have gone half-open
			// since, RetryAfter is 0.)
			if w := v.br.RetryAfter(s.cfg.Name); !cutOff || w < wait {
				wait = w
			}
			cutOff = true
		}
	}
	if cutOff {
		return true, wait
	}
	return false, check
}

// bitset is a set of small non-negative integers; the first 64 need no allocation.
type bitset struct {
	w0   uint64
	more []uint64
}

func (b *bitset) set(i int) {
	if i < 64 {
		b.w0 |= 1 << i
		return
	}
	w := i/64 - 1
	for len(b.more) <= w {
		b.more = append(b.more, 0)
	}
	b.more[w] |= 1 << (i % 64)
}

func (b *bitset) has(i int) bool {
	if i < 64 {
		return b.w0&(1<<i) != 0
	}
	w := i/64 - 1
	return w < len(b.more) && b.more[w]&(1<<(i%64)) != 0
}
