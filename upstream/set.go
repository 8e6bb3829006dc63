package upstream

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Set is a pool's endpoints over their lifetime, whatever their protocol: the configured ones
// and those added at run time (backends that registered themselves), each checked by its own
// health loop (HealthLoop) from Start until it is removed or the Set closes, and their health
// mirrored into a gauge. The protocol says, through SetHooks, how to check one endpoint and how
// to make what the checks found visible (its route table).
type Set[E comparable] struct {
	hooks SetHooks[E]
	eps   atomic.Pointer[[]E] // copy-on-write under mu
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu      sync.Mutex
	started bool
	closed  bool
}

// SetHooks are what a Set asks of its protocol's endpoints.
type SetHooks[E comparable] struct {
	// State is e's endpoint state; Config its resolved config; Context its context, which the
	// protocol derives from Set.Context and cancels when e is removed.
	State   func(e E) *State
	Config  func(e E) *Resolved
	Context func(e E) context.Context
	// DiscoveryInterval is how often a healthy endpoint's models are listed again.
	DiscoveryInterval time.Duration
	// Check checks e once (discoverDue: its models are due to be listed again) and reports
	// whether Publish must see the result (its models changed, or it passed after failing).
	Check func(ctx context.Context, e E, discoverDue bool) (publish bool)
	// Publish makes what the checks of es found visible (rebuilds the routes); es may be empty.
	// The Set's lock is not held.
	Publish func(es []E)
	// Gauge records e's health, every second from Start.
	Gauge func(e E, healthy bool)
}

// NewSet returns an empty set: Add the configured endpoints (their contexts derived from
// Context), then Start.
func NewSet[E comparable](hooks SetHooks[E]) *Set[E] {
	s := &Set[E]{hooks: hooks}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.eps.Store(&[]E{})
	return s
}

// Context ends when the Set closes: the parent of every endpoint's context.
func (s *Set[E]) Context() context.Context { return s.ctx }

// All lists the endpoints, configured ones first, in the order they came.
func (s *Set[E]) All() []E { return *s.eps.Load() }

// Closed reports whether Close was called.
func (s *Set[E]) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Go runs f in the background; Close waits for it.
func (s *Set[E]) Go(f func()) { s.wg.Go(f) }

// errDuplicate is Add's answer for a name already in the set.
var errDuplicate = errors.New("duplicate endpoint name")

// Add adds e, checked at once when the Set has started, then like the others. Names are unique:
// a second endpoint of one name is a *FieldError. admit, when set, may refuse e for the
// protocol's reasons; it runs under the Set's lock, with the name known to be new.
func (s *Set[E]) Add(e E, admit func() error) error {
	name := s.hooks.Config(e).Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("upstream: endpoint added after Close")
	}
	if slices.ContainsFunc(s.All(), func(x E) bool { return s.hooks.Config(x).Name == name }) {
		return &FieldError{Endpoint: name, Field: "name", Err: errDuplicate}
	}
	if admit != nil {
		if err := admit(); err != nil {
			return err
		}
	}
	eps := append(slices.Clone(s.All()), e)
	s.eps.Store(&eps)
	if s.started {
		s.run(e, true)
	}
	return nil
}

// Remove takes the named endpoint out of the set and calls removed with it (under the Set's
// lock, after the set no longer lists it) to stop and close it; it reports whether the endpoint
// existed.
func (s *Set[E]) Remove(name string, removed func(e E)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	eps := s.All()
	i := slices.IndexFunc(eps, func(e E) bool { return s.hooks.Config(e).Name == name })
	if i < 0 {
		return false
	}
	e := eps[i]
	eps = slices.Delete(slices.Clone(eps), i, i+1)
	s.eps.Store(&eps)
	removed(e)
	return true
}

// Start checks every endpoint once, concurrently (each bounded by its check timeout), publishes
// what the checks found in one go, so the first requests find their models, then keeps checking
// each in the background until it is removed, Close, or ctx ends.
func (s *Set[E]) Start(ctx context.Context) {
	cancel := context.AfterFunc(ctx, s.stop)
	s.wg.Go(func() {
		<-s.ctx.Done()
		cancel()
	})
	s.mu.Lock()
	s.started = true
	eps := s.All()
	s.mu.Unlock()
	publish := make([]bool, len(eps))
	var first sync.WaitGroup
	for i, e := range eps {
		first.Go(func() { publish[i] = s.hooks.Check(s.hooks.Context(e), e, true) })
	}
	first.Wait()
	var changed []E
	for i, e := range eps {
		if publish[i] {
			changed = append(changed, e)
		}
	}
	s.hooks.Publish(changed)
	s.mu.Lock()
	for _, e := range eps {
		if s.hooks.Context(e).Err() == nil {
			s.run(e, false)
		}
	}
	s.mu.Unlock()
	s.wg.Go(s.publishHealth)
}

// run keeps checking e in the background, first at once when checkFirst. Called with mu held.
func (s *Set[E]) run(e E, checkFirst bool) {
	s.wg.Go(func() {
		ctx := s.hooks.Context(e)
		if checkFirst {
			s.check(ctx, e, true)
		}
		HealthLoop(ctx, s.hooks.Config(e).CheckInterval, s.hooks.DiscoveryInterval, s.hooks.State(e).Kicks(),
			func(ctx context.Context, due bool) bool {
				s.check(ctx, e, due)
				return s.hooks.State(e).Healthy()
			})
	})
}

func (s *Set[E]) check(ctx context.Context, e E, due bool) {
	if s.hooks.Check(ctx, e, due) {
		s.hooks.Publish([]E{e})
	}
}

// publishHealth mirrors every endpoint's health into its gauge, every second.
func (s *Set[E]) publishHealth() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		for _, e := range s.All() {
			s.hooks.Gauge(e, s.hooks.State(e).Healthy())
		}
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops the checks and waits for them, and for what Go started; the endpoints stay for
// the protocol to close.
func (s *Set[E]) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}
