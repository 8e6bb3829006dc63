package respcache_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/lib/embed"
	"github.com/infergate/infergate/stage/respcache"
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

// Replicas sharing a Redis check a lexical hit's words too: the words travel with the entry, so
// a one-word change asked through another replica is a miss there as well, and a case and
// punctuation variant a hit.
func TestReplicasCheckWords(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	up := newUpstream(t)
	replica := func() *gw {
		store := newRedisStore(t, srv, respcache.RedisOptions{Prefix: "gw:respcache:m:"})
		return startGateway(t, up, respcache.Options{Mode: respcache.ModeSemantic, Embedder: embed.NewLexical(0), Store: store})
	}
	a, b := replica(), replica()
	q := prompt(60, "Which region had the highest revenue this quarter?", "")
	// Redis slower than the store's 50 ms on a loaded machine is a bypass: retried.
	require.Eventually(t, func() bool { return a.chat(t, chatReq(q)).cache() == "miss" }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return strings.HasPrefix(b.chat(t, chatReq(strings.ToUpper(q)), "Cache-Control", "no-store").cache(), "semantic; ")
	}, 5*time.Second, 10*time.Millisecond, "the same words, through the other replica's index")
	swapped := strings.Replace(q, "highest", "lowest", 1)
	assert.Equal(t, "miss", b.chat(t, chatReq(swapped), "Cache-Control", "no-store").cache(), "another question")
}

// forgetWords stores entries as a gateway from before words were kept did: without them.
type forgetWords struct{ respcache.Store }

func (s forgetWords) Put(ctx context.Context, e respcache.Entry) error {
	e.Words = ""
	return s.Store.Put(ctx, e)
}

// An entry without words (stored by an older gateway) is still an exact hit, but never a lexical
// semantic one: nothing tells whether its words are the same. Redis gives none for an entry
// whose hash has no words at all.
func TestEntriesWithoutWords(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for name, store := range map[string]respcache.Store{
		"memory": respcache.NewMemory(respcache.MemoryOptions{}),
		"redis":  newRedisStore(t, srv, respcache.RedisOptions{Prefix: "old:"}),
	} {
		t.Run(name, func(t *testing.T) {
			s := newStage(t, respcache.Options{Mode: respcache.ModeSemantic, Embedder: embed.NewLexical(0), Store: forgetWords{store}})
			require.Eventually(t, func() bool { return s.ask(t, "What is the capital of France?") == "miss" }, 5*time.Second, 10*time.Millisecond)
			require.Eventually(t, func() bool { return s.ask(t, "What is the capital of France?") == "hit" }, 5*time.Second, 10*time.Millisecond)
			assert.Equal(t, "miss", s.ask(t, "what is the capital of france"))
		})
	}

	// A hash written without a "w" field at all.
	client := srv.NewClient(t)
	st := newRedisStore(t, srv, respcache.RedisOptions{Prefix: "older:"})
	v := []float32{1, 0}
	rec := respcache.MetaRecord("p", v, 1, time.Now().Add(time.Hour))
	require.NoError(t, client.Do(t.Context(), client.B().Hset().Key("older:e:k").FieldValue().
		FieldValue("m", string(rec)).FieldValue("r", "R").Build()).Error())
	require.NoError(t, client.Do(t.Context(), client.B().Publish().Channel("older:events").
		Message(string(append(append([]byte{'a'}, make([]byte, 8)...), append([]byte{1, 'k'}, rec...)...))).Build()).Error())
	require.Eventually(t, func() bool {
		m, err := st.Nearest(t.Context(), "p", v, 0.9)
		return err == nil && string(m.Response) == "R" && m.Words == ""
	}, 5*time.Second, 10*time.Millisecond, "found, without words")
}
