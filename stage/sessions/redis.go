package sessions

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// RedisOptions configure a Redis store.
type RedisOptions struct {
	// Prefix starts every key; default "infergate".
	Prefix string
	// Timeout bounds every Redis call; default 1 s.
	Timeout time.Duration
	// MaxValueBytes bounds a stored session the store reads back (a larger value is an error,
	// not decoded); default 16 MiB. Keep it above every model's MaxBytes plus its last answer.
	MaxValueBytes int
	// Now is the clock that turns a session's expiry into a TTL; default time.Now.
	Now func() time.Time
}

// Redis is the Store shared by every gateway replica using the same Redis and prefix: one
// replica continues a conversation another began.
//
// Layout: a session is one hash, <prefix>:session:{<id>}, with fields o (owner), m (model) and d
// (the session as JSON), expiring with the session (PX); its turn lock is the string
// <prefix>:session:{<id>}:lock holding the lock's random token, expiring with the lease (SET NX
// PX). Both keys share a Cluster hash slot. Every change is one Lua script, so it is whole or
// absent: taking the lock checks the owner and returns the session in one round trip, and a
// commit writes the session, refreshes its expiry and frees the lock only while its token
// still holds the lock, so a turn that outlived its lease never overwrites a later one.
type Redis struct {
	c    rueidis.Client
	opts RedisOptions
	pfx  string
}

// NewRedis returns a store using client, which stays the caller's to close.
func NewRedis(client rueidis.Client, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "infergate"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	if opts.MaxValueBytes <= 0 {
		opts.MaxValueBytes = 16 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Redis{c: client, opts: opts, pfx: opts.Prefix + ":session:{"}
}

func (r *Redis) keys(id string) []string {
	k := r.pfx + id + "}"
	return []string{k, k + ":lock"}
}

func (r *Redis) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.opts.Timeout)
}

func ms(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }

var luaCreate = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'm', ARGV[2], 'd', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1`)

// Create implements Store.
func (r *Redis) Create(ctx context.Context, s *Session) error {
	d, err := encodeSession(s)
	if err != nil {
		return err
	}
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	n, err := luaCreate.Exec(ctx, r.c, r.keys(s.ID)[:1], []string{s.Owner, s.Model, string(d), ms(s.Expires.Sub(r.opts.Now()))}).AsInt64()
	switch {
	case err != nil:
		return fmt.Errorf("sessions: redis create: %w", err)
	case n != 1:
		return fmt.Errorf("sessions: redis create: session %s exists", s.ID)
	}
	return nil
}

// decode reads a stored session and checks it is the one asked for.
func (r *Redis) decode(id string, d []byte) (*Session, error) {
	s, err := decodeSession(d, r.opts.MaxValueBytes)
	if err != nil {
		return nil, err
	}
	if s.ID != id {
		return nil, fmt.Errorf("sessions: the value of session %s holds session %s", id, s.ID)
	}
	return s, nil
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, owner, id string) (*Session, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	k := r.keys(id)[0]
	vs, err := r.c.Do(ctx, r.c.B().Hmget().Key(k).Field("o", "d").Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("sessions: redis get: %w", err)
	}
	if len(vs) != 2 {
		return nil, fmt.Errorf("sessions: redis get: %d values", len(vs))
	}
	o, err := vs[0].ToString()
	if rueidis.IsRedisNil(err) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("sessions: redis get: %w", err)
	}
	if o != owner {
		return nil, ErrNotFound
	}
	d, err := vs[1].AsBytes()
	if err != nil {
		return nil, fmt.Errorf("sessions: redis get: %w", err)
	}
	return r.decode(id, d)
}

var luaLock = rueidis.NewLuaScript(`
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return {0} end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then return {1} end
return {2, redis.call('HGET', KEYS[1], 'd')}`)

// Lock implements Store.
func (r *Redis) Lock(ctx context.Context, owner, id string, lease time.Duration) (*Session, string, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	token := newToken()
	vs, err := luaLock.Exec(ctx, r.c, r.keys(id), []string{owner, token, ms(lease)}).ToArray()
	if err != nil {
		return nil, "", fmt.Errorf("sessions: redis lock: %w", err)
	}
	if len(vs) == 0 {
		return nil, "", errors.New("sessions: redis lock: empty reply")
	}
	switch n, err := vs[0].AsInt64(); {
	case err != nil:
		return nil, "", fmt.Errorf("sessions: redis lock: %w", err)
	case n == 0:
		return nil, "", ErrNotFound
	case n == 1:
		return nil, "", ErrBusy
	case n != 2 || len(vs) != 2:
		return nil, "", fmt.Errorf("sessions: redis lock: reply %d of %d values", n, len(vs))
	}
	d, err := vs[1].AsBytes()
	var s *Session
	if err == nil {
		s, err = r.decode(id, d)
	}
	if err != nil {
		// An unreadable value: free the lock rather than hold it for a lease.
		_ = r.Unlock(context.WithoutCancel(ctx), id, token)
		return nil, "", fmt.Errorf("sessions: redis lock: %w", err)
	}
	return s, token, nil
}

var luaRenew = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)

// Renew implements Store.
func (r *Redis) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	n, err := luaRenew.Exec(ctx, r.c, r.keys(id)[1:], []string{token, ms(lease)}).AsInt64()
	switch {
	case err != nil:
		return fmt.Errorf("sessions: redis renew: %w", err)
	case n != 1:
		return ErrLockLost
	}
	return nil
}

var luaCommit = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1`)

// Commit implements Store.
func (r *Redis) Commit(ctx context.Context, id, token string, s *Session) error {
	d, err := encodeSession(s)
	if err != nil {
		return err
	}
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	n, err := luaCommit.Exec(ctx, r.c, r.keys(id), []string{token, string(d), ms(s.Expires.Sub(r.opts.Now()))}).AsInt64()
	switch {
	case err != nil:
		return fmt.Errorf("sessions: redis commit: %w", err)
	case n == 0:
		return ErrLockLost
	case n == -1:
		return ErrNotFound
	}
	return nil
}

var luaUnlock = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1`)

// Unlock implements Store.
func (r *Redis) Unlock(ctx context.Context, id, token string) error {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	if err := luaUnlock.Exec(ctx, r.c, r.keys(id)[1:], []string{token}).Error(); err != nil {
		return fmt.Errorf("sessions: redis unlock: %w", err)
	}
	return nil
}

var luaDelete = rueidis.NewLuaScript(`
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then return false end
local m = redis.call('HGET', KEYS[1], 'm')
redis.call('DEL', KEYS[1], KEYS[2])
return m`)

// Delete implements Store.
func (r *Redis) Delete(ctx context.Context, owner, id string) (string, error) {
	ctx, cancel := r.ctx(ctx)
	defer cancel()
	m, err := luaDelete.Exec(ctx, r.c, r.keys(id), []string{owner}).ToString()
	switch {
	case rueidis.IsRedisNil(err):
		return "", ErrNotFound
	case err != nil:
		return "", fmt.Errorf("sessions: redis delete: %w", err)
	}
	return m, nil
}
