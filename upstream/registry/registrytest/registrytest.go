// Package registrytest is the contract every registry.Store passes: registrations under leases
// that expire unless renewed by heartbeats, listed, updated and deregistered through any replica
// of a shared store, and watched (a snapshot, Synced, then every change, expiries included) from
// any replica. registry.MemoryStore and registry.RedisStore run it in their package's tests; a
// new implementation runs it from its own:
//
//	func TestContract(t *testing.T) {
//		registrytest.Run(t, func(t *testing.T) func() registry.Store {
//			srv := startServer(t) // fresh, empty state for each case
//			return func() registry.Store {
//				s := mystore.New(srv.Client(t))
//				t.Cleanup(s.Close)
//				return s
//			}
//		})
//	}
//
// Each case is a subtest named after the behaviour it checks (RegisterListDeregister, Expiry,
// ...), on stores of its own from the Factory; the cases run one after another.
package registrytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/upstream/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// Factory returns a function that makes replicas of one store holding no registration yet:
// each call returns a store over the same data (for an in-process store, the same one each time;
// for a shared one, a new store with its own client, as another gateway replica has), and over
// no other Factory call's data. Stores are closed when the test ends (t.Cleanup).
//
// The cases register leases of 100 ms and 250 ms and expect watchers to hear of their expiry
// within 5 s, with no call to the store: a store that notices expiries by sweeping must sweep
// well within that (RedisStore's harness sweeps every 20 ms).
type Factory func(t *testing.T) (replica func() registry.Store)

// Run runs every case of the contract against stores from f, one subtest per case.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			replica := f(t)
			require.NotNil(t, replica, "the factory returned no replica function")
			c.run(t, replica)
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, replica func() registry.Store)
}{
	{"RegisterListDeregister", registerListDeregister},
	{"UnknownLeases", unknownLeases},
	{"WatchSeesOtherReplicas", watchSeesOtherReplicas},
	{"Expiry", expiry},
	{"HeartbeatExtends", heartbeatExtends},
}

// wait bounds every wait for an event; events normally arrive within milliseconds.
const wait = 5 * time.Second

// leaseIDForm is the form of every lease id a store grants: 32 lowercase hex digits, so that ids
// never hold the separators of a store's own encodings (RedisStore's change messages).
var leaseIDForm = regexp.MustCompile(`^[0-9a-f]{32}$`)

// unusedLeaseID returns an id of a lease's form that no store granted.
func unusedLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	return hex.EncodeToString(b[:])
}

// chat is a chat model's backend as registry.Service stores it: input and backend types filled
// in with their defaults.
func chat(name, url string) *registryv1.Backend {
	return &registryv1.Backend{
		ModelName:   name,
		ModelType:   registryv1.ModelType_MODEL_TYPE_CHAT,
		ModelInput:  registryv1.ModelInput_MODEL_INPUT_TEXT,
		BackendType: registryv1.BackendType_BACKEND_TYPE_OPENAI,
		Url:         url,
	}
}

func registerListDeregister(t *testing.T, replica func() registry.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	be := chat("llama", "http://127.0.0.1:1")
	l, err := a.Register(ctx, be, 10*time.Second)
	require.NoError(t, err)
	assert.Regexp(t, leaseIDForm, l.ID, "lease id %q", l.ID)
	assert.Equal(t, 10*time.Second, l.TTL)
	assert.WithinDuration(t, time.Now().Add(10*time.Second), l.Expires, 2*time.Second)

	// Every replica lists it, with the backend as registered.
	got := listed(t, b)
	require.Contains(t, got, l.ID)
	assert.True(t, proto.Equal(be, got[l.ID].Backend), "backend %v", got[l.ID].Backend)
	assert.Equal(t, 10*time.Second, got[l.ID].TTL)

	l2, err := b.Register(ctx, chat("other", "http://127.0.0.1:2"), time.Minute)
	require.NoError(t, err)
	assert.NotEqual(t, l.ID, l2.ID)
	assert.Len(t, listed(t, a), 2)

	require.NoError(t, b.Deregister(ctx, l.ID), "deregistered through another replica")
	assert.NotContains(t, listed(t, a), l.ID)
	assert.Contains(t, listed(t, a), l2.ID)
	assert.ErrorIs(t, a.Deregister(ctx, l.ID), registry.ErrNotFound)
	_, err = a.Heartbeat(ctx, l.ID)
	assert.ErrorIs(t, err, registry.ErrNotFound)
	_, err = a.Update(ctx, l.ID, be, time.Second)
	assert.ErrorIs(t, err, registry.ErrNotFound)
}

func unknownLeases(t *testing.T, replica func() registry.Store) {
	s := replica()
	ctx := context.Background()
	for _, id := range []string{"", "nope", unusedLeaseID(), "0123456789abcdef0123456789ABCDEF", "x:1:y"} {
		_, err := s.Heartbeat(ctx, id)
		assert.ErrorIs(t, err, registry.ErrNotFound, "heartbeat %q", id)
		assert.ErrorIs(t, s.Deregister(ctx, id), registry.ErrNotFound, "deregister %q", id)
		_, err = s.Update(ctx, id, chat("m", "http://h"), time.Second)
		assert.ErrorIs(t, err, registry.ErrNotFound, "update %q", id)
	}
	assert.Empty(t, listed(t, s))
}

// Watchers on every replica see registrations made on any replica: first what is there, then
// each change.
func watchSeesOtherReplicas(t *testing.T, replica func() registry.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	before, err := a.Register(ctx, chat("before", "http://127.0.0.1:1"), time.Minute)
	require.NoError(t, err)

	w := watch(t, b)
	require.Eventually(t, w.synced, wait, 5*time.Millisecond)
	evs := w.all()
	require.Len(t, evs, 2, "the snapshot, then Synced: %v", evs)
	assert.Equal(t, registry.Event{Type: registry.Added, LeaseID: before.ID, Backend: evs[0].Backend}, evs[0])
	assert.Equal(t, "before", evs[0].Backend.GetModelName())
	assert.Equal(t, registry.Synced, evs[1].Type)

	added, err := a.Register(ctx, chat("after", "http://127.0.0.1:2"), time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.has(registry.Added, added.ID) }, wait, 5*time.Millisecond)
	assert.Equal(t, "after", w.find(registry.Added, added.ID).Backend.GetModelName())

	updated := chat("after", "http://127.0.0.1:3")
	_, err = a.Update(ctx, added.ID, updated, time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.has(registry.Updated, added.ID) }, wait, 5*time.Millisecond)
	assert.True(t, proto.Equal(updated, w.find(registry.Updated, added.ID).Backend))
	assert.True(t, proto.Equal(updated, listed(t, b)[added.ID].Backend))

	require.NoError(t, a.Deregister(ctx, before.ID))
	require.Eventually(t, func() bool { return w.has(registry.Removed, before.ID) }, wait, 5*time.Millisecond)
	assert.Equal(t, "before", w.find(registry.Removed, before.ID).Backend.GetModelName(), "a removal carries the backend it removes")

	assert.Equal(t, []string{added.ID}, keys(w.live()))
	// Heartbeats change nothing a watcher cares about.
	n := len(w.all())
	_, err = a.Heartbeat(ctx, added.ID)
	require.NoError(t, err)
	marker, err := a.Register(ctx, chat("marker", "http://127.0.0.1:4"), time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.has(registry.Added, marker.ID) }, wait, 5*time.Millisecond)
	assert.Len(t, w.all(), n+1, "only the marker's event after the heartbeat: %v", w.all()[n:])
}

// A lease nobody renews expires, and every watcher hears of it, with no call to the store.
func expiry(t *testing.T, replica func() registry.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	w := watch(t, b)
	require.Eventually(t, w.synced, wait, 5*time.Millisecond)

	short, err := a.Register(ctx, chat("short", "http://127.0.0.1:1"), 100*time.Millisecond)
	require.NoError(t, err)
	long, err := a.Register(ctx, chat("long", "http://127.0.0.1:2"), time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.has(registry.Removed, short.ID) }, wait, 5*time.Millisecond)
	assert.Equal(t, "short", w.find(registry.Removed, short.ID).Backend.GetModelName())
	assert.NotContains(t, listed(t, a), short.ID)
	assert.Contains(t, listed(t, a), long.ID)
	assert.Equal(t, []string{long.ID}, keys(w.live()))

	// An expired lease cannot be renewed: the backend must register again.
	_, err = a.Heartbeat(ctx, short.ID)
	assert.ErrorIs(t, err, registry.ErrNotFound)
	assert.ErrorIs(t, b.Deregister(ctx, short.ID), registry.ErrNotFound)
}

// Heartbeats keep a lease alive across many ttls; each one moves the expiry.
func heartbeatExtends(t *testing.T, replica func() registry.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	w := watch(t, b)
	// A ttl long enough that a loaded machine (CI runs packages side by side) does not stall a
	// renewal past it; the renewals still carry the lease over twice its ttl.
	const ttl = time.Second
	l, err := a.Register(ctx, chat("kept", "http://127.0.0.1:1"), ttl)
	require.NoError(t, err)
	prev := l.Expires
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); {
		time.Sleep(ttl / 10)
		hb, err := b.Heartbeat(ctx, l.ID)
		require.NoError(t, err, "renewed in time, the lease stays live")
		assert.Equal(t, ttl, hb.TTL)
		assert.False(t, hb.Expires.Before(prev), "expiry moves forward")
		prev = hb.Expires
	}
	assert.Greater(t, prev.Sub(l.Expires), ttl, "renewals moved the expiry past the first ttl")
	assert.Contains(t, listed(t, a), l.ID)
	assert.False(t, w.has(registry.Removed, l.ID))

	// Once heartbeats stop, it expires.
	require.Eventually(t, func() bool { return w.has(registry.Removed, l.ID) }, wait, 5*time.Millisecond)
}

// recorder collects what a watcher sees.
type recorder struct {
	mu     sync.Mutex
	events []registry.Event
}

func watch(t *testing.T, s registry.Store) *recorder {
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, r.add) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.ErrorIs(t, err, context.Canceled)
		case <-time.After(wait):
			t.Error("Watch did not return after its context ended")
		}
	})
	return r
}

func (r *recorder) add(ev registry.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) all() []registry.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// has reports whether an event of type typ for lease id has been seen.
func (r *recorder) has(typ registry.EventType, id string) bool {
	return slices.ContainsFunc(r.all(), func(ev registry.Event) bool { return ev.Type == typ && ev.LeaseID == id })
}

func (r *recorder) find(typ registry.EventType, id string) registry.Event {
	for _, ev := range r.all() {
		if ev.Type == typ && ev.LeaseID == id {
			return ev
		}
	}
	return registry.Event{}
}

func (r *recorder) synced() bool {
	return slices.ContainsFunc(r.all(), func(ev registry.Event) bool { return ev.Type == registry.Synced })
}

// live is the set of lease ids the events describe, replayed in order.
func (r *recorder) live() map[string]*registryv1.Backend {
	m := map[string]*registryv1.Backend{}
	for _, ev := range r.all() {
		switch ev.Type {
		case registry.Added, registry.Updated:
			m[ev.LeaseID] = ev.Backend
		case registry.Removed:
			delete(m, ev.LeaseID)
		}
	}
	return m
}

func listed(t *testing.T, s registry.Store) map[string]registry.Registration {
	t.Helper()
	regs, err := s.List(context.Background())
	require.NoError(t, err)
	m := map[string]registry.Registration{}
	for _, r := range regs {
		m[r.ID] = r
	}
	return m
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
