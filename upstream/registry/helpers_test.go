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
)

// wait bounds every wait for an event; events normally arrive within milliseconds.
const wait = 5 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

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

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
