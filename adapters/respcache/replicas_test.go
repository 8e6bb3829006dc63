package respcache_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/respcache"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two gateway replicas sharing a Redis: an answer produced through one is a hit through the
// other, exact and semantic, within a second; a replica started later (a restart) finds the
// entries already there; owners stay apart across replicas too.
func TestReplicasShareThroughRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := newUpstream(t)
	emb := &bagEmbedder{}
	var store *respcache.Redis
	replica := func() *gw {
		store = newRedisStore(t, srv, respcache.RedisOptions{Prefix: "gw:respcache:m:"})
		return startGateway(t, up, respcache.Options{Mode: respcache.ModeSemantic, Embedder: emb, Store: store})
	}
	a, b := replica(), replica()

	q := chatReq("What is the tallest mountain?")
	require.Equal(t, "miss", a.chat(t, q, "X-Test-Key", "alice").cache())
	assert.Equal(t, "hit", b.chat(t, q, "X-Test-Key", "alice").cache(), "exact, through the other replica")
	assert.Equal(t, "miss", b.chat(t, q, "X-Test-Key", "bob").cache(), "not another key's")
	require.Eventually(t, func() bool {
		return b.chat(t, chatReq("what is the tallest mountain"), "X-Test-Key", "alice").cache() == "semantic; similarity=1.000"
	}, time.Second, 10*time.Millisecond, "semantic, through the other replica's index")
	calls := up.calls.Load()

	restarted := replica()
	require.Eventually(t, func() bool { return store.Stats().Entries == 2 }, time.Second, 5*time.Millisecond,
		"a new replica loads the entries from Redis")
	assert.Equal(t, "semantic; similarity=1.000",
		restarted.chat(t, chatReq("What is the tallest mountain"), "X-Test-Key", "alice").cache())
	assert.Equal(t, calls, up.calls.Load())

	// Streams stored through one replica replay through the other.
	require.Equal(t, "miss", b.chat(t, chatReq("Count to three", `"stream":true`)).cache())
	hit := a.chat(t, chatReq("Count to three", `"stream":true`))
	assert.Equal(t, "hit", hit.cache())
	text, _, done := streamed(t, hit.body)
	assert.Equal(t, "Answer to: Count to three", text)
	assert.True(t, done)

	n, err := a.cache.Flush(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 3, n, "the three answers stored")
	assert.Equal(t, "miss", b.chat(t, q, "X-Test-Key", "alice").cache(), "flushed for every replica")
}

// With Redis down, requests bypass the cache and are answered all the same; once it is back,
// caching resumes.
func TestRedisDownBypasses(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a reconnection")
	}
	t.Parallel()
	srv := redistest.Start(t)
	up := newUpstream(t)
	g := startGateway(t, up, respcache.Options{Store: newRedisStore(t, srv, respcache.RedisOptions{})})
	q := chatReq("Is Redis up?")
	require.Equal(t, "miss", g.chat(t, q).cache())
	srv.Kill()
	for range 3 {
		res := g.chat(t, q)
		require.Equal(t, http.StatusOK, res.status, res.body)
		assert.Equal(t, "bypass; reason=store", res.cache())
		assert.Equal(t, "Answer to: Is Redis up?", decode(t, res.body).content())
	}
	assert.EqualValues(t, 4, up.calls.Load())
	srv.Restart()
	require.Eventually(t, func() bool { return g.chat(t, q).cache() == "miss" }, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, "hit", g.chat(t, q).cache())
}
