package upstream_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// route is a Route for Failover tests.
type route struct {
	st  upstream.State
	cfg upstream.Resolved
}

func (r *route) State() *upstream.State { return &r.st }

func (r *route) name() string { return r.cfg.Name }

// routes builds one route per name, all healthy, with priorities from high to low in order.
func routes(names ...string) []*route {
	out := make([]*route, len(names))
	for i, n := range names {
		r := &route{cfg: upstream.Resolved{Endpoint: upstream.Endpoint{Name: n, Priority: len(names) - i, CheckInterval: 5 * time.Second}}}
		r.st.Init(&r.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		r.st.SetHealthy(true)
		out[i] = r
	}
	return out
}

// script is an Attempt that records what it was called with and answers from a table.
type script struct {
	calls []string
	lasts []bool
	next  map[string]bool  // default true
	errs  map[string]error // default nil: served
	on    func(r *route, t breaker.Ticket)
}

func (s *script) attempt(_ context.Context, r *route, t breaker.Ticket, last bool) (bool, error) {
	s.calls = append(s.calls, r.name())
	s.lasts = append(s.lasts, last)
	if s.on != nil {
		s.on(r, t)
	}
	next, ok := s.next[r.name()]
	return next || !ok, s.errs[r.name()]
}

var (
	errA = errors.New("a failed")
	errB = errors.New("b failed")
	errC = errors.New("c failed")
)

func TestFailoverRetriesThenServes(t *testing.T) {
	rs := routes("a", "b", "c")
	s := &script{errs: map[string]error{"a": errA}}
	res := upstream.Failover(context.Background(), &upstream.Router{}, rs, nil, s.attempt)
	assert.True(t, res.OK)
	assert.Same(t, rs[1], res.Route)
	assert.NoError(t, res.Err)
	assert.Equal(t, []string{"a", "b"}, s.calls, "by priority, the next after a retryable failure")
	assert.Equal(t, []bool{false, false}, s.lasts, "last is false without Router.Last")
}

func TestFailoverStops(t *testing.T) {
	rs := routes("a", "b", "c")
	s := &script{errs: map[string]error{"a": errA, "b": errB}, next: map[string]bool{"b": false}}
	res := upstream.Failover(context.Background(), &upstream.Router{}, rs, nil, s.attempt)
	assert.False(t, res.OK)
	assert.True(t, res.Stopped, "b's error is the answer")
	assert.Same(t, rs[1], res.Route)
	assert.Same(t, errB, res.Err)
	assert.Same(t, errB, res.Failure)
	assert.False(t, res.Refused)
	assert.Equal(t, []string{"a", "b"}, s.calls, "c is not tried")
}

func TestFailoverRunsOut(t *testing.T) {
	rs := routes("a", "b", "c")
	rs[1].st.SetHealthy(false)
	s := &script{errs: map[string]error{"a": errA, "c": errC}}
	res := upstream.Failover(context.Background(), &upstream.Router{Last: true}, rs, nil, s.attempt)
	assert.False(t, res.OK)
	assert.False(t, res.Stopped)
	assert.Same(t, errC, res.Err, "the last error")
	assert.Same(t, errC, res.Failure)
	assert.Same(t, rs[2], res.Route)
	assert.Equal(t, []string{"a", "c"}, s.calls, "an endpoint out of rotation is not tried")
	assert.Equal(t, []bool{false, true}, s.lasts, "Router.Last: c is the last usable")

	for _, r := range rs {
		r.st.SetHealthy(true)
	}
	s = &script{errs: map[string]error{"a": errA, "b": errB, "c": errC}}
	upstream.Failover(context.Background(), &upstream.Router{Last: true}, rs, nil, s.attempt)
	assert.Equal(t, []bool{false, false, true}, s.lasts)
}

func TestFailoverCancelled(t *testing.T) {
	rs := routes("a", "b")
	ctx, cancel := context.WithCancel(context.Background())
	s := &script{errs: map[string]error{"a": context.Canceled}, on: func(*route, breaker.Ticket) { cancel() }}
	res := upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt)
	assert.True(t, res.Stopped, "a failure after ctx ended stops the loop, whatever the attempt said")
	assert.Same(t, rs[0], res.Route)
	assert.ErrorIs(t, res.Err, context.Canceled)
	assert.Equal(t, []string{"a"}, s.calls)
}

// TestFailoverNoneUsable: with every endpoint out of rotation, Retry-After is the shortest check
// interval.
func TestFailoverNoneUsable(t *testing.T) {
	rs := routes("a", "b")
	rs[0].cfg.CheckInterval, rs[1].cfg.CheckInterval = 7*time.Second, 3*time.Second
	rs[0].st.SetHealthy(false)
	rs[1].st.SetHealthy(false)
	s := &script{}
	res := upstream.Failover(context.Background(), &upstream.Router{Breaker: breaker.NewLocal(breaker.Options{})}, rs, nil, s.attempt)
	assert.Empty(t, s.calls)
	assert.False(t, res.OK || res.Stopped || res.CircuitOpen)
	assert.Nil(t, res.Route)
	assert.NoError(t, res.Err)
	assert.Equal(t, 3*time.Second, res.RetryAfter)

	res = upstream.Failover(context.Background(), &upstream.Router{}, []*route{}, nil, s.attempt)
	assert.False(t, res.OK || res.CircuitOpen)
	assert.Zero(t, res.RetryAfter, "no endpoint at all")
}

// TestFailoverBreaker: an endpoint whose breaker is open is not picked, one whose breaker refuses
// a ticket is skipped; when that leaves none, the soonest breaker's wait is the Retry-After.
func TestFailoverBreaker(t *testing.T) {
	clk := logtest.NewClock(time.Unix(1000, 0))
	br := breaker.NewLocal(breaker.Options{Now: clk.Now, Settings: breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Second}})
	throttle := func(name string, d time.Duration) {
		tk, err := br.Allow(context.Background(), name)
		require.NoError(t, err)
		tk.Throttle(d)
	}
	trip := func(name string) {
		tk, err := br.Allow(context.Background(), name)
		require.NoError(t, err)
		tk.Done(breaker.Failure)
		require.Equal(t, breaker.Open, br.State(name))
	}
	rt := &upstream.Router{Breaker: br}

	rs := routes("a", "b", "c", "d")
	throttle("a", 30*time.Second)
	throttle("b", 10*time.Second)
	trip("c")
	clk.Add(5 * time.Second)
	s := &script{errs: map[string]error{"d": errors.New("d failed")}}
	res := upstream.Failover(context.Background(), rt, rs, nil, s.attempt)
	assert.Equal(t, []string{"d"}, s.calls, "a and b refused a ticket, c not picked while open")
	assert.False(t, res.Stopped)
	require.Error(t, res.Failure, "d failed")

	rs[3].st.SetHealthy(false)
	s = &script{}
	res = upstream.Failover(context.Background(), rt, rs, nil, s.attempt)
	assert.Empty(t, s.calls)
	assert.Same(t, rs[1], res.Route, "the last refused")
	assert.True(t, res.Refused)
	var open *breaker.OpenError
	require.ErrorAs(t, res.Err, &open)
	assert.Equal(t, "b", open.Endpoint)
	assert.NoError(t, res.Failure)
	assert.True(t, res.CircuitOpen)
	assert.Equal(t, 5*time.Second, res.RetryAfter, "b cools down soonest")

	clk.Add(3 * time.Second)
	res = upstream.Failover(context.Background(), rt, rs[2:], nil, s.attempt)
	assert.True(t, res.CircuitOpen, "c is open; d out of rotation")
	assert.Equal(t, 12*time.Second, res.RetryAfter, "c's open timeout")
	assert.False(t, res.Refused)
}

// TestFailoverTicket: the attempt owns its ticket; it may report the outcome after Failover
// returned (a response still being read).
func TestFailoverTicket(t *testing.T) {
	br := breaker.NewLocal(breaker.Options{Settings: breaker.Settings{ConsecutiveFailures: 1}})
	rs := routes("a")
	var held breaker.Ticket
	s := &script{on: func(_ *route, tk breaker.Ticket) { held = tk }}
	res := upstream.Failover(context.Background(), &upstream.Router{Breaker: br}, rs, nil, s.attempt)
	require.True(t, res.OK)
	assert.Equal(t, breaker.Closed, br.State("a"))
	held.Done(breaker.Failure)
	assert.Equal(t, breaker.Open, br.State("a"), "the attempt's ticket is the breaker's")
}

// TestFailoverOnly: a request pinned to one endpoint tries only that one.
func TestFailoverOnly(t *testing.T) {
	rs := routes("a", "b", "c")
	s := &script{errs: map[string]error{"b": errB}}
	res := upstream.Failover(context.Background(), &upstream.Router{}, rs, rs[1].State(), s.attempt)
	assert.Equal(t, []string{"b"}, s.calls)
	assert.False(t, res.OK)

	rs[1].st.SetHealthy(false)
	rs[1].cfg.CheckInterval = time.Minute
	s = &script{}
	res = upstream.Failover(context.Background(), &upstream.Router{}, rs, rs[1].State(), s.attempt)
	assert.Empty(t, s.calls)
	assert.Equal(t, time.Minute, res.RetryAfter, "only the pinned endpoint counts")
}

// TestFailoverRotates: equal endpoints share sequential requests.
// Equal endpoints with nothing outstanding take turns, whether or not the attempts are told
// which is the last (telling must not move the rotation on: it once sent every request to one
// of two equal endpoints).
func TestFailoverRotates(t *testing.T) {
	for _, last := range []bool{false, true} {
		rs := routes("a", "b")
		rs[1].cfg.Priority = rs[0].cfg.Priority
		rt := &upstream.Router{Last: last}
		count := map[string]int{}
		for range 10 {
			s := &script{}
			res := upstream.Failover(context.Background(), rt, rs, nil, s.attempt)
			require.True(t, res.OK)
			assert.False(t, s.lasts[0], "another endpoint was left")
			count[res.Route.name()]++
		}
		assert.Equal(t, map[string]int{"a": 5, "b": 5}, count, "Last: %v", last)
	}
}

// lastUsable picks the lowest-priority usable candidate.
type lastUsable struct{ seen []int }

func (p *lastUsable) Pick(c upstream.Candidates, _ uint32) int {
	p.seen = append(p.seen, c.Len())
	for i := c.Len() - 1; i >= 0; i-- {
		if c.Usable(i) {
			return i
		}
	}
	return -1
}

func TestFailoverPicker(t *testing.T) {
	rs := routes("a", "b", "c")
	rs[1].st.AddOutstanding(3)
	s := &script{errs: map[string]error{"c": errC, "b": errB, "a": errA}}
	p := &lastUsable{}
	upstream.Failover(context.Background(), &upstream.Router{Picker: p}, rs, nil, s.attempt)
	assert.Equal(t, []string{"c", "b", "a"}, s.calls, "the Router's picker, with tried endpoints not usable")
	assert.Equal(t, []int{3, 3, 3, 3}, p.seen)
}

// A request's own picker replaces the Router's, and its filter keeps it to some endpoints: those
// filtered out are neither tried nor reported as out of rotation.
func TestFailoverRequestPickerAndFilter(t *testing.T) {
	rs := routes("a", "b", "c")
	for _, r := range rs {
		r.cfg.Priority = 0
	}
	s := &script{}
	ctx := upstream.WithPicker(context.Background(), &lastUsable{})
	res := upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt)
	require.True(t, res.OK)
	assert.Equal(t, []string{"c"}, s.calls, "the request's picker chose")

	rs = routes("a", "b", "c") // a first, b next, c last
	s = &script{errs: map[string]error{"a": errA}}
	ctx = upstream.WithFilter(context.Background(), func(name string) bool { return name != "b" })
	res = upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt)
	require.True(t, res.OK)
	assert.Equal(t, []string{"a", "c"}, s.calls, "b is not in the request's pool")

	s = &script{}
	ctx = upstream.WithFilter(upstream.WithFilter(context.Background(), func(name string) bool { return name != "a" }),
		func(name string) bool { return name != "c" })
	res = upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt)
	require.True(t, res.OK)
	assert.Equal(t, []string{"b"}, s.calls, "two filters: an endpoint passes both")

	s = &script{}
	ctx = upstream.WithFilter(context.Background(), func(string) bool { return false })
	res = upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt)
	assert.False(t, res.OK)
	assert.Empty(t, s.calls)
	assert.False(t, res.CircuitOpen)
}

// A preferred endpoint (a chat session's) is tried first, over the request's picker, while it is
// usable and in the highest usable priority tier; once it fails, the picker chooses.
func TestFailoverPreferred(t *testing.T) {
	equal := func() []*route {
		rs := routes("a", "b", "c")
		for _, r := range rs {
			r.cfg.Priority = 0
		}
		return rs
	}
	rs := equal()
	s := &script{}
	ctx := upstream.WithPreferred(upstream.WithPicker(context.Background(), &lastUsable{}), "b")
	require.True(t, upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt).OK)
	assert.Equal(t, []string{"b"}, s.calls, "the preferred endpoint goes first")

	s = &script{errs: map[string]error{"b": errB}}
	require.True(t, upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt).OK)
	assert.Equal(t, []string{"b", "c"}, s.calls, "after the preferred one fails, the picker chooses")

	rs[1].st.SetHealthy(false)
	s = &script{}
	require.True(t, upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt).OK)
	assert.Equal(t, []string{"c"}, s.calls, "an unhealthy preferred endpoint is skipped")

	rs = routes("a", "b", "c") // priorities a > b > c
	s = &script{}
	require.True(t, upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt).OK)
	assert.Equal(t, []string{"c"}, s.calls, "a preferred backup is left while a primary is usable: the picker chooses")
	rs[0].st.SetHealthy(false)
	s = &script{}
	ctx = upstream.WithPreferred(context.Background(), "b")
	require.True(t, upstream.Failover(ctx, &upstream.Router{}, rs, nil, s.attempt).OK)
	assert.Equal(t, []string{"b"}, s.calls, "with the primary down, the preferred endpoint is in the top usable tier")

	s = &script{}
	ctx = upstream.WithPreferred(context.Background(), "gone")
	require.True(t, upstream.Failover(ctx, &upstream.Router{}, equal(), nil, s.attempt).OK)
	assert.Len(t, s.calls, 1, "an endpoint no longer in the pool is no preference")
}

// The default picker breaks a tie in outstanding requests by the queue each server reported;
// the requests outstanding here still come first.
func TestFailoverReportedQueue(t *testing.T) {
	rs := routes("a", "b", "c")
	for _, r := range rs {
		r.cfg.Priority = 0
	}
	rs[0].st.SetReportedQueue(7)
	rs[1].st.SetReportedQueue(2)
	rs[2].st.SetReportedQueue(5)
	var rt upstream.Router
	for range 6 {
		s := &script{}
		require.True(t, upstream.Failover(context.Background(), &rt, rs, nil, s.attempt).OK)
		assert.Equal(t, []string{"b"}, s.calls, "the shortest reported queue, whatever the rotation")
	}
	rs[1].st.AddOutstanding(1)
	s := &script{}
	require.True(t, upstream.Failover(context.Background(), &rt, rs, nil, s.attempt).OK)
	assert.Equal(t, []string{"c"}, s.calls, "fewer outstanding here wins over a shorter reported queue")
}
