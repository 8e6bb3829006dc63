package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// RedisKeys is a KeyStore in Redis, shared by every replica: one hash, <prefix>:{keys}, maps
// HashKey(secret) to the key's Principal as JSON ({"name":"team-a","models":["llama"],"admin":false}).
// Add a key with
//
//	redis-cli HSET 'infergate:{keys}' "$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)" '{"name":"team-a"}'
//
// Lookups are cached for CacheTTL (found or not), so the hot path rarely reaches Redis; a revoked
// key stops working within that time.
type RedisKeys struct {
	client  rueidis.Client
	key     string
	ttl     time.Duration
	timeout time.Duration

	mu    sync.Mutex
	cache map[string]cachedKey
	// downUntil: after a failed lookup, uncached keys fail at once for a moment instead of each
	// waiting out the timeout. Native gRPC checks keys on a connection's reader goroutine, so a
	// wait there holds up every call on the connection.
	downUntil time.Time
	downErr   error
}

// downFor is how long a failed lookup makes the next ones fail at once.
const downFor = time.Second

type cachedKey struct {
	p       *Principal
	expires time.Time
}

// RedisKeysOptions configures RedisKeys.
type RedisKeysOptions struct {
	// Prefix starts the hash's name; default "infergate".
	Prefix string
	// CacheTTL is how long a lookup is reused; default 10 s.
	CacheTTL time.Duration
	// Timeout bounds one Redis lookup; default 100 ms.
	Timeout time.Duration
}

// maxCachedKeys bounds the cache, so a flood of made-up keys cannot grow it without end.
const maxCachedKeys = 10000

// NewRedisKeys returns a KeyStore reading client.
func NewRedisKeys(client rueidis.Client, opts RedisKeysOptions) *RedisKeys {
	if opts.Prefix == "" {
		opts.Prefix = "infergate"
	}
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 100 * time.Millisecond
	}
	return &RedisKeys{client: client, key: opts.Prefix + ":{keys}", ttl: opts.CacheTTL, timeout: opts.Timeout,
		cache: map[string]cachedKey{}}
}

// Lookup implements KeyStore.
func (r *RedisKeys) Lookup(ctx context.Context, secret string) (*Principal, error) {
	h := HashKey(secret)
	now := time.Now()
	r.mu.Lock()
	c, ok := r.cache[h]
	r.mu.Unlock()
	if ok && now.Before(c.expires) {
		if c.p == nil {
			return nil, ErrUnknownKey
		}
		return c.p, nil
	}
	r.mu.Lock()
	down, downErr := now.Before(r.downUntil), r.downErr
	r.mu.Unlock()
	if down {
		return nil, downErr
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	raw, err := r.client.Do(ctx, r.client.B().Hget().Key(r.key).Field(h).Build()).ToString()
	var p *Principal
	switch {
	case rueidis.IsRedisNil(err):
	case err != nil:
		err = fmt.Errorf("API keys in Redis: %w", err)
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			r.mu.Lock()
			r.downUntil, r.downErr = time.Now().Add(downFor), err
			r.mu.Unlock()
		}
		return nil, err
	default:
		p = new(Principal)
		if err := json.Unmarshal([]byte(raw), p); err != nil || p.Name == "" {
			return nil, fmt.Errorf("API keys in Redis: the entry for a key is not {\"name\": ...}: %v", err)
		}
	}
	r.mu.Lock()
	if len(r.cache) >= maxCachedKeys {
		clear(r.cache)
	}
	r.cache[h] = cachedKey{p: p, expires: now.Add(r.ttl)}
	r.mu.Unlock()
	if p == nil {
		return nil, ErrUnknownKey
	}
	return p, nil
}

// Keys tries each store in turn: the configured keys, then Redis's.
type Keys []KeyStore

// Lookup implements KeyStore.
func (ks Keys) Lookup(ctx context.Context, secret string) (*Principal, error) {
	for _, k := range ks {
		p, err := k.Lookup(ctx, secret)
		if err == nil || err != ErrUnknownKey {
			return p, err
		}
	}
	return nil, ErrUnknownKey
}
