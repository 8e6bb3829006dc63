package upstream

import "context"

// Candidates are the endpoints a Picker chooses among for one request, sorted by priority,
// highest first.
type Candidates interface {
	Len() int
	// Name is the i-th endpoint's name (unique in the pool).
	Name(i int) string
	Priority(i int) int
	// Outstanding is the number of requests the i-th endpoint is serving.
	Outstanding(i int) int64
	// Usable reports whether the i-th endpoint may be picked: it is in rotation, its breaker is
	// not open, the request has not tried it yet (and, for a request pinned to one endpoint,
	// it is that one).
	Usable(i int) bool
}

// Picker chooses the endpoint a request tries next.
type Picker interface {
	// Pick returns the index of the candidate to try, or -1 when none is usable. rotate changes
	// from one call to the next: a picker spreads equal candidates' work with it.
	Pick(c Candidates, rotate uint32) int
}

// pickerKey carries a request's own Picker in its context.
type pickerKey struct{}

// WithPicker makes Failover pick the endpoints of the request ctx belongs to with p instead of
// its Router's Picker: a request-scoped choice, such as a prefix-cache-aware one that knows the
// request's prompt.
func WithPicker(ctx context.Context, p Picker) context.Context {
	return context.WithValue(ctx, pickerKey{}, p)
}

// filterKey carries a request's endpoint filter in its context.
type filterKey struct{}

// WithFilter makes Failover consider, for the request ctx belongs to, only the endpoints allow
// accepts (by name): one pool of a model's endpoints, such as its prefill workers. It composes
// with any Picker (those filtered out are not Usable) and with a filter ctx already has: an
// endpoint must pass both (a provider-scoped route's, then a disaggregated model's pool).
func WithFilter(ctx context.Context, allow func(endpoint string) bool) context.Context {
	if prior, ok := ctx.Value(filterKey{}).(func(string) bool); ok {
		inner := allow
		allow = func(endpoint string) bool { return prior(endpoint) && inner(endpoint) }
	}
	return context.WithValue(ctx, filterKey{}, allow)
}

// preferKey carries the endpoint a request would rather go to.
type preferKey struct{}

// WithPreferred makes Failover try the endpoint named endpoint first for the request ctx
// belongs to, whatever its Picker would choose, as long as that endpoint is usable and in the
// highest priority tier that has a usable one (a session that moved to a backup goes back to
// its primaries once they recover). It is a chat session's stickiness: the endpoint that served
// the conversation's earlier turns holds its prefix in its KV cache. After a failed attempt,
// the Picker chooses as usual.
func WithPreferred(ctx context.Context, endpoint string) context.Context {
	if endpoint == "" {
		return ctx
	}
	return context.WithValue(ctx, preferKey{}, endpoint)
}

// preferred returns the index of c's endpoint named name, when Pick may take it: usable and in
// the highest usable priority tier; -1 otherwise.
func preferred(c Candidates, name string) int {
	at, top := -1, 0
	found := false
	for i := range c.Len() {
		if !c.Usable(i) {
			continue
		}
		if !found || c.Priority(i) > top {
			top, found = c.Priority(i), true
		}
		if c.Name(i) == name {
			at = i
		}
	}
	if at < 0 || c.Priority(at) < top {
		return -1
	}
	return at
}

// RoundRobin picks in the highest priority tier that has a usable candidate the next one in an
// order rotated by rotate, whatever the load.
type RoundRobin struct{}

// Pick implements Picker.
func (RoundRobin) Pick(c Candidates, rotate uint32) int {
	return leastOutstanding(c.Len(), c.Priority, c.Usable, func(int) int64 { return 0 }, rotate)
}

// LeastOutstanding picks in the highest priority tier that has a usable candidate the one with
// the fewest outstanding requests. Ties go to the first in an order rotated by rotate, so equal
// endpoints share the work. It is the Router's default, which also breaks ties by the queue each
// server last reported (State.SetReportedQueue: vLLM's requests running and waiting).
type LeastOutstanding struct{}

// Pick implements Picker.
func (LeastOutstanding) Pick(c Candidates, rotate uint32) int {
	return leastOutstanding(c.Len(), c.Priority, c.Usable, c.Outstanding, rotate)
}

// leastOutstanding is LeastOutstanding over functions, which Failover calls directly: a call
// through the Candidates interface would move its request's state to the heap.
func leastOutstanding(n int, priority func(i int) int, usable func(i int) bool, load func(i int) int64, rotate uint32) int {
	for i := 0; i < n; {
		j := i
		for j < n && priority(j) == priority(i) {
			j++
		}
		best, bestN := -1, int64(0)
		size := j - i
		for k := range size {
			c := i + (k+int(rotate%uint32(size)))%size
			if !usable(c) {
				continue
			}
			if l := load(c); best < 0 || l < bestN {
				best, bestN = c, l
			}
		}
		if best >= 0 {
			return best
		}
		i = j
	}
	return -1
}
