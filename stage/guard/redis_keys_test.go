package guard_test

import (
	"context"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/guard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisKeys: keys stored in Redis by their hash are found by their secret; lookups are cached
// for the TTL (a revoked key works until it expires from the cache); a malformed entry is an
// error, not a principal; Keys tries the configured keys first.
func TestRedisKeys(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	ctx := context.Background()
	hset := func(secret, value string) {
		require.NoError(t, c.Do(ctx, c.B().Hset().Key("gw:{keys}").FieldValue().FieldValue(guard.HashKey(secret), value).Build()).Error())
	}
	hset("sk-redis-1", `{"name":"team-r","models":["llama"],"admin":true}`)
	hset("sk-bad", `not json`)
	rk := guard.NewRedisKeys(c, guard.RedisKeysOptions{Prefix: "gw", CacheTTL: 200 * time.Millisecond})

	p, err := rk.Lookup(ctx, "sk-redis-1")
	require.NoError(t, err)
	assert.Equal(t, &guard.Principal{Name: "team-r", Models: []string{"llama"}, Admin: true}, p)
	_, err = rk.Lookup(ctx, "sk-unknown")
	assert.ErrorIs(t, err, guard.ErrUnknownKey)
	_, err = rk.Lookup(ctx, "sk-bad")
	require.Error(t, err)
	assert.NotErrorIs(t, err, guard.ErrUnknownKey)

	require.NoError(t, c.Do(ctx, c.B().Hdel().Key("gw:{keys}").Field(guard.HashKey("sk-redis-1")).Build()).Error())
	_, err = rk.Lookup(ctx, "sk-redis-1")
	require.NoError(t, err, "cached")
	require.Eventually(t, func() bool {
		_, err := rk.Lookup(ctx, "sk-redis-1")
		return err == guard.ErrUnknownKey
	}, 5*time.Second, 20*time.Millisecond, "revoked once the cache entry expires")

	static, err := guard.NewStaticKeys([]guard.KeyConfig{{Name: "cfg", SHA256: guard.HashKey("sk-cfg")}})
	require.NoError(t, err)
	hset("sk-redis-2", `{"name":"team-2"}`)
	keys := guard.Keys{static, rk}
	p, err = keys.Lookup(ctx, "sk-cfg")
	require.NoError(t, err)
	assert.Equal(t, "cfg", p.Name)
	p, err = keys.Lookup(ctx, "sk-redis-2")
	require.NoError(t, err)
	assert.Equal(t, "team-2", p.Name)
	_, err = keys.Lookup(ctx, "nope")
	assert.ErrorIs(t, err, guard.ErrUnknownKey)

	long := guard.NewRedisKeys(c, guard.RedisKeysOptions{Prefix: "gw", CacheTTL: time.Hour})
	_, err = long.Lookup(ctx, "sk-redis-2")
	require.NoError(t, err)
	srv.Kill()
	_, err = rk.Lookup(ctx, "sk-new")
	require.Error(t, err, "Redis down is an error (the caller answers 503), not an unknown key")
	assert.NotErrorIs(t, err, guard.ErrUnknownKey)
	_, again := rk.Lookup(ctx, "sk-other")
	assert.Same(t, err, again, "right after a failure, uncached keys fail at once, without asking Redis again")
	_, err = long.Lookup(ctx, "sk-new")
	require.Error(t, err)
	p, err = long.Lookup(ctx, "sk-redis-2")
	require.NoError(t, err, "cached keys still work while Redis is down")
	assert.Equal(t, "team-2", p.Name)
}
