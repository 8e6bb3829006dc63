package batchstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Redis is the Store shared by every gateway replica and batch worker using the same Redis and
// prefix.
//
// Layout. The keys of one batch share its id as hash tag, so every script touches one Cluster
// slot; the indexes of all batches share another:
//
//	<prefix>:batch:{<id>}          hash: json (the batch without counts), st (status), acc ("1"
//	                               while results are accepted), v (version), total, completed,
//	                               failed, skipped; prov ("1" from its create until indexed)
//	<prefix>:batch:{<id>}:results  hash: custom_id -> kind byte + line
//	<prefix>:{batches}:index       sorted set, all scores 0: ids, read newest first by
//	                               ZREVRANGEBYLEX (ids sort by creation time)
//	<prefix>:{batches}:active      set: ids of batches not terminal
//	<prefix>:{batches}:expiry      sorted set: id -> when its keys expire (ms, Redis TIME), so
//	                               index entries go with their batches
//
// Update is a compare-and-set on v (luaUpdate), retried with a fresh state on conflict. Counts
// live in their own fields, moved only by luaRecord, which reads acc in the same script: a
// Record never races an Update, and a status change stops results at once. When a batch becomes
// terminal its two keys get the TTL (once; later updates keep it).
//
// The indexes are in another slot than the batch, so they follow each change in a second
// script (luaIndex) right after it. A gateway dying between the two, or two replicas' second
// scripts arriving out of order, can leave an index behind the batch: Active rechecks the
// statuses of the ids it returns and removes the stale ones; List skips (and removes) ids whose
// batch is gone; the next Update of a batch fixes its entries.
//
// A batch no index holds yet is invisible (nothing lists it or runs it), so the create script
// gives it a provisional expiry (provisionalTTL, marked by prov) and a third script (luaSettle)
// clears it once the batch is indexed: a Create that fails between the two (Redis gone, the
// gateway dead) leaves a batch that goes by itself, even when the background removal of it
// (abandon) cannot reach Redis.
type Redis struct {
	client    rueidis.Client
	timeout   time.Duration // of each call
	prefix    string        // <prefix>:batch:
	index     []string      // index, active, expiry
	ttl       string        // ms
	prov      string        // provisionalTTL, ms
	scanCount int64
	updating  keyLock // batch ids
}

// RedisOptions configure a Redis store.
type RedisOptions struct {
	// Prefix starts every key; default "infergate". Gateways with different prefixes share a
	// Redis without seeing each other's batches.
	Prefix string
	// TTL is how long a terminal batch, its results and its index entries are kept after it
	// became terminal; default 30 days.
	TTL time.Duration
	// Timeout bounds each call to Redis (one command, script or pipeline), so that a Redis that
	// is down or hung fails the call with ErrUnavailable rather than holding it: without a
	// deadline the client retries a read until Redis is back. Default 5 s.
	Timeout time.Duration
}

// NewRedis returns a store in Redis reached through client. The client stays the caller's.
func NewRedis(client rueidis.Client, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "infergate"
	}
	if opts.TTL <= 0 {
		opts.TTL = 30 * 24 * time.Hour
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	g := opts.Prefix + ":{batches}:"
	return &Redis{
		client:    client,
		timeout:   opts.Timeout,
		prefix:    opts.Prefix + ":batch:",
		index:     []string{g + "index", g + "active", g + "expiry"},
		ttl:       strconv.FormatInt(max(opts.TTL.Milliseconds(), 1), 10),
		prov:      strconv.FormatInt(provisionalTTL.Milliseconds(), 10),
		scanCount: 512,
	}
}

var _ Store = (*Redis)(nil)

// keys are a batch's keys: the batch hash, then its results.
func (r *Redis) keys(id string) []string {
	k := r.prefix + "{" + id + "}"
	return []string{k, k + ":results"}
}

// The scripts on a batch's keys. KEYS: batch, results.

// ARGV: json, st, acc, total, "1" if terminal, ttl ms, provisional ttl ms. Returns 0 if the
// batch exists, else 1. A terminal batch gets its TTL at once, as it would once indexed; any
// other the provisional expiry.
var luaCreate = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'json', ARGV[1], 'st', ARGV[2], 'acc', ARGV[3], 'v', 1,
  'total', ARGV[4], 'completed', 0, 'failed', 0, 'skipped', 0)
if ARGV[5] == '1' then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
else
  redis.call('HSET', KEYS[1], 'prov', 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
end
return 1
`)

// luaSettle ends a created batch's provisional expiry once it is indexed, unless an update
// already did (it may have made the batch terminal, with its TTL). Returns 0 if there is no
// batch (its provisional expiry passed first), else 1.
var luaSettle = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HDEL', KEYS[1], 'prov') == 1 then redis.call('PERSIST', KEYS[1]) end
return 1
`)

// provisionalTTL is how long a batch lives after its create script if it is not indexed by then
// (the Create failed after storing it). The three scripts of a Create are each bounded by the
// store's Timeout (seconds), so minutes leave a wide margin for a Redis slow but answering; a
// Create that settles later still fails cleanly (luaSettle finds no batch), and an orphan
// costs Redis a few hundred bytes for that long.
const provisionalTTL = 5 * time.Minute

// ARGV: expected v, json, st, acc, total, "1" if terminal, ttl ms.
// Returns nil if there is no batch; {1, v, total, completed, failed, skipped} once stored;
// {0, v, total, completed, failed, skipped, json} (the current state) if v was not the expected.
// A provisional expiry (prov) is no TTL: terminal, the batch gets its TTL in its stead; running,
// it keeps it until its create settles.
var luaUpdate = rueidis.NewLuaScript(`
local cur = redis.call('HMGET', KEYS[1], 'v', 'total', 'completed', 'failed', 'skipped', 'json')
if not cur[1] then return false end
if cur[1] ~= ARGV[1] then return {0, cur[1], cur[2], cur[3], cur[4], cur[5], cur[6]} end
local v = redis.call('HINCRBY', KEYS[1], 'v', 1)
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'st', ARGV[3], 'acc', ARGV[4], 'total', ARGV[5])
if ARGV[6] == '1' then
  if redis.call('HDEL', KEYS[1], 'prov') == 1 or redis.call('PTTL', KEYS[1]) < 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[7])
    redis.call('PEXPIRE', KEYS[2], ARGV[7])
  end
elseif redis.call('HEXISTS', KEYS[1], 'prov') == 0 then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
end
return {1, v, ARGV[5], cur[3], cur[4], cur[5]}
`)

// ARGV: custom_id, value, custom_id, value, ... (value: kind byte 1-3, then the line).
// Returns nil if there is no batch, else {total, completed, failed, skipped} after.
var luaRecord = rueidis.NewLuaScript(`
local acc = redis.call('HGET', KEYS[1], 'acc')
if not acc then return false end
if acc == '1' then
  local n = {0, 0, 0}
  for i = 1, #ARGV, 2 do
    if redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[i + 1]) == 1 then
      local k = string.byte(ARGV[i + 1], 1)
      n[k] = n[k] + 1
    end
  end
  if n[1] > 0 then redis.call('HINCRBY', KEYS[1], 'completed', n[1]) end
  if n[2] > 0 then redis.call('HINCRBY', KEYS[1], 'failed', n[2]) end
  if n[3] > 0 then redis.call('HINCRBY', KEYS[1], 'skipped', n[3]) end
end
return redis.call('HMGET', KEYS[1], 'total', 'completed', 'failed', 'skipped')
`)

// ARGV: custom ids. Returns nil if there is no batch, else 1 or 0 per id.
var luaRecorded = rueidis.NewLuaScriptReadOnly(`
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local out = {}
for i = 1, #ARGV do out[i] = redis.call('HEXISTS', KEYS[2], ARGV[i]) end
return out
`)

// Returns 0 if there is no batch, else 1. UNLINK frees a large hash off Redis's main thread.
var luaDrop = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('UNLINK', KEYS[2])
return 1
`)

// luaIndex brings the indexes up to date with a batch that was just created or updated, and
// forgets up to 100 ids whose keys have expired. KEYS: index, active, expiry. ARGV: id, "1" if
// terminal, ttl ms.
var luaIndex = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 100)
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  redis.call('ZREM', KEYS[3], unpack(gone))
  redis.call('SREM', KEYS[2], unpack(gone))
end
redis.call('ZADD', KEYS[1], 0, ARGV[1])
if ARGV[2] == '1' then
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('ZADD', KEYS[3], 'NX', now + tonumber(ARGV[3]), ARGV[1])
else
  redis.call('SADD', KEYS[2], ARGV[1])
end
return #gone
`)

// do sends one command, bounded by the store's Timeout.
func (r *Redis) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.client.Do(ctx, cmd)
}

// doMulti sends a pipeline, bounded by the store's Timeout as a whole.
func (r *Redis) doMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.client.DoMulti(ctx, cmds...)
}

// exec runs a script, bounded by the store's Timeout.
func (r *Redis) exec(ctx context.Context, script *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return script.Exec(ctx, r.client, keys, args)
}

// unreachable marks an error of a call to Redis that says Redis was not reached or did not
// answer in time (a refused or reset connection, a deadline, a closed client, a server loading,
// busy or failing over) as ErrUnavailable too: callers answer it with "try again later". An
// error that says something about a reply (one that does not parse, an error reply such as a
// script's) is ours to fix and stays as it is.
func unreachable(err error) error {
	if err == nil || rueidis.IsRedisNil(err) || rueidis.IsParseErr(err) {
		return err
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		transient := re.IsLoading() || re.IsTryAgain() || re.IsClusterDown()
		for _, p := range []string{"BUSY ", "MASTERDOWN", "READONLY", "NOREPLICAS"} {
			transient = transient || strings.HasPrefix(msg, p)
		}
		if !transient {
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Create implements Store.
func (r *Redis) Create(ctx context.Context, b *Batch) error {
	if err := checkNew(b); err != nil {
		return err
	}
	data, err := encodeBatch(b)
	if err != nil {
		return err
	}
	term := b.Status.Terminal()
	n, err := r.exec(ctx, luaCreate, r.keys(b.ID), []string{string(data), string(b.Status),
		flag(b.Status.Accepting()), strconv.FormatInt(b.Counts.Total, 10), flag(term), r.ttl, r.prov}).AsInt64()
	if err != nil {
		r.abandon(ctx, b.ID) // the script may have run all the same
		return fmt.Errorf("batchstate: redis create %s: %w", b.ID, unreachable(err))
	}
	if n == 0 {
		return fmt.Errorf("batchstate: create %s: %w", b.ID, ErrExists)
	}
	if err := r.reindex(ctx, b.ID, term); err != nil {
		r.abandon(ctx, b.ID)
		return fmt.Errorf("batchstate: redis create %s: stored, but not indexed: %w", b.ID, err)
	}
	if term {
		return nil // its TTL is the normal one already
	}
	if err := r.settle(ctx, b.ID); err != nil {
		// Indexed, but expiring: the caller is told it was not created, so it goes (a List
		// or Active that meets the id after it expired removes it from the indexes).
		r.abandon(ctx, b.ID)
		return fmt.Errorf("batchstate: redis create %s: indexed, but still provisional: %w", b.ID, err)
	}
	return nil
}

// settle ends a created batch's provisional expiry (luaSettle); ErrUnavailable if the batch
// expired before (Redis was slow for minutes).
func (r *Redis) settle(ctx context.Context, id string) error {
	n, err := r.exec(ctx, luaSettle, r.keys(id)[:1], nil).AsInt64()
	if err != nil {
		return unreachable(err)
	}
	if n == 0 {
		return fmt.Errorf("%w: its provisional expiry of %v passed before it was indexed", ErrUnavailable, provisionalTTL)
	}
	return nil
}

// abandon removes, in the background, a batch whose Create failed after the batch may have been
// stored: its caller was told it was not created, so it must not linger unindexed (no list or
// worker would ever see it). It tries for about half a minute, as Redis comes back; a batch left
// behind after that goes with its provisional expiry.
func (r *Redis) abandon(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	go func() {
		for try := range 5 {
			err := r.do(ctx, r.client.B().Del().Key(r.keys(id)...).Build()).Error()
			if err == nil {
				err = r.do(ctx, r.client.B().Zrem().Key(r.index[0]).Member(id).Build()).Error()
			}
			if err == nil {
				err = r.do(ctx, r.client.B().Srem().Key(r.index[1]).Member(id).Build()).Error()
			}
			if err == nil {
				return
			}
			time.Sleep(time.Second << try)
		}
	}()
}

func (r *Redis) reindex(ctx context.Context, id string, terminal bool) error {
	return unreachable(r.exec(ctx, luaIndex, r.index, []string{id, flag(terminal), r.ttl}).Error())
}

// getCmd reads a batch: json, total, completed, failed, skipped.
func (r *Redis) getCmd(id string) rueidis.Completed {
	return r.client.B().Hmget().Key(r.keys(id)[0]).Field("json", "total", "completed", "failed", "skipped").Build()
}

// parseGet reads getCmd's reply; nil, nil when there is no batch.
func parseGet(id string, res rueidis.RedisResult) (*Batch, error) {
	v, err := res.ToArray()
	if err != nil {
		return nil, unreachable(err)
	}
	if len(v) != 5 {
		return nil, fmt.Errorf("batch %s: %d values, want 5", id, len(v))
	}
	if v[0].IsNil() {
		return nil, nil
	}
	data, err := v[0].ToString()
	if err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	counts, err := parseCounts(v[1:])
	if err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	return decodeBatch(id, []byte(data), counts)
}

// parseCounts reads total, completed, failed, skipped.
func parseCounts(v []rueidis.RedisMessage) (Counts, error) {
	if len(v) != 4 {
		return Counts{}, fmt.Errorf("%d counts, want 4", len(v))
	}
	var n [4]int64
	for i := range v {
		if v[i].IsNil() {
			continue
		}
		var err error
		if n[i], err = v[i].AsInt64(); err != nil {
			return Counts{}, fmt.Errorf("count %d: %w", i, err)
		}
	}
	return Counts{Total: n[0], Completed: n[1], Failed: n[2], Skipped: n[3]}, nil
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, id string) (*Batch, error) {
	if !validID(id) {
		return nil, fmt.Errorf("batchstate: get %q: %w", id, ErrNotFound)
	}
	b, err := parseGet(id, r.do(ctx, r.getCmd(id)))
	if err != nil {
		return nil, fmt.Errorf("batchstate: redis get %s: %w", id, err)
	}
	if b == nil {
		return nil, fmt.Errorf("batchstate: get %s: %w", id, ErrNotFound)
	}
	return b, nil
}

// List implements Store. Ids whose batch has expired are skipped and removed from the index.
func (r *Redis) List(ctx context.Context, after string, limit int) ([]*Batch, bool, error) {
	limit = max(limit, 0)
	var out []*Batch
	var stale []string
	from := "+"
	if after != "" {
		from = "(" + after
	}
	for len(out) <= limit {
		want := limit + 1 - len(out)
		ids, err := r.do(ctx, r.client.B().Zrevrangebylex().Key(r.index[0]).Max(from).Min("-").
			Limit(0, int64(want)).Build()).AsStrSlice()
		if err != nil {
			return nil, false, fmt.Errorf("batchstate: redis list: %w", unreachable(err))
		}
		if len(ids) == 0 {
			break
		}
		cmds := make(rueidis.Commands, len(ids))
		for i, id := range ids {
			cmds[i] = r.getCmd(id)
		}
		for i, res := range r.doMulti(ctx, cmds...) {
			b, err := parseGet(ids[i], res)
			if err != nil {
				return nil, false, fmt.Errorf("batchstate: redis list: %w", err)
			}
			if b == nil {
				stale = append(stale, ids[i])
				continue
			}
			out = append(out, b)
		}
		if len(ids) < want {
			break
		}
		from = "(" + ids[len(ids)-1]
	}
	if len(stale) > 0 {
		// Best effort: a later List removes what this one could not.
		_ = r.do(ctx, r.client.B().Zrem().Key(r.index[0]).Member(stale...).Build()).Error()
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// Update implements Store. Updates of one batch through one Redis value take turns (fn must
// not update the same batch); those from other replicas are retried on conflict.
func (r *Redis) Update(ctx context.Context, id string, fn func(*Batch) error) (*Batch, error) {
	if !validID(id) {
		return nil, fmt.Errorf("batchstate: update %q: %w", id, ErrNotFound)
	}
	unlock, err := r.updating.lock(ctx, id)
	if err != nil {
		// The caller's deadline passed while another update of the batch held it: behind
		// a Redis that does not answer, as likely as not.
		return nil, fmt.Errorf("batchstate: update %s: waiting for the batch's other update: %w", id, unreachable(err))
	}
	defer unlock()
	keys := r.keys(id)
	load := func() ([]rueidis.RedisMessage, error) {
		v, err := r.do(ctx, r.client.B().Hmget().Key(keys[0]).
			Field("v", "total", "completed", "failed", "skipped", "json").Build()).ToArray()
		return v, unreachable(err)
	}
	st, err := load()
	if err != nil {
		return nil, fmt.Errorf("batchstate: redis update %s: %w", id, err)
	}
	for attempt := 1; ; attempt++ {
		if len(st) != 6 {
			return nil, fmt.Errorf("batchstate: redis update %s: %d values, want 6", id, len(st))
		}
		if st[0].IsNil() {
			return nil, fmt.Errorf("batchstate: update %s: %w", id, ErrNotFound)
		}
		version, err1 := st[0].ToString()
		counts, err2 := parseCounts(st[1:5])
		data, err3 := st[5].ToString()
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("batchstate: redis update %s: %w", id, err)
		}
		next, changed, err := apply(id, []byte(data), counts, fn)
		if err != nil || !changed {
			return next, err
		}
		enc, err := encodeBatch(next)
		if err != nil {
			return nil, err
		}
		term := next.Status.Terminal()
		reply, err := r.exec(ctx, luaUpdate, keys, []string{version, string(enc), string(next.Status),
			flag(next.Status.Accepting()), strconv.FormatInt(next.Counts.Total, 10), flag(term), r.ttl}).ToArray()
		if rueidis.IsRedisNil(err) {
			return nil, fmt.Errorf("batchstate: update %s: %w", id, ErrNotFound)
		}
		err = unreachable(err)
		if err == nil && len(reply) != 6 && len(reply) != 7 {
			err = fmt.Errorf("%d values", len(reply))
		}
		var ok int64
		if err == nil {
			ok, err = reply[0].AsInt64()
		}
		if err != nil {
			return nil, fmt.Errorf("batchstate: redis update %s: %w", id, err)
		}
		if ok == 1 {
			if next.Counts, err = parseCounts(reply[2:6]); err != nil {
				return nil, fmt.Errorf("batchstate: redis update %s: %w", id, err)
			}
			if err := r.reindex(ctx, id, term); err != nil {
				return nil, fmt.Errorf("batchstate: redis update %s: stored, but not indexed: %w", id, err)
			}
			return next, nil
		}
		if attempt >= maxUpdateTries {
			return nil, fmt.Errorf("batchstate: update %s: still changing after %d tries", id, attempt)
		}
		waited, err := backoff(ctx, attempt)
		if err != nil {
			return nil, fmt.Errorf("batchstate: update %s: %w", id, err)
		}
		st = reply[1:] // the state that won, as the script read it
		if waited {
			if st, err = load(); err != nil {
				return nil, fmt.Errorf("batchstate: redis update %s: %w", id, err)
			}
		}
	}
}

// Record implements Store: one script, one round trip, whatever the number of results.
func (r *Redis) Record(ctx context.Context, id string, results []Result) (Counts, error) {
	if err := checkResults(id, results); err != nil {
		return Counts{}, err
	}
	if !validID(id) {
		return Counts{}, fmt.Errorf("batchstate: record %q: %w", id, ErrNotFound)
	}
	args := make([]string, 0, 2*len(results))
	for _, res := range results {
		args = append(args, res.CustomID, resultValue(res))
	}
	v, err := r.exec(ctx, luaRecord, r.keys(id), args).ToArray()
	if rueidis.IsRedisNil(err) {
		return Counts{}, fmt.Errorf("batchstate: record %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Counts{}, fmt.Errorf("batchstate: redis record %s: %w", id, unreachable(err))
	}
	c, err := parseCounts(v)
	if err != nil {
		return Counts{}, fmt.Errorf("batchstate: redis record %s: %w", id, err)
	}
	return c, nil
}

// Recorded implements Store.
func (r *Redis) Recorded(ctx context.Context, id string, customIDs []string) ([]bool, error) {
	if !validID(id) {
		return nil, fmt.Errorf("batchstate: recorded %q: %w", id, ErrNotFound)
	}
	v, err := r.exec(ctx, luaRecorded, r.keys(id), customIDs).AsIntSlice()
	if rueidis.IsRedisNil(err) {
		return nil, fmt.Errorf("batchstate: recorded %s: %w", id, ErrNotFound)
	}
	err = unreachable(err)
	if err == nil && len(v) != len(customIDs) {
		err = fmt.Errorf("%d answers for %d ids", len(v), len(customIDs))
	}
	if err != nil {
		return nil, fmt.Errorf("batchstate: redis recorded %s: %w", id, err)
	}
	out := make([]bool, len(v))
	for i, n := range v {
		out[i] = n == 1
	}
	return out, nil
}

// Results implements Store. It reads the results hash with HSCAN, a page at a time, so no reply
// holds them all. HSCAN may return an entry twice (when the hash is resized during the scan);
// the custom ids seen are remembered so fn sees each once.
func (r *Redis) Results(ctx context.Context, id string, fn func(Result) error) error {
	if !validID(id) {
		return fmt.Errorf("batchstate: results %q: %w", id, ErrNotFound)
	}
	keys := r.keys(id)
	n, err := r.do(ctx, r.client.B().Exists().Key(keys[0]).Build()).AsInt64()
	if err != nil {
		return fmt.Errorf("batchstate: redis results %s: %w", id, unreachable(err))
	}
	if n == 0 {
		return fmt.Errorf("batchstate: results %s: %w", id, ErrNotFound)
	}
	seen := map[string]struct{}{}
	var line []byte
	var cursor uint64
	for {
		e, err := r.do(ctx, r.client.B().Hscan().Key(keys[1]).Cursor(cursor).Count(r.scanCount).Build()).AsScanEntry()
		if err != nil {
			return fmt.Errorf("batchstate: redis results %s: %w", id, unreachable(err))
		}
		if len(e.Elements)%2 != 0 {
			return fmt.Errorf("batchstate: redis results %s: odd scan reply", id)
		}
		for i := 0; i < len(e.Elements); i += 2 {
			c, v := e.Elements[i], e.Elements[i+1]
			if _, dup := seen[c]; dup {
				continue
			}
			seen[c] = struct{}{}
			if v == "" || ResultKind(v[0]) < Output || ResultKind(v[0]) > Skipped {
				return fmt.Errorf("batchstate: redis results %s: line %q: corrupt stored result", id, c)
			}
			line = append(line[:0], v[1:]...)
			if err := fn(Result{CustomID: c, Kind: ResultKind(v[0]), Line: line}); err != nil {
				return err
			}
		}
		cursor = e.Cursor
		if cursor == 0 {
			return nil
		}
	}
}

// DropResults implements Store.
func (r *Redis) DropResults(ctx context.Context, id string) error {
	if !validID(id) {
		return fmt.Errorf("batchstate: drop results %q: %w", id, ErrNotFound)
	}
	n, err := r.exec(ctx, luaDrop, r.keys(id), nil).AsInt64()
	if err != nil {
		return fmt.Errorf("batchstate: redis drop results %s: %w", id, unreachable(err))
	}
	if n == 0 {
		return fmt.Errorf("batchstate: drop results %s: %w", id, ErrNotFound)
	}
	return nil
}

// Active implements Store. It rereads the status of every id in the active set (one pipeline)
// and removes those that are terminal or gone, which an index update that came late or never
// came left there. The ids are in ascending order (oldest first).
func (r *Redis) Active(ctx context.Context) ([]string, error) {
	ids, err := r.do(ctx, r.client.B().Smembers().Key(r.index[1]).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("batchstate: redis active: %w", unreachable(err))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make(rueidis.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = r.client.B().Hget().Key(r.keys(id)[0]).Field("st").Build()
	}
	var out, stale []string
	for i, res := range r.doMulti(ctx, cmds...) {
		st, err := res.ToString()
		switch {
		case rueidis.IsRedisNil(err):
			stale = append(stale, ids[i])
		case err != nil:
			return nil, fmt.Errorf("batchstate: redis active: %w", unreachable(err))
		case Status(st).Terminal():
			stale = append(stale, ids[i])
		default:
			out = append(out, ids[i])
		}
	}
	if len(stale) > 0 {
		// Best effort: the next Active tries again.
		_ = r.do(ctx, r.client.B().Srem().Key(r.index[1]).Member(stale...).Build()).Error()
	}
	slices.Sort(out)
	return out, nil
}
