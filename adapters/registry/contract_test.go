package registry

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// wait bounds every wait for an event; events normally arrive within milliseconds.
const wait = 5 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// stores runs the contract against both implementations. replica returns another store over the
// same data: the same MemoryStore, or a RedisStore with its own client on the same redis-server.
func stores(t *testing.T, contract func(t *testing.T, replica func() Store)) {
	t.Run("memory", func(t *testing.T) {
		s := NewMemoryStore()
		t.Cleanup(s.Close)
		contract(t, func() Store { return s })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		contract(t, func() Store { return newRedisReplica(t, srv) })
	})
}

func newRedisReplica(t *testing.T, srv *redistest.Server) *RedisStore {
	s := NewRedisStore(srv.NewClient(t), RedisOptions{SweepInterval: 20 * time.Millisecond, RetryInterval: 20 * time.Millisecond, Logger: quiet()})
	t.Cleanup(s.Close)
	return s
}

func chat(name, url string) *registryv1.Backend {
	return normalize(&registryv1.Backend{ModelName: name, ModelType: registryv1.ModelType_MODEL_TYPE_CHAT, Url: url})
}

// recorder collects what a watcher sees.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func watch(t *testing.T, s Store) *recorder {
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

func (r *recorder) add(ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// has reports whether an event of type typ for lease id has been seen.
func (r *recorder) has(typ EventType, id string) bool {
	return slices.ContainsFunc(r.all(), func(ev Event) bool { return ev.Type == typ && ev.LeaseID == id })
}

func (r *recorder) find(typ EventType, id string) Event {
	for _, ev := range r.all() {
		if ev.Type == typ && ev.LeaseID == id {
			return ev
		}
	}
	return Event{}
}

func (r *recorder) synced() bool {
	return slices.ContainsFunc(r.all(), func(ev Event) bool { return ev.Type == Synced })
}

// live is the set of lease ids the events describe, replayed in order.
func (r *recorder) live() map[string]*registryv1.Backend {
	m := map[string]*registryv1.Backend{}
	for _, ev := range r.all() {
		switch ev.Type {
		case Added, Updated:
			m[ev.LeaseID] = ev.Backend
		case Removed:
			delete(m, ev.LeaseID)
		}
	}
	return m
}

func listed(t *testing.T, s Store) map[string]Registration {
	t.Helper()
	regs, err := s.List(context.Background())
	require.NoError(t, err)
	m := map[string]Registration{}
	for _, r := range regs {
		m[r.ID] = r
	}
	return m
}

func TestStoreRegisterListDeregister(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		be := chat("llama", "http://127.0.0.1:1")
		l, err := a.Register(ctx, be, 10*time.Second)
		require.NoError(t, err)
		assert.True(t, validLeaseID(l.ID), "lease id %q", l.ID)
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
		assert.ErrorIs(t, a.Deregister(ctx, l.ID), ErrNotFound)
		_, err = a.Heartbeat(ctx, l.ID)
		assert.ErrorIs(t, err, ErrNotFound)
		_, err = a.Update(ctx, l.ID, be, time.Second)
		assert.ErrorIs(t, err, ErrNotFound)
	})
}

func TestStoreUnknownLeases(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		s := replica()
		ctx := context.Background()
		for _, id := range []string{"", "nope", newLeaseID(), "0123456789abcdef0123456789ABCDEF", "x:1:y"} {
			_, err := s.Heartbeat(ctx, id)
			assert.ErrorIs(t, err, ErrNotFound, "heartbeat %q", id)
			assert.ErrorIs(t, s.Deregister(ctx, id), ErrNotFound, "deregister %q", id)
			_, err = s.Update(ctx, id, chat("m", "http://h"), time.Second)
			assert.ErrorIs(t, err, ErrNotFound, "update %q", id)
		}
		assert.Empty(t, listed(t, s))
	})
}

// Watchers on every replica see registrations made on any replica: first what is there, then
// each change.
func TestStoreWatchSeesOtherReplicas(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		before, err := a.Register(ctx, chat("before", "http://127.0.0.1:1"), time.Minute)
		require.NoError(t, err)

		w := watch(t, b)
		require.Eventually(t, w.synced, wait, 5*time.Millisecond)
		evs := w.all()
		require.Len(t, evs, 2, "the snapshot, then Synced: %v", evs)
		assert.Equal(t, Event{Type: Added, LeaseID: before.ID, Backend: evs[0].Backend}, evs[0])
		assert.Equal(t, "before", evs[0].Backend.GetModelName())
		assert.Equal(t, Synced, evs[1].Type)

		added, err := a.Register(ctx, chat("after", "http://127.0.0.1:2"), time.Minute)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return w.has(Added, added.ID) }, wait, 5*time.Millisecond)
		assert.Equal(t, "after", w.find(Added, added.ID).Backend.GetModelName())

		updated := chat("after", "http://127.0.0.1:3")
		_, err = a.Update(ctx, added.ID, updated, time.Minute)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return w.has(Updated, added.ID) }, wait, 5*time.Millisecond)
		assert.True(t, proto.Equal(updated, w.find(Updated, added.ID).Backend))
		assert.True(t, proto.Equal(updated, listed(t, b)[added.ID].Backend))

		require.NoError(t, a.Deregister(ctx, before.ID))
		require.Eventually(t, func() bool { return w.has(Removed, before.ID) }, wait, 5*time.Millisecond)
		assert.Equal(t, "before", w.find(Removed, before.ID).Backend.GetModelName(), "a removal carries the backend it removes")

		assert.Equal(t, []string{added.ID}, keys(w.live()))
		// Heartbeats change nothing a watcher cares about.
		n := len(w.all())
		_, err = a.Heartbeat(ctx, added.ID)
		require.NoError(t, err)
		marker, err := a.Register(ctx, chat("marker", "http://127.0.0.1:4"), time.Minute)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return w.has(Added, marker.ID) }, wait, 5*time.Millisecond)
		assert.Len(t, w.all(), n+1, "only the marker's event after the heartbeat: %v", w.all()[n:])
	})
}

// A lease nobody renews expires, and every watcher hears of it, with no call to the store.
func TestStoreExpiry(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		w := watch(t, b)
		require.Eventually(t, w.synced, wait, 5*time.Millisecond)

		short, err := a.Register(ctx, chat("short", "http://127.0.0.1:1"), 100*time.Millisecond)
		require.NoError(t, err)
		long, err := a.Register(ctx, chat("long", "http://127.0.0.1:2"), time.Minute)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return w.has(Removed, short.ID) }, wait, 5*time.Millisecond)
		assert.Equal(t, "short", w.find(Removed, short.ID).Backend.GetModelName())
		assert.NotContains(t, listed(t, a), short.ID)
		assert.Contains(t, listed(t, a), long.ID)
		assert.Equal(t, []string{long.ID}, keys(w.live()))

		// An expired lease cannot be renewed: the backend must register again.
		_, err = a.Heartbeat(ctx, short.ID)
		assert.ErrorIs(t, err, ErrNotFound)
		assert.ErrorIs(t, b.Deregister(ctx, short.ID), ErrNotFound)
	})
}

// Heartbeats keep a lease alive across many ttls; each one moves the expiry.
func TestStoreHeartbeatExtends(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		w := watch(t, b)
		const ttl = 250 * time.Millisecond
		l, err := a.Register(ctx, chat("kept", "http://127.0.0.1:1"), ttl)
		require.NoError(t, err)
		prev := l.Expires
		for end := time.Now().Add(4 * ttl); time.Now().Before(end); {
			time.Sleep(ttl / 8)
			hb, err := b.Heartbeat(ctx, l.ID)
			require.NoError(t, err, "renewed in time, the lease stays live")
			assert.Equal(t, ttl, hb.TTL)
			assert.False(t, hb.Expires.Before(prev), "expiry moves forward")
			prev = hb.Expires
		}
		assert.Greater(t, prev.Sub(l.Expires), ttl, "renewals moved the expiry past the first ttl")
		assert.Contains(t, listed(t, a), l.ID)
		assert.False(t, w.has(Removed, l.ID))

		// Once heartbeats stop, it expires.
		require.Eventually(t, func() bool { return w.has(Removed, l.ID) }, wait, 5*time.Millisecond)
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
