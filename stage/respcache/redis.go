package respcache

import (
	"container/list"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/redis/rueidis"
)

// RedisOptions configure a Redis store.
type RedisOptions struct {
	// Prefix starts every key and the channel, and must be the model's alone (Flush removes
	// everything under it); default "infergate:respcache:".
	Prefix string
	// TTL is how long an entry lives after its Put; default 1 h.
	TTL time.Duration
	// MaxEntries bounds this replica's index of the entries (their vectors, for semantic
	// search): beyond it the oldest are forgotten here, though they stay in Redis until their TTL
	// and are still found by key. Default 100,000.
	MaxEntries int
	// Timeout bounds every Redis call of a request (Get, Nearest, Put); default 50 ms.
	Timeout time.Duration
	// RetryInterval: how often a lost subscription is retried; default 200 ms.
	RetryInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Throttle writes the warnings that repeat while Redis fails at most once per its interval;
	// default logthrottle.New(Logger, logthrottle.DefaultInterval).
	Throttle *logthrottle.Throttle
	// Now is the clock of the index's expiries; default time.Now.
	Now func() time.Time
}

// Redis is the Store shared by gateway replicas through a plain Redis (no modules). Each entry
// is a hash under Prefix+"e:"+key holding its meta (partition, vector, size, expiry), its
// response and its words, written with its TTL in one Lua script that also announces it on the
// channel Prefix+"events", so a Put is whole or absent, never half-written. An entry written
// before words were kept has none: it is found by key, but is no semantic hit where words are
// checked.
//
// Get reads the response from Redis (one round trip). Semantic search is local: every replica
// keeps an index of the entries' vectors, fed by the channel and, on every (re)subscription,
// by a scan of the existing entries (a replica that starts, or lost its subscription, loads
// what it missed); Nearest searches it and fetches the response of the nearest entry only when
// it is close enough. An entry put through one replica is found through the others within a
// round trip.
//
// When Redis fails or is slower than Timeout, Get and Nearest return the error (the stage
// bypasses the cache for that request) and Put returns it having written nothing or
// everything; the failures are logged through the throttle. No request waits for Redis longer
// than Timeout.
type Redis struct {
	client  rueidis.Client
	opts    RedisOptions
	keys    string // Prefix+"e:"
	channel string
	warn    *logthrottle.Throttle
	idx     *mirror
	origin  uint64 // names this replica's messages, which it skips

	loadNow chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// putScript writes an entry's hash and TTL and announces it, atomically. The words are not in
// the meta, which every replica's index holds: only a semantic match reads them, with the
// response.
// KEYS[1] the entry; ARGV: meta, response, words, TTL ms, channel, message.
var putScript = rueidis.NewLuaScript(`
redis.call('HSET', KEYS[1], 'm', ARGV[1], 'r', ARGV[2], 'w', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1`)

// NewRedis returns a store sharing its entries through client, and starts its background work
// (the subscription and the loads). The client stays the caller's: Close stops the background
// work, not the client.
func NewRedis(client rueidis.Client, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "infergate:respcache:"
	}
	if opts.TTL <= 0 {
		opts.TTL = time.Hour
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 100_000
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 50 * time.Millisecond
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Throttle == nil {
		opts.Throttle = logthrottle.New(opts.Logger, logthrottle.DefaultInterval)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Redis{
		client:  client,
		opts:    opts,
		keys:    opts.Prefix + "e:",
		channel: opts.Prefix + "events",
		warn:    opts.Throttle,
		idx:     newMirror(opts.MaxEntries, opts.Now),
		origin:  rand.Uint64(),
		loadNow: make(chan struct{}, 1),
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Go(func() { r.subscribeLoop(ctx) })
	r.wg.Go(func() { r.loadLoop(ctx) })
	return r
}

// Close stops the background work.
func (r *Redis) Close() {
	r.cancel()
	r.wg.Wait()
}

const (
	warnRedis        = "response cache: Redis failed"
	warnSubscription = "response cache: Redis subscription lost; retrying"
	warnMalformed    = "response cache: malformed record in Redis"
)

func (r *Redis) failed(op string, err error) error {
	r.warn.Warn(warnRedis, warnRedis, "op", op, "prefix", r.opts.Prefix, "err", err)
	return fmt.Errorf("respcache: redis %s: %w", op, err)
}

// Get implements Store: the response alone (a semantic match also reads the words: match).
func (r *Redis) Get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	b, err := r.client.Do(ctx, r.client.B().Hget().Key(r.keys+key).Field("r").Build()).AsBytes()
	switch {
	case rueidis.IsRedisNil(err):
		return nil, nil
	case err != nil:
		return nil, r.failed("get", err)
	}
	return b, nil
}

// Nearest implements Store: a search of this replica's index, then one round trip for the
// response and words of a match. An entry Redis no longer has (expired early, flushed, lost in
// a restart) is forgotten and the search made again, a few times at most.
func (r *Redis) Nearest(ctx context.Context, partition string, v []float32, min float32) (Match, error) {
	for range 3 {
		key, sim, ok := r.idx.search(partition, v)
		if !ok {
			return Match{}, nil
		}
		m := Match{Key: key, Similarity: sim}
		if sim < min {
			return m, nil
		}
		b, words, err := r.match(ctx, key)
		if err != nil {
			return Match{}, err
		}
		if b != nil {
			m.Response, m.Words = b, words
			return m, nil
		}
		r.idx.remove(key)
	}
	return Match{}, nil
}

// match reads an entry's response and words; nil when it is gone, no words when it has none.
func (r *Redis) match(ctx context.Context, key string) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	vs, err := r.client.Do(ctx, r.client.B().Hmget().Key(r.keys+key).Field("r", "w").Build()).ToArray()
	if err == nil && len(vs) != 2 {
		err = fmt.Errorf("HMGET of 2 fields answered %d", len(vs))
	}
	if err != nil {
		return nil, "", r.failed("nearest", err)
	}
	b, err := vs[0].AsBytes()
	if rueidis.IsRedisNil(err) {
		return nil, "", nil
	}
	if err != nil {
		return nil, "", r.failed("nearest", err)
	}
	words, err := vs[1].ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, "", r.failed("nearest", err)
	}
	return b, words, nil
}

// Put implements Store.
func (r *Redis) Put(ctx context.Context, e Entry) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	md := meta{partition: e.Partition, vector: e.Vector, size: int64(len(e.Response) + len(e.Words)),
		expires: r.opts.Now().Add(r.opts.TTL).UnixMilli()}
	mb := appendMeta(nil, md)
	msg := appendAddMessage(nil, r.origin, e.Key, md)
	err := putScript.Exec(ctx, r.client, []string{r.keys + e.Key},
		[]string{string(mb), string(e.Response), e.Words, fmt.Sprint(max(r.opts.TTL.Milliseconds(), 1)), r.channel, string(msg)}).Error()
	if err != nil {
		return r.failed("put", err)
	}
	r.idx.add(e.Key, md, true)
	return nil
}

// bulkTimeout bounds each Redis call of a flush or a load (a SCAN step, the UNLINK or the
// pipelined reads of its up to 1,000 keys, the PUBLISH), which Timeout, a request's budget for
// one small read, is too short for: 2 s, as the other admin and state calls (batch state,
// backend registry). Without it a Redis that hangs holds DELETE /admin/cache until the client
// finds the connection dead, minutes later; with it the admin gets a 503 and a load is retried.
const bulkTimeout = 2 * time.Second

// Flush implements Store: it removes every entry under the prefix and tells every replica to
// forget its index. Each Redis call is bounded by bulkTimeout, not the flush as a whole: a large
// cache on a Redis that answers takes as many calls as it needs.
func (r *Redis) Flush(ctx context.Context) (int, error) {
	n := 0
	err := r.scan(ctx, func(keys []string) error {
		uctx, cancel := context.WithTimeout(ctx, bulkTimeout)
		defer cancel()
		if err := r.client.Do(uctx, r.client.B().Unlink().Key(keys...).Build()).Error(); err != nil {
			return err
		}
		n += len(keys)
		return nil
	})
	if err != nil {
		return n, r.failed("flush", err)
	}
	r.idx.clear()
	pctx, cancel := context.WithTimeout(ctx, bulkTimeout)
	defer cancel()
	if err := r.client.Do(pctx, r.client.B().Publish().Channel(r.channel).Message(string(appendFlushMessage(nil, r.origin))).Build()).Error(); err != nil {
		return n, r.failed("flush", err)
	}
	return n, nil
}

// Stats implements Store: the entries this replica indexes.
func (r *Redis) Stats() Stats { return r.idx.stats() }

// scan calls f with every batch of entry keys under the prefix; each step is bounded by
// bulkTimeout.
func (r *Redis) scan(ctx context.Context, f func(keys []string) error) error {
	pattern := globEscape(r.keys) + "*"
	var cursor uint64
	for {
		sctx, cancel := context.WithTimeout(ctx, bulkTimeout)
		e, err := r.client.Do(sctx, r.client.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		cancel()
		if err != nil {
			return err
		}
		if len(e.Elements) > 0 {
			if err := f(e.Elements); err != nil {
				return err
			}
		}
		if e.Cursor == 0 {
			return nil
		}
		cursor = e.Cursor
	}
}

// globEscape quotes the characters SCAN's MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// subscribeLoop keeps the subscription to the channel; every confirmed (re)subscription asks
// for a load, since entries put while unsubscribed are only in the data.
func (r *Redis) subscribeLoop(ctx context.Context) {
	var lost atomic.Bool // logged once per outage
	subCtx := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "subscribe" {
			lost.Store(false)
			r.kickLoad()
		}
	})
	for ctx.Err() == nil {
		err := r.client.Receive(subCtx, r.client.B().Subscribe().Channel(r.channel).Build(),
			func(m rueidis.PubSubMessage) { r.handle([]byte(m.Message)) })
		if ctx.Err() != nil {
			return
		}
		if !lost.Swap(true) {
			r.warn.Warn(warnSubscription, warnSubscription, "prefix", r.opts.Prefix, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(r.opts.RetryInterval):
		}
	}
}

func (r *Redis) handle(b []byte) {
	msg, err := decodeMessage(b)
	switch {
	case err != nil:
		r.warn.Warn(warnMalformed, warnMalformed, "prefix", r.opts.Prefix, "err", err)
	case msg.origin == r.origin:
		// Applied when it was sent.
	case msg.flush:
		r.idx.clear()
	default:
		r.idx.add(msg.key, untrusted(msg.meta), false)
	}
}

func (r *Redis) kickLoad() {
	select {
	case r.loadNow <- struct{}{}:
	default:
	}
}

func (r *Redis) loadLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.loadNow:
		}
		if err := r.load(ctx); err != nil && ctx.Err() == nil {
			r.failed("load", err)
			select { // try again: the subscription may not notice a failure of the load alone
			case <-ctx.Done():
				return
			case <-time.After(r.opts.RetryInterval):
				r.kickLoad()
			}
		}
	}
}

// load indexes every entry in Redis: their metas, a pipelined batch per scan step.
func (r *Redis) load(ctx context.Context) error {
	return r.scan(ctx, func(keys []string) error {
		cmds := make(rueidis.Commands, len(keys))
		for i, k := range keys {
			cmds[i] = r.client.B().Hget().Key(k).Field("m").Build()
		}
		lctx, cancel := context.WithTimeout(ctx, bulkTimeout)
		defer cancel()
		for i, res := range r.client.DoMulti(lctx, cmds...) {
			b, err := res.AsBytes()
			switch {
			case rueidis.IsRedisNil(err): // expired since the scan
				continue
			case err != nil:
				return err
			}
			m, err := decodeMeta(b)
			if err != nil {
				r.warn.Warn(warnMalformed, warnMalformed, "prefix", r.opts.Prefix, "key", keys[i], "err", err)
				continue
			}
			r.idx.add(strings.TrimPrefix(keys[i], r.keys), untrusted(m), false)
		}
		return nil
	})
}

// untrusted makes a decoded meta's vector fit for the index: normalised, or none when it holds
// a NaN or an infinity.
func untrusted(m meta) meta {
	m.vector = normalize(m.vector)
	return m
}

// mirror is a replica's index of a Redis store's entries: their keys, expiries and vectors,
// bounded by entries (the oldest added go first) and swept of the expired as it grows.
type mirror struct {
	max int
	now func() time.Time

	mu        sync.Mutex
	byKey     map[string]*mirrorEntry
	byID      map[uint64]*mirrorEntry
	order     *list.List // of *mirrorEntry, oldest added first
	nextID    uint64
	bytes     int64
	evictions int64
	vec       *vectors
}

type mirrorEntry struct {
	id        uint64
	key       string
	partition string
	expires   int64 // Unix ms
	size      int64
	vector    []float32
	vslot     *indexSlot // nil: not in the vector index
	elem      *list.Element
}

func newMirror(max int, now func() time.Time) *mirror {
	return &mirror{max: max, now: now, byKey: map[string]*mirrorEntry{}, byID: map[uint64]*mirrorEntry{},
		order: list.New(), vec: newVectors()}
}

// add indexes an entry; its vector must be normalised (decoded ones go through untrusted).
// local is this replica's own Put, which always wins. What a message or a load brings replaces
// an entry only when it expires later, so that is newer: a load scans Redis while this replica
// keeps putting, and may read a key's meta before a put replaces it, then apply it after.
func (x *mirror) add(key string, m meta, local bool) {
	now := x.now().UnixMilli()
	if m.expires <= now {
		return
	}
	x.mu.Lock()
	me := x.addLocked(key, m, local, now)
	x.mu.Unlock()
	if me != nil && me.vslot != nil {
		me.vslot.fill(&x.mu, me.id, me.vector) // lookups go on meanwhile
	}
}

// addLocked is add under x.mu: it returns the entry it made, whose vector add then inserts, or
// nil.
func (x *mirror) addLocked(key string, m meta, local bool, now int64) *mirrorEntry {
	if old := x.byKey[key]; old != nil {
		if old.expires == m.expires && old.partition == m.partition && old.size == m.size && slices.Equal(old.vector, m.vector) {
			return nil // its own announcement, or a load of what a message brought
		}
		if !local && old.expires >= m.expires {
			return nil // older than what this replica holds
		}
		x.drop(old)
	}
	for e := x.order.Front(); e != nil && (e.Value.(*mirrorEntry).expires <= now || len(x.byKey) >= x.max); e = x.order.Front() {
		if len(x.byKey) >= x.max && e.Value.(*mirrorEntry).expires > now {
			x.evictions++
		}
		x.drop(e.Value.(*mirrorEntry))
	}
	x.nextID++
	me := &mirrorEntry{id: x.nextID, key: key, partition: m.partition, expires: m.expires, vector: m.vector,
		size: int64(len(key)+len(m.partition)+4*len(m.vector)) + m.size + entryOverhead}
	me.vslot = x.vec.reserve(m.partition, m.vector)
	me.elem = x.order.PushBack(me)
	x.byKey[key] = me
	x.byID[me.id] = me
	x.bytes += me.size
	return me
}

func (x *mirror) drop(e *mirrorEntry) {
	x.order.Remove(e.elem)
	delete(x.byKey, e.key)
	delete(x.byID, e.id)
	if e.vslot != nil {
		x.vec.drop(e.vslot, e.id, e.partition)
	}
	x.bytes -= e.size
}

func (x *mirror) remove(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.byKey[key]; e != nil {
		x.drop(e)
	}
}

// search returns the key of partition's entry nearest to v, skipping (and dropping) an expired
// one.
func (x *mirror) search(partition string, v []float32) (string, float32, bool) {
	for range 3 {
		id, sim, ok := x.vec.search(partition, v)
		if !ok {
			return "", 0, false
		}
		x.mu.Lock()
		e := x.byID[id]
		if e != nil && e.expires <= x.now().UnixMilli() {
			x.drop(e)
			e = nil
		}
		x.mu.Unlock()
		if e != nil {
			return e.key, sim, true
		}
	}
	return "", 0, false
}

func (x *mirror) clear() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.byKey, x.byID = map[string]*mirrorEntry{}, map[uint64]*mirrorEntry{}
	x.order.Init()
	x.bytes = 0
	x.vec.clear()
}

func (x *mirror) stats() Stats {
	x.mu.Lock()
	defer x.mu.Unlock()
	return Stats{Entries: int64(len(x.byKey)), Bytes: x.bytes, Evictions: x.evictions}
}
