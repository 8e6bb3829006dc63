package batchstate_test

import (
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/batchstate/batchstatetest"
)

// TestContract runs batchstatetest's suite against both implementations. A replica is the same
// Memory, or a Redis store with its own client on the same redis-server (as another gateway
// replica would have).
func TestContract(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		batchstatetest.Run(t, func(_ *testing.T, ttl time.Duration) func() batchstate.Store {
			s := batchstate.NewMemory(batchstate.MemoryOptions{TTL: ttl})
			return func() batchstate.Store { return s }
		})
	})
	t.Run("redis", func(t *testing.T) {
		batchstatetest.Run(t, func(t *testing.T, ttl time.Duration) func() batchstate.Store {
			srv := redistest.Start(t)
			return func() batchstate.Store {
				return batchstate.NewRedis(srv.NewClient(t), batchstate.RedisOptions{Prefix: "test", TTL: ttl})
			}
		})
	})
}
