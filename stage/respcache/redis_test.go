package respcache_test

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/respcache"
	"github.com/infergate/infergate/stage/respcache/respcachetest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newRedisStore(t *testing.T, srv *redistest.Server, opts respcache.RedisOptions) *respcache.Redis {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	if opts.Timeout == 0 {
		// Production's 50 ms is a test of the machine's load here (CI runs at a load of 7 or 8,
		// where a Put that times out leaves another replica nothing to find): the tests that
		// are about the bound set it.
		opts.Timeout = 2 * time.Second
	}
	s := respcache.NewRedis(srv.NewClient(t), opts)
	t.Cleanup(s.Close)
	return s
}

func TestRedisContract(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time TTLs: a few seconds")
	}
	t.Parallel()
	respcachetest.Run(t, func(t *testing.T, ttl time.Duration) respcachetest.Harness {
		srv := redistest.Start(t)
		opts := respcache.RedisOptions{Prefix: "test:m:", TTL: ttl}
		return respcachetest.Harness{
			Store:   newRedisStore(t, srv, opts),
			Advance: func(d time.Duration) { time.Sleep(d + 20*time.Millisecond) },
			Peer:    func() respcache.Store { return newRedisStore(t, srv, opts) },
		}
	})
}

// Stores under other prefixes (other models) share nothing, Flush included.
func TestRedisPrefixes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newRedisStore(t, srv, respcache.RedisOptions{Prefix: "gw:respcache:a*:"})
	b := newRedisStore(t, srv, respcache.RedisOptions{Prefix: "gw:respcache:b:"})
	ctx := context.Background()
	require.NoError(t, a.Put(ctx, respcache.Entry{Key: "k", Response: []byte("A")}))
	require.NoError(t, b.Put(ctx, respcache.Entry{Key: "k", Response: []byte("B")}))
	got, err := b.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "B", string(got))
	n, err := a.Flush(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	got, err = b.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "B", string(got), "another prefix's flush left it (a glob character in a prefix is quoted)")
}

// While Redis is down or frozen, every call fails within the timeout (the stage bypasses the
// cache); once it is back, the store works again and reloads its index.
func TestRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for reconnections")
	}
	t.Parallel()
	srv := redistest.Start(t)
	proxy := redistest.StartProxy(t, srv.Addr)
	client := respcache.NewRedis(newClientOf(t, proxy.Addr), respcache.RedisOptions{Logger: quiet(), Timeout: 50 * time.Millisecond})
	t.Cleanup(client.Close)
	ctx := context.Background()
	v := respcachetest.Vec(0)
	require.NoError(t, client.Put(ctx, respcache.Entry{Key: "k", Partition: "p", Vector: v, Response: []byte("R")}))

	proxy.Freeze()
	// Each call ends with its own deadline (the store's Timeout), not Redis's silence: a hang
	// would be stopped only by the 20 s here, which no loaded machine comes near (3 x 50 ms).
	done := make(chan [3]error, 1)
	go func() {
		var errs [3]error
		_, errs[0] = client.Get(ctx, "k")
		_, errs[1] = client.Nearest(ctx, "p", v, 0.9)
		errs[2] = client.Put(ctx, respcache.Entry{Key: "k2", Response: []byte("R2")})
		done <- errs
	}()
	select {
	case errs := <-done:
		for i, err := range errs {
			assert.ErrorIs(t, err, context.DeadlineExceeded, "call %d ends at the store's timeout", i)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a call to a Redis that answers nothing hangs")
	}
	proxy.Thaw()

	srv.Kill()
	_, err := client.Get(ctx, "k")
	assert.Error(t, err)
	srv.Restart() // empty
	require.Eventually(t, func() bool {
		return client.Put(ctx, respcache.Entry{Key: "k3", Partition: "p", Vector: v, Response: []byte("R3")}) == nil
	}, 5*time.Second, 20*time.Millisecond)
	m, err := client.Nearest(ctx, "p", v, 0.9)
	require.NoError(t, err)
	assert.Equal(t, "R3", string(m.Response))
}

func newClientOf(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// A replica's own messages arrive after it applied them; applied again they would undo what it
// did since: its flush emptying the index after its next Put. Another replica's flush empties it.
func TestRedisOwnMessagesSkipped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := newRedisStore(t, srv, respcache.RedisOptions{Prefix: "own:"})
	ctx := context.Background()
	v := []float32{1, 0}
	require.NoError(t, s.Put(ctx, respcache.Entry{Key: "k", Partition: "p", Vector: v, Response: []byte("A")}))
	s.Deliver(true, true, "")
	m, err := s.Nearest(ctx, "p", v, 0.99)
	require.NoError(t, err)
	assert.Equal(t, "A", string(m.Response), "its own flush, late, left its later Put")
	s.Deliver(true, false, "k")
	m, err = s.Nearest(ctx, "p", v, 0.99)
	require.NoError(t, err)
	assert.Equal(t, "A", string(m.Response), "its own older Put, late, left the entry's vector")
	s.Deliver(false, true, "")
	m, err = s.Nearest(ctx, "p", v, 0.99)
	require.NoError(t, err)
	assert.Nil(t, m.Response, "another replica's flush")
}
