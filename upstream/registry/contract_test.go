package registry_test

import (
	"testing"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/upstream/registry"
	"github.com/infergate/infergate/upstream/registry/registrytest"
)

// TestContract runs registrytest's suite against both implementations. A replica is the same
// MemoryStore, or a RedisStore with its own client on the same redis-server.
func TestContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		registrytest.Run(t, func(t *testing.T) func() registry.Store {
			s := registry.NewMemoryStore()
			t.Cleanup(s.Close)
			return func() registry.Store { return s }
		})
	})
	t.Run("redis", func(t *testing.T) {
		registrytest.Run(t, func(t *testing.T) func() registry.Store {
			srv := redistest.Start(t)
			return func() registry.Store { return registry.NewRedisReplica(t, srv) }
		})
	})
}
