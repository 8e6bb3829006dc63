package breaker

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// Redis is the breaker shared by every gateway replica using the same Redis and prefix: one
// replica's failures open the endpoint on all of them, and a half-open round admits at most
// HalfOpenProbes probes across all of them. The state lives in Redis (layout in lua.go) and
// changes only through Lua scripts that use Redis's clock.
//
// The hot path makes no Redis call. Each replica caches every endpoint's state: from the
// scripts' replies, from the change published on every transition (received within a
// round trip, far below 100 ms), and from a resync on every (re)subscription and every
// SyncInterval. Allow on a closed endpoint, and on an open one before its deadline, answers
// from the cache; only an open endpoint whose deadline passed or a half-open one asks Redis
// (one script). Outcomes in the closed state are counted locally and sent in one pipelined
// batch of scripts per FlushInterval; a failure makes the batch go at once. So the shared
// error-rate window is exact up to about one FlushInterval (outcomes are stamped when their
// batch arrives) and moves in steps of Window/10, and consecutive failures are counted per
// batch: a batch with a success resets the shared count to the failures after its last
// success, one without adds to it (outcomes of different replicas interleave only at batch
// boundaries). Probe outcomes are sent at once, from Done.
//
// When Redis fails (a call errs or exceeds Timeout), the replica breaks on its own outcomes
// only, as Local does, starting from the last shared state it knew, and retries Redis every
// RetryInterval; once Redis answers, it resyncs and shares again (the outcomes counted while
// degraded are not sent). No call waits for Redis longer than Timeout. Generations only grow
// (see lua.go) as long as Redis's clock does not go back across a restart.
//
// Replicas sharing a Redis and prefix should use the same Settings: each script applies the
// Settings of the replica that runs it. State reports what this replica knows: an endpoint it
// has never been asked about is Closed until its first Allow, which reads the shared state.
//
// Endpoint names are not bounded by the breaker: callers name configured upstreams, never
// anything a client chose, and Remove the ones they drop.
type Redis struct {
	client  rueidis.Client
	opts    RedisOptions
	s       Settings
	n       *notifier
	local   *Local // the fallback while Redis is unreachable
	prefix  string
	channel string
	log     *slog.Logger
	warn    *logthrottle.Throttle
	// downLogged: the outage's warning was written and its end not yet. Only such an outage's
	// end is logged, so a flapping Redis costs one pair of lines per throttle interval.
	downLogged atomic.Bool

	mu  sync.Mutex // serializes writers of eps
	eps atomic.Pointer[map[string]*rentry]

	modeMu   sync.Mutex // serializes switching into and out of degraded mode
	degraded atomic.Bool

	flushMu  sync.Mutex // one flush at a time: Flush returns once earlier outcomes are in Redis
	flushNow chan struct{}
	syncNow  chan struct{}
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	// Script arguments that do not change.
	ttl, limit, rate, minReq, windowMs, openMs, probes, need string
}

// RedisOptions configure a Redis breaker.
type RedisOptions struct {
	Options
	// Prefix starts every key and the channel; default "infergate".
	Prefix string
	// Timeout bounds every Redis call; default 50 ms.
	Timeout time.Duration
	// FlushInterval: how often closed-state outcomes are sent; default 100 ms.
	FlushInterval time.Duration
	// SyncInterval: how often every endpoint's state is reread, a backstop for a missed change
	// message; default 1 s.
	SyncInterval time.Duration
	// RetryInterval: how often Redis is retried while unreachable; default 200 ms.
	RetryInterval time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Throttle writes the warnings that repeat while Redis fails (unreachable, a lost
	// subscription, malformed change messages) at most once per its interval, with a count;
	// default logthrottle.New(Logger, logthrottle.DefaultInterval).
	Throttle *logthrottle.Throttle
}

// NewRedis returns a breaker sharing its state through client, and starts its background work
// (subscription, flushes, resyncs). The client stays the caller's: Close stops the background
// work, not the client.
func NewRedis(client rueidis.Client, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "infergate"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 50 * time.Millisecond
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = 100 * time.Millisecond
	}
	if opts.SyncInterval <= 0 {
		opts.SyncInterval = time.Second
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
	s := opts.Settings.withDefaults()
	b := &Redis{
		client:   client,
		opts:     opts,
		s:        s,
		n:        &notifier{m: newMetrics(), hook: opts.OnStateChange},
		prefix:   opts.Prefix + ":breaker:",
		channel:  opts.Prefix + ":breaker:changes",
		log:      opts.Logger,
		warn:     opts.Throttle,
		flushNow: make(chan struct{}, 1),
		syncNow:  make(chan struct{}, 1),
		ttl:      ms(2*(s.Window+s.OpenTimeout) + s.MaxCooldown + time.Minute),
		limit:    strconv.Itoa(s.ConsecutiveFailures),
		rate:     strconv.FormatFloat(s.ErrorRate, 'g', -1, 64),
		minReq:   strconv.Itoa(s.MinRequests),
		windowMs: ms(s.Window),
		openMs:   ms(s.OpenTimeout),
		probes:   strconv.Itoa(s.HalfOpenProbes),
		need:     strconv.Itoa(s.SuccessesToClose),
	}
	// The fallback reports its changes only while it is the one deciding.
	b.local = newLocal(Options{Settings: s, Now: opts.Now},
		&notifier{m: b.n.m, hook: opts.OnStateChange, active: b.degraded.Load})
	b.eps.Store(&map[string]*rentry{})
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.wg.Go(func() { b.subscribeLoop(ctx) })
	b.wg.Go(func() { b.flushLoop(ctx) })
	b.wg.Go(func() { b.syncLoop(ctx) })
	return b
}

func ms(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }

// Close stops the background work after sending the outcomes not yet flushed.
func (b *Redis) Close() {
	b.cancel()
	b.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.Timeout)
	defer cancel()
	_ = b.Flush(ctx)
}

// Collectors are the breaker's Prometheus metrics, including its Redis calls.
func (b *Redis) Collectors() []prometheus.Collector {
	m := b.n.m
	return []prometheus.Collector{m.state, m.transitions, m.refused, m.redisSeconds, m.redisErrors, m.degraded}
}

// Degraded reports whether Redis is unreachable and this replica breaks on its own outcomes.
func (b *Redis) Degraded() bool { return b.degraded.Load() }

func (b *Redis) now() int64 { return b.local.now() }

// view is what this replica knows of an endpoint's shared state. Immutable once published.
type view struct {
	state State
	gen   uint64
	until int64 // local clock ns: Open: when half-open may start; HalfOpen: when the round times out
	cool  int64 // local clock ns: cooldown deadline; 0: none
	full  bool  // HalfOpen: Redis last refused a probe (all out), so refuse locally until until
}

// rentry is one endpoint of the Redis breaker.
type rentry struct {
	name string
	key  string
	b    *Redis
	fb   *lendpoint // the fallback's endpoint

	view    atomic.Pointer[view]
	updates atomic.Uint64 // bumped by every view change

	// Closed-state outcomes not yet flushed.
	succ, fail, trail atomic.Int64 // trail: failures since the last success
	saw               atomic.Bool  // a success since the last flush
	coolMs            atomic.Int64 // a cooldown to share (the longest asked for)
}

// Allow implements Breaker. Besides an *OpenError it returns ctx's error when ctx ends while
// Redis is asked.
func (b *Redis) Allow(ctx context.Context, endpoint string) (Ticket, error) {
	e := b.entry(ctx, endpoint)
	if b.degraded.Load() {
		return e.fb.allow()
	}
	v := e.view.Load()
	if v.state == Closed && v.cool == 0 {
		return Ticket{rec: e, gen: v.gen}, nil
	}
	return e.allowSlow(ctx, v)
}

// State implements Breaker.
func (b *Redis) State(endpoint string) State {
	if b.degraded.Load() {
		return b.local.State(endpoint)
	}
	e := (*b.eps.Load())[endpoint]
	if e == nil {
		return Closed
	}
	return e.effective(e.view.Load())
}

// RetryAfter implements Breaker. A half-open round counts as full only once Redis refused
// this replica a probe in it: until then Allow asks Redis, so the wait is zero.
func (b *Redis) RetryAfter(endpoint string) time.Duration {
	if b.degraded.Load() {
		return b.local.RetryAfter(endpoint)
	}
	e := (*b.eps.Load())[endpoint]
	if e == nil {
		return 0
	}
	v := e.view.Load()
	now := b.now()
	var wait int64
	if v.state == Open || v.state == HalfOpen && v.full {
		wait = v.until - now
	}
	return time.Duration(max(wait, v.cool-now, 0))
}

// effective is the view's state, HalfOpen once an open deadline passed.
func (e *rentry) effective(v *view) State {
	if v.state == Open && e.b.now() >= v.until {
		return HalfOpen
	}
	return v.state
}

// Remove forgets an endpoint locally (its shared state stays in Redis until it expires).
func (b *Redis) Remove(endpoint string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := *b.eps.Load()
	if _, ok := old[endpoint]; !ok {
		return
	}
	eps := make(map[string]*rentry, len(old))
	for k, v := range old {
		if k != endpoint {
			eps[k] = v
		}
	}
	b.eps.Store(&eps)
	b.local.Remove(endpoint)
}

// entry returns the endpoint, creating it (and reading its shared state once) on first use.
func (b *Redis) entry(ctx context.Context, name string) *rentry {
	if e := (*b.eps.Load())[name]; e != nil {
		return e
	}
	e, created := b.track(name)
	if created && !b.degraded.Load() {
		// Another replica may have opened it already.
		seen := e.updates.Load()
		cctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
		r, err := b.call(cctx, "sync", luaRead, e.key, b.args(e))
		cancel()
		switch {
		case err == nil:
			e.apply(r, false, seen)
		case ctx.Err() == nil: // not the caller giving up: Redis failed
			b.fail("sync", err)
		}
	}
	return e
}

// track returns the endpoint's entry, creating it when this replica did not know it yet.
func (b *Redis) track(name string) (e *rentry, created bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	old := *b.eps.Load()
	if e := old[name]; e != nil {
		return e, false
	}
	e = &rentry{name: name, key: b.prefix + "{" + name + "}", b: b, fb: b.local.endpoint(name)}
	e.view.Store(&view{})
	eps := make(map[string]*rentry, len(old)+1)
	for k, v := range old {
		eps[k] = v
	}
	eps[name] = e
	b.eps.Store(&eps)
	return e, true
}

// allowSlow decides for an endpoint that is not plainly closed: from the cache when it can,
// else with one script.
func (e *rentry) allowSlow(ctx context.Context, v *view) (Ticket, error) {
	b := e.b
	now := b.now()
	switch {
	case v.cool > now:
		return Ticket{}, b.n.refuse(&OpenError{Endpoint: e.name, State: v.state, Throttled: true, RetryAfter: time.Duration(v.cool - now)})
	case v.state == Closed:
		e.update(func(nv *view) bool { // the cooldown is over: back to the fast path
			nv.cool = 0
			return nv.gen == v.gen
		})
		return Ticket{rec: e, gen: v.gen}, nil
	case v.state == Open && now < v.until, v.state == HalfOpen && v.full && now < v.until:
		return Ticket{}, b.n.refuse(&OpenError{Endpoint: e.name, State: v.state, RetryAfter: time.Duration(v.until - now)})
	}
	seen := e.updates.Load()
	cctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	r, err := b.call(cctx, "acquire", luaAcquire, e.key, append(b.args(e), b.probes, b.openMs))
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return Ticket{}, ctx.Err()
		}
		b.fail("acquire", err)
		return e.fb.allow()
	}
	e.apply(r, r.admit == 0 && r.state == HalfOpen, seen)
	switch r.admit {
	case 1:
		return Ticket{rec: e, gen: r.gen}, nil
	case 2:
		return Ticket{rec: e, gen: r.gen, probe: true}, nil
	}
	refusal := &OpenError{Endpoint: e.name, State: r.state, RetryAfter: time.Duration(r.dlMs) * time.Millisecond}
	if r.coolMs > 0 {
		refusal.Throttled, refusal.RetryAfter = true, time.Duration(r.coolMs)*time.Millisecond
	}
	return Ticket{}, b.n.refuse(refusal)
}

func (e *rentry) done(gen uint64, probe bool, o Outcome, retryAfter time.Duration) {
	b := e.b
	var cool time.Duration
	if o == Throttled {
		cool = b.s.cooldown(retryAfter)
	}
	if b.degraded.Load() {
		if !probe {
			e.fb.doneCurrent(o, retryAfter)
		}
		return
	}
	if probe {
		b.probeDone(e, gen, o, cool)
		return
	}
	if cool > 0 {
		e.coolDown(cool)
		return
	}
	v := e.view.Load()
	if v.gen != gen || v.state != Closed {
		return // admitted before a transition
	}
	switch o {
	case Success:
		e.succ.Add(1)
		if e.trail.Load() != 0 {
			e.trail.Store(0)
		}
		if !e.saw.Load() {
			e.saw.Store(true)
		}
	case Failure:
		e.fail.Add(1)
		e.trail.Add(1)
		b.kickFlush()
	}
}

// coolDown starts a cooldown here at once and has it shared with the next flush.
func (e *rentry) coolDown(d time.Duration) {
	until := e.b.now() + int64(d)
	e.update(func(nv *view) bool {
		if nv.cool >= until {
			return false
		}
		nv.cool = until
		return true
	})
	for m := d.Milliseconds(); ; {
		c := e.coolMs.Load()
		if c >= m || e.coolMs.CompareAndSwap(c, m) {
			break
		}
	}
	e.b.kickFlush()
}

// probeDone sends a probe's outcome at once: the round's decision must not wait for a flush.
func (b *Redis) probeDone(e *rentry, gen uint64, o Outcome, cool time.Duration) {
	if cool > 0 {
		e.coolDown(cool)
	}
	code := "r"
	switch o {
	case Success:
		code = "s"
	case Failure:
		code = "f"
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.Timeout)
	defer cancel()
	coolMs := "0"
	if cool > 0 {
		coolMs = ms(cool)
	}
	seen := e.updates.Load()
	r, err := b.call(ctx, "probe", luaProbe, e.key,
		append(b.args(e), strconv.FormatUint(gen, 10), code, b.need, b.openMs, coolMs))
	if err != nil {
		b.fail("probe", err)
		return
	}
	e.apply(r, false, seen)
}

// noReset is apply's seen for a state that may not reset the cache (a change message).
const noReset = ^uint64(0)

// apply takes a state read from Redis (a reply or a change message) into the cache when it is
// not older than what the cache holds. full: a half-open round refused this replica's probe.
//
// Generation 0 is a key Redis does not have: never tripped, expired, or lost in a restart. A
// cache that knows a later generation is reset to it only when it has not changed since the
// call was sent (seen: e.updates then), so a late reply from before the first trip cannot undo
// the trip's change message that overtook it.
func (e *rentry) apply(r reply, full bool, seen uint64) {
	if r.gen == 0 && e.view.Load().gen != 0 {
		if seen != e.updates.Load() {
			return
		}
		e.reset(r, seen)
		return
	}
	now := e.b.now()
	nv := view{state: r.state, gen: r.gen, full: full}
	if r.state != Closed {
		nv.until = now + r.dlMs*int64(time.Millisecond)
	}
	if r.coolMs > 0 {
		nv.cool = now + r.coolMs*int64(time.Millisecond)
	}
	for {
		cur := e.view.Load()
		if nv.gen < cur.gen {
			return
		}
		next := nv
		if nv.gen == cur.gen {
			// Same period: keep the longer cooldown (a local 429 not yet shared).
			next.cool = max(next.cool, cur.cool)
			if nv == *cur {
				return
			}
		}
		// Counted before the swap: a reset that checked the count before it compares against the
		// view it loaded before that, and fails.
		e.updates.Add(1)
		if e.view.CompareAndSwap(cur, &next) {
			if nv.gen != cur.gen && next.state != Closed {
				// Redis would drop them: closed-state outcomes count only while closed.
				e.takeCounts()
			}
			if !e.b.degraded.Load() {
				e.b.n.changed(e.name, cur.state, next.state)
			}
			return
		}
	}
}

// reset replaces the cache with Redis's generation-0 state, unless it changed since seen.
func (e *rentry) reset(r reply, seen uint64) {
	nv := &view{state: r.state}
	if r.coolMs > 0 {
		nv.cool = e.b.now() + r.coolMs*int64(time.Millisecond)
	}
	cur := e.view.Load()
	if e.updates.Load() != seen {
		return
	}
	e.updates.Add(1)
	if !e.view.CompareAndSwap(cur, nv) {
		return
	}
	if !e.b.degraded.Load() {
		e.b.n.changed(e.name, cur.state, nv.state)
	}
}

// update changes the cached view with f (on a copy); f reports whether to store it.
func (e *rentry) update(f func(*view) bool) {
	for {
		cur := e.view.Load()
		next := *cur
		if !f(&next) {
			return
		}
		e.updates.Add(1)
		if e.view.CompareAndSwap(cur, &next) {
			return
		}
	}
}

// counts are an endpoint's unflushed closed-state outcomes.
type counts struct {
	succ, fail, trail int64
	saw               bool
	coolMs            int64
}

func (e *rentry) takeCounts() counts {
	return counts{
		succ: e.succ.Swap(0), fail: e.fail.Swap(0), trail: e.trail.Swap(0),
		saw: e.saw.Swap(false), coolMs: e.coolMs.Swap(0),
	}
}

func (b *Redis) args(e *rentry) []string {
	return []string{b.channel, e.name, b.ttl}
}

// call runs one script with metrics.
func (b *Redis) call(ctx context.Context, op string, s *script, key string, args []string) (reply, error) {
	start := time.Now()
	r, err := s.exec(ctx, b.client, key, args)
	b.n.m.redisSeconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
	return r, err
}

func (b *Redis) kickFlush() {
	select {
	case b.flushNow <- struct{}{}:
	default:
	}
}

func (b *Redis) flushLoop(ctx context.Context) {
	t := time.NewTicker(b.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.flushNow:
		}
		fctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
		_ = b.Flush(fctx)
		cancel()
	}
}

// Flush sends the closed-state outcomes counted so far in one pipeline, and takes the replies'
// states into the cache. It does nothing while Redis is unreachable.
func (b *Redis) Flush(ctx context.Context) error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	if b.degraded.Load() {
		return nil
	}
	var (
		entries []*rentry
		seen    []uint64
		execs   []rueidis.LuaExec
	)
	for _, e := range *b.eps.Load() {
		if e.succ.Load() == 0 && e.fail.Load() == 0 && e.coolMs.Load() == 0 {
			continue
		}
		c := e.takeCounts()
		if c.succ+c.fail == 0 && c.coolMs == 0 {
			continue
		}
		saw := "0"
		if c.saw {
			saw = "1"
		}
		entries = append(entries, e)
		seen = append(seen, e.updates.Load())
		execs = append(execs, rueidis.LuaExec{Keys: []string{e.key}, Args: append(b.args(e),
			strconv.FormatUint(e.view.Load().gen, 10),
			strconv.FormatInt(c.succ, 10), strconv.FormatInt(c.fail, 10), strconv.FormatInt(c.trail, 10), saw,
			b.limit, b.rate, b.minReq, b.windowMs, b.openMs, strconv.FormatInt(c.coolMs, 10))})
	}
	if len(execs) == 0 {
		return nil
	}
	start := time.Now()
	res := luaRecord.multi(ctx, b.client, execs)
	b.n.m.redisSeconds.WithLabelValues("flush").Observe(time.Since(start).Seconds())
	var firstErr error
	for i, r := range res {
		rep, err := parseReply(r)
		if err != nil {
			firstErr = cmpOr(firstErr, err)
			continue
		}
		entries[i].apply(rep, false, seen[i])
	}
	if firstErr != nil && !errors.Is(ctx.Err(), context.Canceled) { // not a shutdown
		b.fail("flush", firstErr)
	}
	return firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// subscribeLoop keeps the change subscription; each confirmed (re)subscription asks for a
// resync, since changes published while unsubscribed are only in the data.
func (b *Redis) subscribeLoop(ctx context.Context) {
	msgs := make(chan string, 1024)
	var lost atomic.Bool // logged once per outage, not once per retry
	subCtx := rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "subscribe" {
			lost.Store(false)
			b.kickSync()
		}
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-msgs:
				b.handle(m)
			}
		}
	})
	for ctx.Err() == nil {
		err := b.client.Receive(subCtx, b.client.B().Subscribe().Channel(b.channel).Build(),
			func(m rueidis.PubSubMessage) {
				select {
				case msgs <- m.Message:
				default:
					// The handler fell behind: drop, and let a resync catch up.
					b.kickSync()
				}
			})
		if ctx.Err() != nil {
			return
		}
		if !lost.Swap(true) {
			b.warn.Warn(warnSubscription, warnSubscription, "err", err)
		}
		sleep(ctx, b.opts.RetryInterval)
	}
}

func (b *Redis) handle(msg string) {
	c, err := parseChange(msg)
	if err != nil {
		b.warn.Warn(warnMalformed, warnMalformed, "err", err)
		return
	}
	// An endpoint this replica has not used yet is tracked from now on, so its State (which
	// routing and the admin endpoint read) is the shared one before its first request.
	e, _ := b.track(c.endpoint)
	e.apply(c.r, false, noReset)
}

func (b *Redis) kickSync() {
	select {
	case b.syncNow <- struct{}{}:
	default:
	}
}

// syncLoop rereads every endpoint's state each SyncInterval, on every (re)subscription, and
// each RetryInterval while Redis is unreachable (the first success ends degraded mode).
func (b *Redis) syncLoop(ctx context.Context) {
	for {
		d := b.opts.SyncInterval
		if b.degraded.Load() {
			d = b.opts.RetryInterval
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-b.syncNow:
			t.Stop()
		}
		sctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
		err := b.sync(sctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			b.fail("sync", err)
		case b.degraded.Load():
			b.recover()
		}
	}
}

func (b *Redis) sync(ctx context.Context) error {
	eps := *b.eps.Load()
	start := time.Now()
	defer func() { b.n.m.redisSeconds.WithLabelValues("sync").Observe(time.Since(start).Seconds()) }()
	if len(eps) == 0 {
		return b.client.Do(ctx, b.client.B().Ping().Build()).Error()
	}
	entries := make([]*rentry, 0, len(eps))
	seen := make([]uint64, 0, len(eps))
	execs := make([]rueidis.LuaExec, 0, len(eps))
	for _, e := range eps {
		entries = append(entries, e)
		seen = append(seen, e.updates.Load())
		execs = append(execs, rueidis.LuaExec{Keys: []string{e.key}, Args: b.args(e)})
	}
	for i, r := range luaRead.multi(ctx, b.client, execs) {
		rep, err := parseReply(r)
		if err != nil {
			return err
		}
		entries[i].apply(rep, false, seen[i])
	}
	return nil
}

// fail counts a failed Redis call and, unless already there, switches to local-only breaking:
// each endpoint's fallback starts from the shared state last known.
func (b *Redis) fail(op string, err error) {
	b.n.m.redisErrors.WithLabelValues(op).Inc()
	if b.degraded.Load() {
		b.warnDown(op, err) // every failed retry: one line per interval while the outage lasts
		return
	}
	b.modeMu.Lock()
	defer b.modeMu.Unlock()
	if b.degraded.Load() {
		return
	}
	now := b.now()
	for _, e := range *b.eps.Load() {
		v := e.view.Load()
		var openFor, coolFor time.Duration
		if v.state == Open && v.until > now {
			openFor = time.Duration(v.until - now)
		}
		if v.cool > now {
			coolFor = time.Duration(v.cool - now)
		}
		s := v.state
		if s == HalfOpen {
			s = Open // the fallback starts its own round at once
		}
		e.fb.seed(s, openFor, coolFor)
		e.takeCounts()
	}
	b.degraded.Store(true)
	b.n.m.degraded.Set(1)
	b.warnDown(op, err)
	b.kickSync()
}

// The throttled warnings' keys, which are also their messages.
const (
	warnDown         = "breaker: Redis unreachable; breaking circuits on this replica's outcomes only"
	warnSubscription = "breaker: change subscription lost; resubscribing"
	warnMalformed    = "breaker: ignoring a malformed change message"
)

func (b *Redis) warnDown(op string, err error) {
	if b.warn.Warn(warnDown, warnDown, "op", op, "err", err) {
		b.downLogged.Store(true)
	}
}

// recover ends degraded mode after a successful resync: the shared state decides again.
func (b *Redis) recover() {
	b.modeMu.Lock()
	type diff struct {
		name     string
		from, to State
	}
	var diffs []diff
	for _, e := range *b.eps.Load() {
		e.takeCounts()
		from, to := e.fb.state(), e.effective(e.view.Load())
		if from != to {
			diffs = append(diffs, diff{e.name, from, to})
		}
	}
	b.degraded.Store(false)
	b.modeMu.Unlock()
	b.n.m.degraded.Set(0)
	if b.downLogged.Swap(false) {
		b.log.Info("breaker: Redis reachable again; sharing circuit state")
	}
	for _, d := range diffs {
		b.n.changed(d.name, d.from, d.to)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
