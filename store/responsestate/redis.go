package responsestate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// Redis is the Store shared by every gateway replica using the same Redis and prefix.
//
// Layout: one string per response, <prefix>:responses:<id>, holding encodeRecord's value (its
// owner first) and expiring at the record's CreatedAt plus the TTL (SET PX). Get is one GET;
// Put one SET; Delete one script (luaDelete) that compares the owner and deletes in one step, so
// it never removes a record another owner put under the id in between. Each command touches one
// key, so a Redis Cluster needs no hash tags.
type Redis struct {
	client    rueidis.Client
	prefix    string // <prefix>:responses:
	ttl       time.Duration
	maxRecord int
	timeout   time.Duration // of each call
}

// RedisOptions configure a Redis store; a zero field is its default.
type RedisOptions struct {
	// Prefix starts every key; default "infergate". Gateways with different prefixes share a
	// Redis without seeing each other's responses.
	Prefix string
	// TTL is how long a response is kept after its CreatedAt; default DefaultTTL.
	TTL time.Duration
	// MaxRecordBytes bounds one record's stored value (its Size plus a few bytes a field);
	// default DefaultMaxRecordBytes.
	MaxRecordBytes int
	// Timeout bounds each call to Redis, so that a Redis that is down or hung fails the call
	// rather than holding it (without a deadline the client retries a read until Redis is
	// back); default 5 s.
	Timeout time.Duration
}

// NewRedis returns a store in Redis reached through client. The client stays the caller's.
func NewRedis(client rueidis.Client, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "infergate"
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.MaxRecordBytes <= 0 {
		opts.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	return &Redis{
		client:    client,
		prefix:    opts.Prefix + ":responses:",
		ttl:       opts.TTL,
		maxRecord: opts.MaxRecordBytes,
		timeout:   opts.Timeout,
	}
}

var _ Store = (*Redis)(nil)

func (r *Redis) key(id string) string { return r.prefix + id }

// luaDelete deletes a response if its value starts with the owner's prefix (ownerPrefix, never
// empty: GETRANGE answers "" for a missing key). GETRANGE reads that prefix alone, however large
// the record. KEYS: the response. ARGV: the prefix. Returns 1 if deleted, else 0.
var luaDelete = rueidis.NewLuaScript(`
if redis.call('GETRANGE', KEYS[1], 0, #ARGV[1] - 1) ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`)

// do sends one command, bounded by the store's Timeout.
func (r *Redis) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.client.Do(ctx, cmd)
}

// exec runs a script, bounded by the store's Timeout.
func (r *Redis) exec(ctx context.Context, script *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return script.Exec(ctx, r.client, keys, args)
}

// Put implements Store. A record that has expired already is not stored, and the one it
// replaces is deleted.
func (r *Redis) Put(ctx context.Context, rec *Record) error {
	if err := checkPut(rec); err != nil {
		return err
	}
	size := encodedSize(rec)
	if size > r.maxRecord {
		return fmt.Errorf("responsestate: put %s: %d bytes stored, over %d: %w", rec.ID, size, r.maxRecord, ErrTooLarge)
	}
	left := time.Until(rec.CreatedAt.Add(r.ttl))
	if left <= 0 {
		if err := r.do(ctx, r.client.B().Del().Key(r.key(rec.ID)).Build()).Error(); err != nil {
			return fmt.Errorf("responsestate: redis put %s (expired, deleting): %w", rec.ID, err)
		}
		return nil
	}
	data, err := encodeRecord(rec, size)
	if err != nil {
		return err
	}
	// PX takes whole milliseconds, at least 1.
	cmd := r.client.B().Set().Key(r.key(rec.ID)).Value(rueidis.BinaryString(data)).
		PxMilliseconds(max(left.Milliseconds(), 1)).Build()
	if err := r.do(ctx, cmd).Error(); err != nil {
		return fmt.Errorf("responsestate: redis put %s: %w", rec.ID, err)
	}
	return nil
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, owner, id string) (*Record, error) {
	if id == "" {
		return nil, fmt.Errorf("responsestate: get %q: %w", id, ErrNotFound)
	}
	s, err := r.do(ctx, r.client.B().Get().Key(r.key(id)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return nil, fmt.Errorf("responsestate: get %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("responsestate: redis get %s: %w", id, err)
	}
	// Decoded before the owner is compared, so that a corrupt value is an error whoever asks.
	// A copy: the record's values are slices of it, and the caller's to read.
	rec, err := decodeRecord([]byte(s))
	if err == nil && rec.ID != id {
		err = fmt.Errorf("%w: id %q under another id's key", errCorrupt, rec.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("responsestate: redis get %s: %w", id, err)
	}
	if rec.Owner != owner {
		return nil, fmt.Errorf("responsestate: get %s: %w", id, ErrNotFound)
	}
	return rec, nil
}

// Delete implements Store.
func (r *Redis) Delete(ctx context.Context, owner, id string) error {
	if id == "" {
		return fmt.Errorf("responsestate: delete %q: %w", id, ErrNotFound)
	}
	n, err := r.exec(ctx, luaDelete, []string{r.key(id)}, []string{ownerPrefix(owner)}).AsInt64()
	if err != nil {
		return fmt.Errorf("responsestate: redis delete %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("responsestate: delete %s: %w", id, ErrNotFound)
	}
	return nil
}
