// Package registry lets backends register themselves at run time: the Connect/gRPC
// RegistryService (schema/infergate/registry/v1), the stores that hold registrations under leases
// renewed by heartbeats (MemoryStore in-process, RedisStore shared by every gateway replica), and
// the Applier that turns registrations into served models: OpenAI endpoints of an openai.Proxy for
// chat, completions and embeddings models, and endpoints of a kserveproxy.Proxy (KServeTensors)
// for tensor models. Either way a lease is an endpoint named EndpointName(lease), balanced and
// failed over with the others serving its model.
//
// Wiring, per gateway replica:
//
//	store := registry.NewMemoryStore()                        // or NewRedisStore(client, opts)
//	svc := registry.NewService(store, registry.ServiceOptions{})
//	cfg.Services = append(cfg.Services, svc.Mount)            // gateway.Config
//	pool, err := kserveproxy.New(kserveproxy.Options{Endpoints: upstreams, Registry: reg}) // the
//	pool.Start(ctx)                                           // configured kserve upstreams' pool
//	tensors := registry.KServeTensors{Pool: pool}             // reg: the gateway's engines.Registry
//	ap := registry.NewApplier(registry.ApplierOptions{OpenAI: proxy, Tensors: tensors})
//	go ap.Run(ctx, store)                                     // until ctx ends
//
// and at shutdown: cancel ctx, pool.Close() (after the gateway drained), store.Close().
package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
)

// ErrNotFound is returned for a lease that expired, was deregistered or never existed.
var ErrNotFound = errors.New("registry: lease not found")

// Store holds registrations, each under a lease that expires when it is not renewed for its ttl.
// Both implementations pass the same contract test suite, package registrytest, which a new
// implementation runs too.
//
// Backends passed in and handed out are shared, not copied: callers must not modify them.
type Store interface {
	// Register stores b under a new lease that lives for ttl (> 0) unless renewed.
	Register(ctx context.Context, b *registryv1.Backend, ttl time.Duration) (Lease, error)
	// Update replaces the backend of a live lease and renews it for ttl; ErrNotFound when the
	// lease is not live.
	Update(ctx context.Context, leaseID string, b *registryv1.Backend, ttl time.Duration) (Lease, error)
	// Heartbeat renews a live lease for its ttl; ErrNotFound when the lease is not live.
	Heartbeat(ctx context.Context, leaseID string) (Lease, error)
	// Deregister ends a live lease at once; ErrNotFound when the lease is not live.
	Deregister(ctx context.Context, leaseID string) error
	// List returns the live registrations, in no particular order.
	List(ctx context.Context) ([]Registration, error)
	// Watch calls fn with an Added event for each live registration, then Synced, then an event
	// for each change, until ctx ends (it returns ctx's error). Watchers learn of changes made
	// through any store sharing the same data (every replica, for RedisStore) and of expiries,
	// which happen whether or not anyone calls the store. After a lost connection a watcher
	// resyncs: fn gets the difference between what it had and what is there now, then Synced.
	// fn is called from one goroutine at a time and should return quickly.
	Watch(ctx context.Context, fn func(Event)) error
	// Close releases the store's background work (RedisStore's sweeper); watchers end with
	// their contexts.
	Close()
}

// Lease is a granted lease.
type Lease struct {
	ID  string
	TTL time.Duration
	// Expires is when the lease ends unless renewed, by the store's clock (Redis server time
	// for RedisStore).
	Expires time.Time
}

// Registration is a live lease and its backend.
type Registration struct {
	Lease
	Backend *registryv1.Backend
}

// EventType says what happened to a registration.
type EventType int

const (
	// Added: a registration appeared (or was there when the watch started).
	Added EventType = iota + 1
	// Updated: a lease's backend was replaced (Store.Update).
	Updated
	// Removed: a lease ended (deregistered or expired); Backend is the one it had.
	Removed
	// Synced: the events so far describe every live registration (after the start of a watch
	// and after each resync). LeaseID and Backend are empty.
	Synced
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "added"
	case Updated:
		return "updated"
	case Removed:
		return "removed"
	case Synced:
		return "synced"
	}
	return "unknown"
}

// Event is one change seen by a watcher.
type Event struct {
	Type    EventType
	LeaseID string
	Backend *registryv1.Backend
}

// newLeaseID returns 32 random lowercase hex digits.
func newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	return hex.EncodeToString(b[:])
}

// validLeaseID reports whether id has newLeaseID's form; other ids name no lease. Stores rely on
// it: ids never hold the separators of RedisStore's messages.
func validLeaseID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// queue is an unbounded FIFO with a wake-up channel, so producers (a store under its lock, a
// Redis connection's reader) never block on a slow watcher.
type queue[T any] struct {
	mu    sync.Mutex
	items []T
	wake  chan struct{}
}

func newQueue[T any]() *queue[T] { return &queue[T]{wake: make(chan struct{}, 1)} }

func (q *queue[T]) push(v T) {
	q.mu.Lock()
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *queue[T]) drain() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}
