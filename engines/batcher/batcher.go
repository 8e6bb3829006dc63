// Package batcher is Triton's dynamic batcher for the engines registry: concurrent requests to a
// model whose config has dynamic_batching are queued, coalesced along the batch dimension up to
// max_batch_size (honouring preferred_batch_size, max_queue_delay_microseconds, priority levels
// and queue policies, with Triton's errors), run as one request, and split back per request.
//
// Wire it with Registry.SetScheduler(batcher.Factory(opts)). Entries without dynamic_batching
// keep running their model directly, at the cost of one atomic load.
package batcher

import (
	"container/list"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
)

// Triton's errors for requests its queue refuses or drops.
var (
	errQueueFull = errors.New("Exceeds maximum queue size")
	errTimeout   = errors.New("Request timeout expired")
)

// Options choose which models the Factory batches.
type Options struct {
	// Remote batches remote models (registered backends, upstream servers' models) whose config
	// enables dynamic batching too; off by default, since an upstream with such a config usually
	// batches by itself.
	Remote bool
	// Metrics is where the batchers count (nil: metrics nobody registered).
	Metrics *Metrics
}

// Factory returns the registry's SchedulerFactory: a Batcher for every entry whose config enables
// dynamic batching with max_batch_size > 0 (sequence and decoupled models never reach it).
func Factory(opts Options) engines.SchedulerFactory {
	return func(e *engines.Entry, run engines.ExecuteFunc) engines.Scheduler {
		cfg := e.Config()
		if cfg.GetDynamicBatching() == nil || cfg.GetMaxBatchSize() <= 0 || (e.Remote() && !opts.Remote) {
			return nil
		}
		return newBatcher(e, run, opts.Metrics)
	}
}

// Batcher is one model's dynamic batcher. Its workers (one per model instance, instance_group's
// counts) exist only while requests are queued.
type Batcher struct {
	entry     *engines.Entry
	run       engines.ExecuteFunc
	maxBatch  int64
	preferred []int64
	delay     time.Duration
	instances int
	levels    []*level // index 0 is priority level 1 (or the only level)
	deflt     int      // index of the default level

	mu      sync.Mutex
	queued  int // requests in all levels
	workers int // running workers
	waiting int // workers waiting for more requests or the queue delay
	wake    chan struct{}
	metrics modelMetrics
}

type level struct {
	policy  *inference.ModelQueuePolicy
	ready   list.List // of *item, oldest first
	delayed list.List // requests past their timeout under the DELAY action: after ready ones
}

type item struct {
	ctx     context.Context
	req     *engines.Request
	rows    int64
	enq     time.Time
	lvl     *level
	elem    *list.Element // nil once taken into a batch
	inDelay bool
	queued  time.Duration
	done    chan result
}

type result struct {
	res *engines.Response
	err error
}

// New returns the batcher for e, whose model runs with run, with metrics nobody registered.
func New(e *engines.Entry, run engines.ExecuteFunc) *Batcher { return newBatcher(e, run, nil) }

func newBatcher(e *engines.Entry, run engines.ExecuteFunc, m *Metrics) *Batcher {
	if m == nil {
		m = NewMetrics()
	}
	cfg := e.Config()
	db := cfg.GetDynamicBatching()
	b := &Batcher{
		entry:    e,
		run:      run,
		maxBatch: int64(cfg.GetMaxBatchSize()),
		delay:    time.Duration(db.GetMaxQueueDelayMicroseconds()) * time.Microsecond,
		wake:     make(chan struct{}, 1),
		metrics:  m.forModel(e.Name()),
	}
	for _, p := range db.GetPreferredBatchSize() {
		if p > 0 && int64(p) <= b.maxBatch {
			b.preferred = append(b.preferred, int64(p))
		}
	}
	slices.Sort(b.preferred)
	for _, g := range cfg.GetInstanceGroup() {
		b.instances += int(max(g.GetCount(), 0))
	}
	b.instances = max(b.instances, 1)
	n := max(int(db.GetPriorityLevels()), 1)
	b.levels = make([]*level, n)
	for i := range b.levels {
		p := db.GetPriorityQueuePolicy()[uint64(i+1)]
		if p == nil {
			p = db.GetDefaultQueuePolicy()
		}
		b.levels[i] = &level{policy: p}
	}
	if d := int(db.GetDefaultPriorityLevel()); d >= 1 && d <= n {
		b.deflt = d - 1
	} else if db.GetPriorityLevels() > 0 {
		b.deflt = n - 1 // Triton requires a default level; the lowest is the safe reading
	}
	return b
}

// Execute queues req, waits for the batch it joins to run, and sends its own rows. A request
// that cannot join a batch (no batch dimension, custom parameters, a sequence) runs directly.
func (b *Batcher) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	rows := rowsOf(req)
	if rows < 0 || len(req.Parameters) != 0 || !req.Sequence.ID.IsZero() || b.entry.RequestDecoupled(req) {
		return b.run(ctx, req, send)
	}
	lvl := b.levels[b.deflt]
	if req.Priority >= 1 && req.Priority <= uint64(len(b.levels)) {
		lvl = b.levels[req.Priority-1]
	}
	timeout := time.Duration(lvl.policy.GetDefaultTimeoutMicroseconds()) * time.Microsecond
	if lvl.policy.GetAllowTimeoutOverride() && req.Timeout > 0 {
		timeout = req.Timeout
	}
	it := &item{ctx: ctx, req: req, rows: rows, enq: time.Now(), lvl: lvl, done: make(chan result, 1)}
	if err := b.enqueue(it); err != nil {
		return err
	}
	var expire <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	cancel := ctx.Done()
	for {
		select {
		case r := <-it.done:
			req.Queued, req.Batched = it.queued, true
			if r.err != nil {
				return r.err
			}
			return send(r.res)
		case <-cancel:
			if b.remove(it) {
				return ctx.Err()
			}
			cancel = nil // already running: its inputs are in use until the batch ends
		case <-expire:
			expire = nil
			if lvl.policy.GetTimeoutAction() == inference.ModelQueuePolicy_DELAY {
				b.postpone(it)
			} else if b.remove(it) {
				b.metrics.timedOutCnt.Inc()
				return connect.NewError(connect.CodeUnavailable, errTimeout)
			}
		}
	}
}

func (b *Batcher) enqueue(it *item) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if maxQ := it.lvl.policy.GetMaxQueueSize(); maxQ > 0 && uint64(it.lvl.ready.Len()+it.lvl.delayed.Len()) >= uint64(maxQ) {
		b.metrics.full.Inc()
		return connect.NewError(connect.CodeUnavailable, errQueueFull)
	}
	it.elem = it.lvl.ready.PushBack(it)
	b.queued++
	b.metrics.pending.Set(float64(b.queued))
	b.nudge()
	return nil
}

// nudge makes sure a worker looks at the queue: a waiting one is woken, else one is started if
// fewer than the model's instances run. Called with mu held.
func (b *Batcher) nudge() {
	if b.waiting > 0 {
		select {
		case b.wake <- struct{}{}:
		default:
		}
		return
	}
	if b.workers < b.instances {
		b.workers++
		go b.work()
	}
}

// remove takes a request out of the queue, reporting false if a batch already took it.
func (b *Batcher) remove(it *item) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if it.elem == nil {
		return false
	}
	it.lvlList().Remove(it.elem)
	it.elem = nil
	b.queued--
	b.metrics.pending.Set(float64(b.queued))
	return true
}

// postpone moves a request past its timeout behind its level's other requests (the DELAY action).
func (b *Batcher) postpone(it *item) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if it.elem == nil || it.inDelay {
		return
	}
	it.lvl.ready.Remove(it.elem)
	it.inDelay = true
	it.elem = it.lvl.delayed.PushBack(it)
}

func (it *item) lvlList() *list.List {
	if it.inDelay {
		return &it.lvl.delayed
	}
	return &it.lvl.ready
}

// work runs batches while requests are queued, then exits.
func (b *Batcher) work() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	b.mu.Lock()
	for {
		if b.queued == 0 {
			b.workers--
			b.mu.Unlock()
			return
		}
		batch, wait := b.form(time.Now())
		if batch == nil {
			b.waiting++
			b.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-b.wake:
				timer.Stop()
			}
			b.mu.Lock()
			b.waiting--
			continue
		}
		if b.queued > 0 {
			b.nudge() // another instance may take the rest while this batch runs
		}
		b.mu.Unlock()
		b.execute(batch)
		b.mu.Lock()
	}
}

// form picks the next batch in priority order, or says how long to wait for one. The batch is
// the longest run of compatible requests from the head of the queue that fits max_batch_size;
// it runs at once when it is full, when a prefix of it has a preferred size (the largest such
// prefix runs), or when its oldest request has waited max_queue_delay. Called with mu held.
func (b *Batcher) form(now time.Time) ([]*item, time.Duration) {
	var (
		cand    []*item
		rows    int64
		full    bool
		prefBig int // length of the longest prefix with a preferred size
	)
scan:
	for _, l := range b.levels {
		for _, q := range []*list.List{&l.ready, &l.delayed} {
			for el := q.Front(); el != nil; el = el.Next() {
				it := el.Value.(*item)
				if len(cand) > 0 && (!compatible(cand[0].req, it.req) || rows+it.rows > b.maxBatch) {
					full = true
					break scan
				}
				cand = append(cand, it)
				rows += it.rows
				if slices.Contains(b.preferred, rows) {
					prefBig = len(cand)
				}
				if rows >= b.maxBatch {
					full = true
					break scan
				}
			}
		}
	}
	if len(cand) == 0 {
		return nil, time.Hour
	}
	switch {
	case full, b.delay == 0:
	case prefBig > 0:
		cand = cand[:prefBig]
	default:
		oldest := cand[0].enq
		for _, it := range cand[1:] {
			if it.enq.Before(oldest) {
				oldest = it.enq
			}
		}
		if wait := oldest.Add(b.delay).Sub(now); wait > 0 {
			return nil, wait
		}
	}
	for _, it := range cand {
		it.lvlList().Remove(it.elem)
		it.elem = nil
		it.queued = now.Sub(it.enq)
	}
	b.queued -= len(cand)
	b.metrics.pending.Set(float64(b.queued))
	return cand, 0
}

// execute runs one batch and hands each request its part of the response.
func (b *Batcher) execute(batch []*item) {
	reqs := make([]*engines.Request, len(batch))
	rows := make([]int64, len(batch))
	var total int64
	for i, it := range batch {
		reqs[i], rows[i] = it.req, it.rows
		total += it.rows
	}
	start := time.Now()
	merged := merge(reqs)
	inferStart := time.Now()
	var res *engines.Response
	// The batch serves many callers, so no one caller's cancellation stops it; it keeps the first
	// request's context values (its caller's identity and trace).
	err := b.run(context.WithoutCancel(batch[0].ctx), merged, func(r *engines.Response) error {
		if res != nil {
			return connect.NewError(connect.CodeInternal, errors.New("model sent more than one response"))
		}
		res = r
		return nil
	})
	outStart := time.Now()
	if err == nil && res == nil {
		err = connect.NewError(connect.CodeInternal, errors.New("model sent no response"))
	}
	var parts []*engines.Response
	if err == nil {
		parts, err = split(res, rows)
		if err != nil {
			err = connect.NewError(connect.CodeInternal, err)
		}
	}
	b.metrics.sizes.Observe(float64(total))
	if err == nil {
		b.entry.Stats.RecordBatch(int(total), inferStart.Sub(start), outStart.Sub(inferStart), time.Since(outStart))
	}
	for i, it := range batch {
		if err != nil {
			it.done <- result{err: err}
		} else {
			it.done <- result{res: parts[i]}
		}
	}
}

// Len is the number of requests waiting in the queue.
func (b *Batcher) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.queued
}
