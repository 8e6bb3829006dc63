package slots

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// RedisOptions configures a Redis semaphore.
type RedisOptions struct {
	// Prefix starts every key; default "infergate:batch:slots:".
	Prefix string
	// Lease is how long a holder's slots outlive its last word to Redis: a process that dies
	// frees its slots that long after. Default 10 s; holders renew every Lease/4.
	Lease time.Duration
	// Poll is how often a holder that waits for slots asks again; default 10 ms.
	Poll   time.Duration
	Logger *slog.Logger
}

// Redis is a Semaphore shared by every process that uses the same Redis and prefix.
//
// Redis keeps, per key, how many slots each holder (one Redis value per process) has, and a
// lease per holder. A holder asks Redis for slots in bulk when its own waiters need them and
// reuses a slot one of its requests released for the next of its waiters without asking again,
// so a busy holder talks to Redis about as often as it renews its lease, not once per request.
// Fairness comes from the hungry set: holders with waiters they cannot serve. A holder that has
// more than limit/hungry slots gives released slots back instead of reusing them, and the
// others' polls pick them up.
type Redis struct {
	client rueidis.Client
	limits Limits
	o      RedisOptions
	holder string
	log    *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	pools map[string]*pool
}

var _ Semaphore = (*Redis)(nil)

// NewRedis returns a semaphore sharing limits through client. Close gives its slots back.
func NewRedis(client rueidis.Client, l Limits, o RedisOptions) *Redis {
	if o.Prefix == "" {
		o.Prefix = "infergate:batch:slots:"
	}
	if o.Lease <= 0 {
		o.Lease = 10 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 10 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &Redis{client: client, limits: l, o: o, holder: hex.EncodeToString(id[:]),
		log: o.Logger.With("component", "batch-slots"), ctx: ctx, cancel: cancel, pools: map[string]*pool{}}
}

// Close stops renewing leases and gives every slot back; requests still holding slots keep
// running, unbounded, so call it after they are done.
func (r *Redis) Close() {
	r.mu.Lock()
	r.cancel() // under mu: no pool starts its pump after this
	r.mu.Unlock()
	r.wg.Wait()
}

// pool is one key's slots in this process. Only its pump talks to Redis, so the holder's count
// there changes in one order.
type pool struct {
	r     *Redis
	key   string
	keys  []string // held (hash holder -> slots), leases (zset holder -> deadline), hungry (zset)
	limit int

	refs int // Acquire calls under way (guarded by r.mu): an idle pool is dropped only at 0

	mu       sync.Mutex
	held     int // slots Redis gave this holder
	used     int // of which requests hold
	reported int // what Redis last acknowledged this holder holds; -1 when unknown
	share    int // limit / hungry holders, from Redis' last answer
	// leaseEnd is when this holder's lease may end in Redis: Lease after the last call Redis
	// answered was sent, less a margin (see leaseEndAfter). Past it, Redis may have given the
	// holder's slots to others, so the slots not in use are no longer handed out.
	leaseEnd time.Time
	waiters  []*waiter
	wake     chan struct{}
}

type waiter struct {
	ready  chan struct{}
	served bool
}

// Acquire implements Semaphore.
func (r *Redis) Acquire(ctx context.Context, key string) (func(), error) {
	p, err := r.pool(key)
	if err != nil {
		return nil, err
	}
	defer r.unref(p)
	p.mu.Lock()
	if p.used < p.held && len(p.waiters) == 0 && p.leasedLocked() {
		p.used++
		p.mu.Unlock()
		return p.releaser(), nil
	}
	w := &waiter{ready: make(chan struct{})}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	p.poke()
	select {
	case <-w.ready:
		return p.releaser(), nil
	case <-ctx.Done():
		p.mu.Lock()
		if w.served {
			p.mu.Unlock()
			p.release()
		} else {
			p.drop(w)
			p.mu.Unlock()
			p.poke() // it may have been the last waiter: no longer hungry
		}
		return nil, ctx.Err()
	}
}

var errClosed = errors.New("slots: semaphore closed")

// pool returns key's pool, started if need be, with a reference the caller gives back (unref).
func (r *Redis) pool(key string) (*pool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return nil, errClosed
	}
	p, ok := r.pools[key]
	if !ok {
		tag := "{" + r.o.Prefix + key + "}"
		limit := r.limits.Of(key)
		p = &pool{r: r, key: key, keys: []string{tag + ":held", tag + ":leases", tag + ":hungry"},
			limit: limit, share: limit, wake: make(chan struct{}, 1)}
		r.pools[key] = p
		r.wg.Go(p.pump)
	}
	p.refs++
	return p, nil
}

func (r *Redis) unref(p *pool) {
	r.mu.Lock()
	p.refs--
	r.mu.Unlock()
}

// dropIdle removes p if nothing uses it: models come from users' files, so pools of models no
// longer run must not pile up. False when p is in use again.
func (r *Redis) dropIdle(p *pool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refs > 0 || p.used > 0 || p.held > 0 || p.reported != 0 || len(p.waiters) > 0 {
		return false
	}
	delete(r.pools, p.key)
	return true
}

func (p *pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pool) releaser() func() {
	var once sync.Once
	return func() { once.Do(p.release) }
}

// release frees a slot: the next waiter here gets it unless this holder has more than its
// share while others starve; then it goes back to Redis.
func (p *pool) release() {
	p.mu.Lock()
	p.used--
	if len(p.waiters) > 0 && p.held <= p.share && p.leasedLocked() {
		p.serveLocked(1)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.poke()
}

// leasedLocked reports whether this holder's lease surely still holds in Redis.
func (p *pool) leasedLocked() bool { return time.Now().Before(p.leaseEnd) }

// serveLocked hands up to n free slots to waiters, oldest first, while the lease holds.
func (p *pool) serveLocked(n int) {
	if !p.leasedLocked() {
		return
	}
	for ; n > 0 && len(p.waiters) > 0 && p.used < p.held; n-- {
		w := p.waiters[0]
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		w.served = true
		p.used++
		close(w.ready)
	}
}

func (p *pool) drop(w *waiter) {
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return
		}
	}
}

// pump keeps this holder's slots in Redis in line with its needs: it asks for slots while
// waiters need them (every Poll at first, backing off while none come), gives back those no
// request or waiter needs, and renews the lease while it holds any or starves. A pool idle for a
// lease ends its pump and is dropped.
func (p *pool) pump() {
	r := p.r
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	renew := r.o.Lease / 4
	// A holder starving at its share says so often, so that the others shrink soon and it
	// learns soon when slots free up.
	renewHungry := min(renew, 20*r.o.Poll)
	poll := r.o.Poll
	var lastSaid time.Time
	failing, idle := false, false
	for {
		select {
		case <-p.wake:
		case <-timer.C:
			if idle && r.dropIdle(p) {
				return
			}
		case <-r.ctx.Done():
			p.giveBack()
			return
		}
		p.mu.Lock()
		if p.held > p.used && !p.leasedLocked() {
			// Cut off from Redis past the lease: Redis may have given the slots not in use to
			// other holders, so they are not this holder's any more. (Those in use cannot be
			// taken back; the next answer counts them against the limit.)
			p.held = p.used
		}
		hungry := len(p.waiters) > 0
		want, target := 0, p.held
		switch {
		case hungry && p.held < p.share:
			want = min(len(p.waiters), p.share-p.held)
		case hungry && p.held > p.share:
			target = max(p.used, p.share)
		case !hungry:
			target = p.used
		}
		// Shrink here first, so no request takes a slot that is on its way back; what is kept
		// and free goes to the waiters.
		p.held = target
		p.serveLocked(p.held)
		hungry = len(p.waiters) > 0
		reported := p.reported
		p.mu.Unlock()

		var err error
		granted := 0
		due := time.Since(lastSaid) >= renew || hungry && time.Since(lastSaid) >= renewHungry
		switch {
		case want > 0:
			granted, err = p.acquire(want, target)
		case target != reported || due && (target > 0 || hungry):
			err = p.set(target, hungry)
		}
		if want > 0 || target != reported || due {
			lastSaid = time.Now()
		}
		if err != nil && r.ctx.Err() == nil {
			if !failing {
				r.log.Warn("batch slots: Redis call failed; waiting requests wait longer", "model", p.key, "err", err)
			}
			failing = true
		} else if err == nil && failing {
			r.log.Info("batch slots: Redis answers again", "model", p.key)
			failing = false
		}
		switch {
		case want > 0 && granted > 0 || want == 0:
			poll = r.o.Poll
		case err == nil:
			poll = min(2*poll, renewHungry) // refused: the others hold everything
		}

		p.mu.Lock()
		var next time.Duration
		idle = false
		switch {
		case err != nil:
			next = 100 * time.Millisecond
		case len(p.waiters) > 0 && p.held < p.share:
			next = poll
		case len(p.waiters) > 0:
			next = renewHungry
		case p.held > 0:
			next = renew
		default:
			next, idle = r.o.Lease, true
		}
		p.mu.Unlock()
		timer.Reset(next)
	}
}

// acquire tells Redis this holder has have slots and asks for want more, serves waiters with
// what it grants, and returns that. The count is absolute, as set's: a reply lost after the
// script ran leaves Redis with the right count at the next call.
func (p *pool) acquire(want, have int) (int, error) {
	r := p.r
	ctx, cancel := context.WithTimeout(r.ctx, time.Second)
	defer cancel()
	sent := time.Now()
	v, err := luaAcquire.Exec(ctx, r.client, p.keys, []string{r.holder, strconv.Itoa(want), strconv.Itoa(have),
		strconv.Itoa(p.limit), strconv.FormatInt(r.o.Lease.Milliseconds(), 10)}).AsIntSlice()
	if err != nil {
		p.mu.Lock()
		p.reported = -1
		p.mu.Unlock()
		return 0, err
	}
	if len(v) != 2 {
		return 0, errors.New("slots: unexpected reply to acquire")
	}
	p.mu.Lock()
	p.leaseEnd = r.leaseEndAfter(sent)
	p.held += int(v[0])
	p.reported = p.held
	p.share = shareOf(p.limit, v[1])
	p.serveLocked(p.held)
	p.mu.Unlock()
	return int(v[0]), nil
}

// set tells Redis this holder has n slots (the pump already made it so here) and whether it
// starves. The count is absolute, so a lost reply or a Redis restart heals at the next renewal.
func (p *pool) set(n int, hungry bool) error {
	r := p.r
	ctx, cancel := context.WithTimeout(r.ctx, time.Second)
	defer cancel()
	h := "0"
	if hungry {
		h = "1"
	}
	sent := time.Now()
	hungryN, err := luaSet.Exec(ctx, r.client, p.keys, []string{r.holder, strconv.Itoa(n), h,
		strconv.FormatInt(r.o.Lease.Milliseconds(), 10)}).AsInt64()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.reported = -1
		return err
	}
	p.reported = n
	p.share = shareOf(p.limit, hungryN)
	p.leaseEnd = r.leaseEndAfter(sent)
	return nil
}

// leaseEndAfter is when a lease renewed by a call sent at sent may end in Redis, early by an
// eighth of the lease: Redis stamps the lease with its clock truncated to the millisecond, and
// the two clocks may run at slightly different rates. Renewals come every quarter lease, so the
// margin never takes slots from a holder that Redis answers.
func (r *Redis) leaseEndAfter(sent time.Time) time.Time {
	return sent.Add(r.o.Lease - r.o.Lease/8)
}

// giveBack returns every slot at Close.
func (p *pool) giveBack() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := luaSet.Exec(ctx, p.r.client, p.keys, []string{p.r.holder, "0", "0",
		strconv.FormatInt(p.r.o.Lease.Milliseconds(), 10)}).Error(); err != nil {
		p.r.log.Warn("batch slots: giving slots back at close; they return when the lease ends", "model", p.key, "err", err)
	}
}

// shareOf is a holder's fair share among hungry holders.
func shareOf(limit int, hungry int64) int {
	if hungry <= 1 {
		return limit
	}
	return max(1, (limit+int(hungry)-1)/int(hungry))
}

// The scripts. KEYS: held (hash holder -> slots), leases (zset holder -> deadline ms), hungry
// (zset holder -> deadline ms). The clock is Redis TIME. Holders whose lease ended lose their
// slots first; every key expires when no holder has spoken for a few leases.
const luaReap = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, h in ipairs(dead) do
  redis.call('HDEL', KEYS[1], h)
  redis.call('ZREM', KEYS[3], h)
end
if #dead > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local function touch(ttl)
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl * 4) end
end
`

// ARGV: holder, want, have (the slots the holder has), limit, lease ms. Grants what is free, up
// to want. Returns {granted, hungry holders}.
var luaAcquire = rueidis.NewLuaScript(luaReap + `
local holder, want, have = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local limit, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local total = have - tonumber(redis.call('HGET', KEYS[1], holder) or '0')
for _, v in ipairs(redis.call('HVALS', KEYS[1])) do total = total + tonumber(v) end
local grant = math.max(0, math.min(want, limit - total))
if have + grant > 0 then
  redis.call('HSET', KEYS[1], holder, have + grant)
else
  redis.call('HDEL', KEYS[1], holder)
end
redis.call('ZADD', KEYS[2], now + ttl, holder)
if grant < want then
  redis.call('ZADD', KEYS[3], now + ttl, holder)
else
  redis.call('ZREM', KEYS[3], holder)
end
touch(ttl)
return {grant, redis.call('ZCARD', KEYS[3])}
`)

// ARGV: holder, slots, "1" if hungry, lease ms. Returns the hungry holders.
var luaSet = rueidis.NewLuaScript(luaReap + `
local holder, n, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local hungry = ARGV[3] == '1'
if n > 0 then
  redis.call('HSET', KEYS[1], holder, n)
else
  redis.call('HDEL', KEYS[1], holder)
end
if n > 0 or hungry then
  redis.call('ZADD', KEYS[2], now + ttl, holder)
else
  redis.call('ZREM', KEYS[2], holder)
end
if hungry then
  redis.call('ZADD', KEYS[3], now + ttl, holder)
else
  redis.call('ZREM', KEYS[3], holder)
end
touch(ttl)
return redis.call('ZCARD', KEYS[3])
`)
