package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/redis/rueidis"
)

// RedisStore keeps registrations in Redis, shared by every gateway replica using the same Redis
// and prefix.
//
// Layout (one hash tag, so every key lives in one Cluster slot and one script can touch them all):
//
//	<prefix>:{registry}:leases    sorted set: lease id -> expiry (ms, Redis server time)
//	<prefix>:{registry}:backends  hash: lease id -> backend (protobuf)
//	<prefix>:{registry}:ttls      hash: lease id -> ttl (ms)
//	<prefix>:{registry}:seq       change counter
//	<prefix>:{registry}:changes   pub/sub channel of changes (redis_codec.go)
//
// Every change is one Lua script that reads the clock with Redis TIME (replicas' clocks never
// matter), bumps the counter and publishes the change. Expiry: every replica's store runs a
// sweeper that calls one script each SweepInterval; it removes the leases whose expiry has
// passed and publishes their removal, so an expired backend disappears from every replica
// within about a SweepInterval even when nobody calls the store for it. Sweeps from several
// replicas are harmless: the script is atomic, so each expiry is removed and published once.
// (Redis key expiry with keyspace notifications would need server configuration, gives no
// timing guarantee for expired keys nobody reads, and is not delivered across a Cluster.)
// Reads (List, snapshots) leave out leases past their expiry even before a sweep removes them.
//
// Watchers subscribe to the channel, then load a snapshot (with the counter's value) once the
// subscription is confirmed, and again after every resubscription (a reconnect, a Redis
// restart): notifications at or below the snapshot's counter are already in it and are dropped,
// and a gap in the counter (a lost notification) triggers a resync.
type RedisStore struct {
	client  rueidis.Client
	opts    RedisOptions
	keys    []string // leases, backends, ttls, seq
	channel string

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// RedisOptions configures a RedisStore.
type RedisOptions struct {
	// Prefix starts every key and the channel; default "infergate". Gateways with different
	// prefixes share a Redis without seeing each other's registrations.
	Prefix string
	// SweepInterval is how often this replica removes expired leases; default 250 ms.
	SweepInterval time.Duration
	// RetryInterval is how long a watcher waits before retrying after Redis failed it; default 200 ms.
	RetryInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// sweepBatch bounds the leases one sweep removes, so one script never runs long.
const sweepBatch = 256

// backgroundTimeout bounds the store's own calls, a sweep or a watcher's snapshot, as
// Service.StoreTimeout bounds the callers': a Redis that hangs fails them (logged, retried)
// rather than holding the sweeper or the watcher until the client finds the connection dead,
// minutes later.
const backgroundTimeout = 2 * time.Second

// NewRedisStore returns a store in Redis reached through client, and starts its sweeper. The
// client stays the caller's: Close stops the sweeper, not the client.
func NewRedisStore(client rueidis.Client, opts RedisOptions) *RedisStore {
	if opts.Prefix == "" {
		opts.Prefix = "infergate"
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = 250 * time.Millisecond
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	base := opts.Prefix + ":{registry}:"
	s := &RedisStore{
		client:  client,
		opts:    opts,
		keys:    []string{base + "leases", base + "backends", base + "ttls", base + "seq"},
		channel: base + "changes",
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Go(func() { s.sweepLoop(ctx) })
	return s
}

// Close stops the sweeper.
func (s *RedisStore) Close() {
	s.cancel()
	s.wg.Wait()
}

// The scripts. KEYS are always s.keys (leases, backends, ttls, seq). The clock is Redis TIME in ms.
const luaNow = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// ARGV: id, ttl ms, backend, channel, "1" to update a live lease (else create it).
// Returns the expiry, or nil when updating a lease that is not live.
var luaRegister = rueidis.NewLuaScript(luaNow + `
local id = ARGV[1]
local op = '+'
local cur = redis.call('ZSCORE', KEYS[1], id)
if ARGV[5] == '1' then
  if not cur or tonumber(cur) <= now then return false end
  op = '~'
elseif cur then
  return redis.error_reply('ERR lease id in use')
end
local exp = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], exp, id)
redis.call('HSET', KEYS[2], id, ARGV[3])
redis.call('HSET', KEYS[3], id, ARGV[2])
local seq = redis.call('INCR', KEYS[4])
redis.call('PUBLISH', ARGV[4], op .. string.format('%d', seq) .. ':' .. id .. ':' .. ARGV[3])
return exp
`)

// ARGV: id. Returns {expiry, ttl}, or nil when the lease is not live.
var luaHeartbeat = rueidis.NewLuaScript(luaNow + `
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) <= now then return false end
local ttl = tonumber(redis.call('HGET', KEYS[3], ARGV[1]))
if not ttl then return false end
local exp = now + ttl
redis.call('ZADD', KEYS[1], 'XX', exp, ARGV[1])
return {exp, ttl}
`)

// ARGV: id, channel. Returns 1 when a live lease was removed, 0 otherwise (an expired lease
// still there is removed too, and its removal published).
var luaDeregister = rueidis.NewLuaScript(luaNow + `
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local seq = redis.call('INCR', KEYS[4])
redis.call('PUBLISH', ARGV[2], '-' .. string.format('%d', seq) .. ':' .. ARGV[1] .. ':')
if tonumber(cur) <= now then return 0 end
return 1
`)

// ARGV: channel, batch. Removes up to batch expired leases; returns how many.
var luaSweep = rueidis.NewLuaScript(luaNow + `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
  local seq = redis.call('INCR', KEYS[4])
  redis.call('PUBLISH', ARGV[1], '-' .. string.format('%d', seq) .. ':' .. id .. ':')
end
return #ids
`)

// Returns {seq, now, id1, expiry1, backend1, ttl1, ...} for the live leases.
var luaSnapshot = rueidis.NewLuaScriptReadOnly(luaNow + `
local out = {redis.call('GET', KEYS[4]) or '0', now}
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%d', now), '+inf', 'WITHSCORES')
for i = 1, #ids, 2 do
  local id = ids[i]
  out[#out + 1] = id
  out[#out + 1] = ids[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
  out[#out + 1] = redis.call('HGET', KEYS[3], id) or '0'
end
return out
`)

// Register implements Store.
func (s *RedisStore) Register(ctx context.Context, b *registryv1.Backend, ttl time.Duration) (Lease, error) {
	return s.put(ctx, newLeaseID(), b, ttl, false)
}

// Update implements Store.
func (s *RedisStore) Update(ctx context.Context, leaseID string, b *registryv1.Backend, ttl time.Duration) (Lease, error) {
	if !validLeaseID(leaseID) {
		return Lease{}, ErrNotFound
	}
	return s.put(ctx, leaseID, b, ttl, true)
}

func (s *RedisStore) put(ctx context.Context, id string, b *registryv1.Backend, ttl time.Duration, update bool) (Lease, error) {
	payload, err := encodeBackend(b)
	if err != nil {
		return Lease{}, fmt.Errorf("registry: encode backend: %w", err)
	}
	ttlMS := max(ttl.Milliseconds(), 1)
	flag := "0"
	if update {
		flag = "1"
	}
	exp, err := luaRegister.Exec(ctx, s.client, s.keys,
		[]string{id, strconv.FormatInt(ttlMS, 10), string(payload), s.channel, flag}).AsInt64()
	if rueidis.IsRedisNil(err) {
		return Lease{}, ErrNotFound
	}
	if err != nil {
		return Lease{}, fmt.Errorf("registry: redis register: %w", err)
	}
	return Lease{ID: id, TTL: time.Duration(ttlMS) * time.Millisecond, Expires: time.UnixMilli(exp)}, nil
}

// Heartbeat implements Store.
func (s *RedisStore) Heartbeat(ctx context.Context, leaseID string) (Lease, error) {
	if !validLeaseID(leaseID) {
		return Lease{}, ErrNotFound
	}
	v, err := luaHeartbeat.Exec(ctx, s.client, s.keys, []string{leaseID}).AsIntSlice()
	if rueidis.IsRedisNil(err) {
		return Lease{}, ErrNotFound
	}
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("unexpected reply %v", v)
	}
	if err != nil {
		return Lease{}, fmt.Errorf("registry: redis heartbeat: %w", err)
	}
	return Lease{ID: leaseID, TTL: time.Duration(v[1]) * time.Millisecond, Expires: time.UnixMilli(v[0])}, nil
}

// Deregister implements Store.
func (s *RedisStore) Deregister(ctx context.Context, leaseID string) error {
	if !validLeaseID(leaseID) {
		return ErrNotFound
	}
	n, err := luaDeregister.Exec(ctx, s.client, s.keys, []string{leaseID, s.channel}).AsInt64()
	if err != nil {
		return fmt.Errorf("registry: redis deregister: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// List implements Store. Stored backends that do not decode or validate are left out (and logged).
func (s *RedisStore) List(ctx context.Context) ([]Registration, error) {
	_, entries, err := s.snapshot(ctx)
	regs := make([]Registration, len(entries))
	for i, e := range entries {
		regs[i] = e.Registration
	}
	return regs, err
}

// snapEntry is a live registration with its backend as stored.
type snapEntry struct {
	Registration
	payload string
}

// snapshot loads every live registration and the change counter, in one atomic script.
func (s *RedisStore) snapshot(ctx context.Context) (int64, []snapEntry, error) {
	v, err := luaSnapshot.Exec(ctx, s.client, s.keys, nil).ToArray()
	if err != nil {
		return 0, nil, fmt.Errorf("registry: redis snapshot: %w", err)
	}
	seq, entries, err := parseSnapshot(v)
	if err != nil {
		return 0, nil, fmt.Errorf("registry: redis snapshot: %w", err)
	}
	kept := entries[:0]
	for _, e := range entries {
		if e.Backend == nil {
			s.opts.Logger.Warn("registry: ignoring a registration that Redis holds in a form this gateway cannot use", "lease", e.ID)
			continue
		}
		kept = append(kept, e)
	}
	return seq, kept, nil
}

// parseSnapshot reads luaSnapshot's reply. An entry whose id or backend is not valid keeps a nil
// Backend.
func parseSnapshot(v []rueidis.RedisMessage) (int64, []snapEntry, error) {
	if len(v) < 2 || (len(v)-2)%4 != 0 {
		return 0, nil, fmt.Errorf("reply has %d elements", len(v))
	}
	seq, err := v[0].AsInt64()
	if err != nil {
		return 0, nil, fmt.Errorf("counter: %w", err)
	}
	entries := make([]snapEntry, 0, (len(v)-2)/4)
	for i := 2; i < len(v); i += 4 {
		id, err1 := v[i].ToString()
		exp, err2 := v[i+1].AsInt64()
		payload, err3 := v[i+2].ToString()
		ttl, err4 := v[i+3].AsInt64()
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return 0, nil, err
		}
		e := snapEntry{Registration: Registration{Lease: Lease{ID: id, TTL: time.Duration(ttl) * time.Millisecond, Expires: time.UnixMilli(exp)}}, payload: payload}
		if validLeaseID(id) {
			e.Backend, _ = decodeBackend(payload)
		}
		entries = append(entries, e)
	}
	return seq, entries, nil
}

func (s *RedisStore) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, backgroundTimeout)
		_, err := luaSweep.Exec(cctx, s.client, s.keys, []string{s.channel, strconv.Itoa(sweepBatch)}).AsInt64()
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			s.opts.Logger.Warn("registry: sweeping expired leases failed; retrying", "err", err)
		case err == nil && failing:
			failing = false
			s.opts.Logger.Info("registry: sweeping expired leases works again")
		}
	}
}

// Watch implements Store.
func (s *RedisStore) Watch(ctx context.Context, fn func(Event)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := newQueue[string]()
	resync := make(chan struct{}, 1)
	wakeResync := func() {
		select {
		case resync <- struct{}{}:
		default:
		}
	}
	// Each confirmed SUBSCRIBE (the first, and after every reconnect) calls for a snapshot: what
	// was published while no subscription was active is only in the data. The hook runs on the
	// connection's reader and must not block.
	subCtx := rueidis.WithOnSubscriptionHook(ctx, func(sub rueidis.PubSubSubscription) {
		if sub.Kind == "subscribe" {
			wakeResync()
		}
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for ctx.Err() == nil {
			err := s.client.Receive(subCtx, s.client.B().Subscribe().Channel(s.channel).Build(),
				func(m rueidis.PubSubMessage) { msgs.push(m.Message) })
			if ctx.Err() != nil {
				return
			}
			s.opts.Logger.Warn("registry: change subscription lost; resubscribing", "err", err)
			sleep(ctx, s.opts.RetryInterval)
		}
	})

	w := watcher{fn: fn, state: map[string]watched{}}
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-retry:
			retry = nil
			wakeResync()
		case <-resync:
			cctx, cancel := context.WithTimeout(ctx, backgroundTimeout)
			seq, entries, err := s.snapshot(cctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s.opts.Logger.Warn("registry: loading registrations failed; retrying", "err", err)
				retry = time.After(s.opts.RetryInterval)
				continue
			}
			w.sync(seq, entries)
		case <-msgs.wake:
			for _, m := range msgs.drain() {
				if !w.apply(m, s.opts.Logger) {
					wakeResync()
				}
			}
		}
	}
}

// watched is what a watcher last told fn about one lease.
type watched struct {
	payload string
	backend *registryv1.Backend
}

// watcher turns snapshots and change messages into events, keeping the state fn has been told.
type watcher struct {
	fn     func(Event)
	state  map[string]watched
	seq    int64 // counter of the last snapshot or change applied
	synced bool
}

// sync replaces the state with a snapshot and tells fn the difference.
func (w *watcher) sync(seq int64, entries []snapEntry) {
	now := make(map[string]watched, len(entries))
	for _, e := range entries {
		now[e.ID] = watched{payload: e.payload, backend: e.Backend}
	}
	for id, old := range w.state {
		if _, ok := now[id]; !ok {
			w.fn(Event{Type: Removed, LeaseID: id, Backend: old.backend})
		}
	}
	for id, cur := range now {
		old, ok := w.state[id]
		switch {
		case !ok:
			w.fn(Event{Type: Added, LeaseID: id, Backend: cur.backend})
		case old.payload != cur.payload:
			w.fn(Event{Type: Updated, LeaseID: id, Backend: cur.backend})
		}
	}
	w.state, w.seq, w.synced = now, seq, true
	w.fn(Event{Type: Synced})
}

// apply handles one change message. It reports false when the watcher must resync: a change
// was missed.
func (w *watcher) apply(msg string, log *slog.Logger) bool {
	if !w.synced {
		return true // the pending snapshot, loaded later, includes this change
	}
	c, err := parseChange(msg)
	if err != nil {
		log.Warn("registry: ignoring a malformed change message", "err", err)
		return true
	}
	switch {
	case c.seq <= w.seq:
		return true // already in the snapshot (or from before a Redis restart: a resync is pending)
	case c.seq > w.seq+1:
		return false
	}
	w.seq = c.seq
	old, had := w.state[c.leaseID]
	if c.op == '-' {
		if had {
			delete(w.state, c.leaseID)
			w.fn(Event{Type: Removed, LeaseID: c.leaseID, Backend: old.backend})
		}
		return true
	}
	b, err := decodeBackend(c.payload)
	if err != nil {
		// Treated as gone: this gateway cannot serve it.
		log.Warn("registry: ignoring a registration this gateway cannot use", "lease", c.leaseID, "err", err)
		if had {
			delete(w.state, c.leaseID)
			w.fn(Event{Type: Removed, LeaseID: c.leaseID, Backend: old.backend})
		}
		return true
	}
	w.state[c.leaseID] = watched{payload: c.payload, backend: b}
	switch {
	case !had:
		w.fn(Event{Type: Added, LeaseID: c.leaseID, Backend: b})
	case old.payload != c.payload:
		w.fn(Event{Type: Updated, LeaseID: c.leaseID, Backend: b})
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
