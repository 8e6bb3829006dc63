package kvroute_test

import (
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/kvroute"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func redisClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// pick routes one request of hashes through x among two endpoints and returns the chosen one.
func pick(x *kvroute.Index, hashes []uint64) string {
	c := cands{{ok: true}, {ok: true}}
	p := kvroute.PickerFor(x, hashes)
	i := p.Pick(c, 0)
	kvroute.Done(p)
	return c.Name(i)
}

// Two replicas sharing a Redis route one conversation to the same endpoint: a pick on one is
// learned by the other, so the next turn, sent to the other replica, follows it. A replica
// started later learns the picks made before it started.
func TestShared(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := kvroute.ShareOptions{FlushInterval: time.Millisecond}
	a := kvroute.New("m", kvroute.Options{BlockSize: 4})
	sa := kvroute.Share(a, redisClient(t, srv.Addr), opts)
	defer sa.Close()
	b := kvroute.New("m", kvroute.Options{BlockSize: 4})
	sb := kvroute.Share(b, redisClient(t, srv.Addr), opts)
	defer sb.Close()

	turn1 := a.TokenHashes(ids(64, 1))
	// The first turn goes to ep1 (ep0 is busy then): without sharing, b would send the next
	// turn, cold to it, to ep0 (equal load, rotation 0).
	p := kvroute.PickerFor(a, turn1)
	require.Equal(t, 1, p.Pick(cands{{ok: false}, {ok: true}}, 0))
	kvroute.Done(p)

	turn2 := b.TokenHashes(append(ids(64, 1), ids(32, 2)...))
	require.Eventually(t, func() bool { return b.Matched("ep1", turn2) == len(turn1) }, 5*time.Second, 5*time.Millisecond,
		"replica b learns replica a's pick")
	assert.Equal(t, "ep1", pick(b, turn2), "the conversation's next turn, on the other replica, goes where its prefix is")

	// A replica started now applies the records already in the stream.
	c := kvroute.New("m", kvroute.Options{BlockSize: 4})
	sc := kvroute.Share(c, redisClient(t, srv.Addr), opts)
	defer sc.Close()
	require.Eventually(t, func() bool { return c.Matched("ep1", turn2) == len(turn2) }, 5*time.Second, 5*time.Millisecond,
		"a new replica warms up from the stream")

	// Another model's stream is another index.
	other := kvroute.New("other", kvroute.Options{BlockSize: 4})
	so := kvroute.Share(other, redisClient(t, srv.Addr), opts)
	defer so.Close()
	time.Sleep(50 * time.Millisecond)
	assert.Zero(t, other.Matched("ep1", turn2))

	_, applied := sa.Stats()
	assert.Equal(t, int64(1), applied, "a applied b's one pick, not its own")
}

// With Redis gone, picks stay fast and local, and sharing resumes when it is back.
func TestSharedRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	opts := kvroute.ShareOptions{FlushInterval: time.Millisecond, Timeout: 100 * time.Millisecond}
	a := kvroute.New("m", kvroute.Options{BlockSize: 4})
	sa := kvroute.Share(a, redisClient(t, srv.Addr), opts)
	defer sa.Close()
	b := kvroute.New("m", kvroute.Options{BlockSize: 4})
	sb := kvroute.Share(b, redisClient(t, srv.Addr), opts)
	defer sb.Close()

	srv.Kill()
	h := a.TokenHashes(ids(64, 3))
	start := time.Now()
	for range 100 {
		pick(a, h)
	}
	assert.Less(t, time.Since(start), 2*time.Second, "routing does not wait for Redis")
	require.Eventually(t, func() bool { d, _ := sa.Stats(); return d > 0 }, 5*time.Second, 10*time.Millisecond,
		"records that could not be sent are counted")

	srv.Restart()
	h2 := a.TokenHashes(ids(64, 4))
	require.Eventually(t, func() bool {
		pick(a, h2)
		return b.Matched("ep0", h2) > 0 || b.Matched("ep1", h2) > 0
	}, 10*time.Second, 50*time.Millisecond, "sharing resumes once Redis is back")
}

func TestSharedCloseStops(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	x := kvroute.New("m", kvroute.Options{})
	s := kvroute.Share(x, redisClient(t, srv.Addr), kvroute.ShareOptions{})
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return while the reader was blocked in XREAD")
	}
}
