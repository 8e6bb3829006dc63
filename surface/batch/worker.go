package batch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/infergate/infergate/core/httpapi"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/slots"
)

// Caller sends one request upstream through the gateway's routing, guard and metrics:
// *openai.Proxy is one.
type Caller interface {
	Call(ctx context.Context, path string, body []byte) (*pipeline.Response, error)
}

// WorkerOptions configures a Worker.
type WorkerOptions struct {
	Bus    bus.Bus
	State  batchstate.Store
	Caller Caller
	Topics Topics // default DefaultTopics()
	Logger *slog.Logger
	// Slots bounds the requests in flight per model; default NewLocal with Concurrency slots
	// per model. A slots.Redis shares the bound with every worker on the same Redis.
	Slots slots.Semaphore
	// Concurrency is the per-model bound when Slots is nil, and sizes the chunks this worker
	// takes in hand; default 64.
	Concurrency int
	// Attempts bounds the tries of a line that fails with a retryable error (no connection, 429,
	// 5xx, the gateway overloaded); default 4. Waits between them double from RetryBackoff
	// (default 500 ms, at most 30 s), or follow the upstream's Retry-After.
	Attempts     int
	RetryBackoff time.Duration
	// MaxResponseBytes bounds a response body kept for the output file; default 64 MiB.
	MaxResponseBytes int64
	// StatusInterval is how often the worker re-reads the state of the batches it runs, to
	// stop a cancelled or expired batch's requests; default 250 ms.
	StatusInterval time.Duration
	Metrics        *Metrics
}

// Worker runs batch lines: it takes chunks from the requests topic (shared with every other
// worker), sends their lines upstream at batch priority, and publishes their results.
// Delivery is at least once: a chunk is acked only after its results were published, and a
// redelivered chunk skips lines that already have results.
type Worker struct {
	o   WorkerOptions
	log *slog.Logger

	mu      sync.Mutex
	batches map[string]*running // batches with lines in flight here
}

// running is a batch this worker has lines of in flight.
type running struct {
	refs   int
	ctx    context.Context
	cancel context.CancelCauseFunc
	state  *batchstate.Batch
	read   time.Time
}

// Causes a running batch's requests are cancelled with.
var (
	errCancelled = errors.New("batch cancelled")
	errExpired   = errors.New("batch expired")
)

// NewWorker returns a worker; Run starts it.
func NewWorker(o WorkerOptions) *Worker {
	if o.Topics == (Topics{}) {
		o.Topics = DefaultTopics()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.Slots == nil {
		o.Slots = slots.NewLocal(slots.Limits{Default: o.Concurrency})
	}
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = 500 * time.Millisecond
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 64 << 20
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = 250 * time.Millisecond
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	return &Worker{o: o, log: o.Logger.With("component", "batch-worker"), batches: map[string]*running{}}
}

// Run consumes chunks and retries until ctx ends, then waits for the chunks in hand: their
// lines' requests are cancelled and the chunks are not acked, so another worker runs them again.
func (w *Worker) Run(ctx context.Context) error {
	msgs, err := w.o.Bus.Subscribe(ctx, w.o.Topics.Requests, workersGroup)
	if err != nil {
		return fmt.Errorf("batch worker: subscribing to %s: %w", w.o.Topics.Requests, err)
	}
	// Retries in hand mostly wait for their time, each on its own: one with a long wait must not
	// hold back those behind it in its partition (an ordered subscription would hand the next
	// only once it ran), so the subscription is unordered, and up to retriesInHand of them wait
	// at once, which bounds what they hold.
	retries, err := w.o.Bus.SubscribeUnordered(ctx, w.o.Topics.Retries, retriersGroup, retriesInHand)
	if err != nil {
		return fmt.Errorf("batch worker: subscribing to %s: %w", w.o.Topics.Retries, err)
	}
	var wg sync.WaitGroup
	var retryErr error
	wg.Go(func() { retryErr = consume(ctx, retries, retriesInHand, func(context.Context) {}, w.handle) })
	// Chunks in hand are bounded: enough to keep every slot busy while others wait, not a whole
	// batch's worth (the in-process bus hands every chunk over at once).
	err = consume(ctx, msgs, max(8, w.o.Concurrency/8), w.watch, w.handle)
	wg.Wait()
	return cmp.Or(err, retryErr)
}

// retriesInHand bounds the retries a worker holds at once (most of them waiting for their time),
// and those of one partition of the retries topic.
const retriesInHand = 64

// handle runs one chunk (from the requests or the retries topic) and acks it once its lines'
// results, and the lines to try again later, are published.
func (w *Worker) handle(ctx context.Context, msg *message.Message) {
	c, err := decodeChunk(msg.Payload)
	if err != nil {
		// A message no worker can read would come back forever: set it aside.
		w.log.Error("dropping a malformed chunk to the dead-letter topic", "err", err)
		if perr := w.o.Bus.Publish(w.o.Topics.DeadLetter, msg.Copy()); perr != nil {
			w.log.Error("publishing to the dead-letter topic", "err", perr)
			msg.Nack()
			return
		}
		msg.Ack()
		return
	}
	if !w.waitUntil(ctx, msg.Context(), c) {
		msg.Nack() // the worker is stopping, or the message went to another consumer
		return
	}
	res, retry, err := w.runChunk(ctx, c)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("batch chunk will be retried", "batch", c.Batch, "err", err)
		}
		msg.Nack()
		return
	}
	msgs, big := splitResults(res, maxChunkBytes)
	if len(big) > 0 {
		// Too large for one bus message: stored straight away (the collectors' sweep finishes
		// the batch if these were its last lines).
		rs := make([]batchstate.Result, len(big))
		for i, l := range big {
			rs[i] = batchstate.Result{CustomID: l.CustomID, Kind: l.Kind, Line: l.Line}
		}
		if _, err := w.o.State.Record(ctx, c.Batch, rs); err != nil {
			w.log.Warn("recording large batch results; the chunk will be retried", "batch", c.Batch, "err", err)
			msg.Nack()
			return
		}
	}
	for _, r := range msgs {
		out, err := newMessage(c.Batch, r)
		if err == nil {
			err = w.o.Bus.Publish(w.o.Topics.Results, out)
		}
		if err != nil {
			w.log.Warn("publishing batch results; the chunk will be retried", "batch", c.Batch, "err", err)
			msg.Nack()
			return
		}
	}
	if retry != nil {
		// Published last, just before this chunk is acked: a failure before it runs the chunk
		// again, results found recorded are skipped, and no second copy of the retry exists; a
		// crash between it and the ack runs those lines twice (their results are stored once),
		// never zero times.
		key := c.Batch + "/retry/" + watermill.NewShortUUID()
		if err := w.o.Bus.Publish(w.o.Topics.Retries, newRawMessage(key, encodeChunk(retry))); err != nil {
			w.log.Warn("publishing lines to retry; the chunk will be retried", "batch", c.Batch, "err", err)
			msg.Nack()
			return
		}
		w.o.Metrics.retries.Add(float64(len(retry.Lines)))
	}
	msg.Ack()
}

// waitUntil holds a retry until its time, or until its batch is cancelled or expires (its lines
// then end at once); false when the worker stops first.
//
// delivery is the message's own context: the unordered Kafka consumer ends it when its session
// ends (a rebalance), and the partition's next owner delivers the message again, so a retry
// still waiting here gives up rather than running twice.
func (w *Worker) waitUntil(ctx, delivery context.Context, c *chunk) bool {
	d := time.Until(time.UnixMilli(c.NotBefore))
	if c.NotBefore == 0 || d <= 0 {
		return true
	}
	run, err := w.acquire(ctx, c.Batch)
	if err != nil {
		return ctx.Err() == nil // runChunk meets the same error and says so
	}
	defer w.release(c.Batch)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-run.ctx.Done():
	case <-delivery.Done():
		return false
	}
	return ctx.Err() == nil
}

// runChunk runs the chunk's lines that have no result yet: their results, and a chunk of the
// lines to try again later. An error means the chunk must be delivered again (the worker is
// stopping, the state store failed).
func (w *Worker) runChunk(ctx context.Context, c *chunk) (*results, *chunk, error) {
	run, err := w.acquire(ctx, c.Batch)
	if err != nil {
		return nil, nil, err
	}
	defer w.release(c.Batch)
	res := &results{Batch: c.Batch}
	w.mu.Lock()
	st := run.state // replaced, never changed, by refresh
	w.mu.Unlock()
	if st == nil || st.Status.Terminal() {
		// The batch is gone or over (a chunk delivered again after its batch finished): its
		// results would be ignored, so nothing runs.
		return res, nil, nil
	}
	ids := make([]string, len(c.Lines))
	for i, l := range c.Lines {
		ids[i] = l.CustomID
	}
	done, err := w.o.State.Recorded(ctx, c.Batch, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("reading recorded lines: %w", err)
	}
	out := make([]resultLine, len(c.Lines))
	later := make([]time.Duration, len(c.Lines)) // > 0: try the line again after that
	lineCtx := run.ctx
	if st.Owner != "" {
		// The lines run as the key that created the batch: its allow-list, its rate limits.
		lineCtx = guard.WithPrincipal(lineCtx, &guard.Principal{Name: st.Owner, Models: st.OwnerModels})
	}
	// Every line still to run waits for a slot, those behind the first too.
	waiting := 0
	for i := range c.Lines {
		if !done[i] {
			waiting++
		}
	}
	w.o.Metrics.slotWaiting.Add(float64(waiting))
	defer func() { w.o.Metrics.slotWaiting.Sub(float64(waiting)) }()
	var wg sync.WaitGroup
	for i, l := range c.Lines {
		if done[i] {
			continue
		}
		if cause := context.Cause(run.ctx); cause != nil && ctx.Err() == nil {
			out[i] = stopped(l.CustomID, cause)
			waiting--
			w.o.Metrics.slotWaiting.Dec()
			continue
		}
		release, err := w.o.Slots.Acquire(run.ctx, c.Model)
		waiting--
		w.o.Metrics.slotWaiting.Dec()
		if err != nil {
			if ctx.Err() != nil || run.ctx.Err() == nil {
				wg.Wait()
				if ctx.Err() != nil {
					return nil, nil, ctx.Err()
				}
				return nil, nil, fmt.Errorf("waiting for a slot: %w", err)
			}
			out[i] = stopped(l.CustomID, context.Cause(run.ctx))
			continue
		}
		held := &slot{release: release}
		wg.Go(func() {
			defer held.let()
			out[i], later[i] = w.runLine(lineCtx, c, l, held)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, nil, ctx.Err() // the worker is stopping: lines cut short must run again elsewhere
	}
	var retry *chunk
	var wait time.Duration
	for i := range out {
		switch {
		case out[i].Kind != 0:
			res.Results = append(res.Results, out[i])
		case later[i] > 0:
			if retry == nil {
				retry = &chunk{Batch: c.Batch, Endpoint: c.Endpoint, Model: c.Model, Attempts: c.Attempts + 1}
			}
			retry.Lines = append(retry.Lines, c.Lines[i])
			wait = max(wait, later[i])
		}
	}
	if retry != nil {
		retry.NotBefore = time.Now().Add(wait).UnixMilli()
	}
	return res, retry, nil
}

// stopped is the result of a line that did not run because its batch was cancelled or expired.
func stopped(customID string, cause error) resultLine {
	if errors.Is(cause, errExpired) {
		return resultLine{CustomID: customID, Kind: batchstate.Error,
			Line: errorLine(customID, "batch_expired", "This request could not be executed before the completion window expired.")}
	}
	return resultLine{CustomID: customID, Kind: batchstate.Skipped}
}

// slot is a line's hold on one of its model's slots.
type slot struct{ release func() }

// let gives the slot back, if the line holds it.
func (s *slot) let() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
}

// runLine tries one line (attempt c.Attempts+1), waiting while the gateway holds batch work
// back. It returns the line's result, or how long to wait before the next attempt: the line
// then leaves its chunk for the retries topic.
func (w *Worker) runLine(ctx context.Context, c *chunk, l Line, held *slot) (resultLine, time.Duration) {
	m := w.o.Metrics
	m.inFlight.Inc()
	defer m.inFlight.Dec()
	start := time.Now()
	done := func(r resultLine) (resultLine, time.Duration) {
		m.lineDone(r.Kind, time.Since(start))
		return r, 0
	}
	attempt := c.Attempts + 1
	for waits := 0; ; {
		reqID := "req_" + pipeline.NewRequestID()
		a, err := w.call(ctx, c.Endpoint, reqID, l.Body)
		if err == nil && a.wait && ctx.Err() == nil {
			// The gateway holds batch work back (online traffic first, a rate limit, no upstream
			// up): wait, longer each time, without spending an attempt; the batch's completion
			// window bounds the waiting. Every line waits alike, so the chunk waits here.
			// The slot is let go meanwhile: a worker elsewhere may have use for it.
			waits++
			m.yields.Inc()
			held.let()
			select {
			case <-time.After(w.backoff(min(waits, 7), a.header)):
				m.slotWaiting.Inc()
				release, err := w.o.Slots.Acquire(ctx, c.Model)
				m.slotWaiting.Dec()
				if err == nil {
					held.release = release
					continue
				}
				if ctx.Err() == nil { // the semaphore closed: the worker is stopping
					return resultLine{}, w.backoff(min(waits, 7), a.header)
				}
			case <-ctx.Done():
			}
		}
		switch {
		case ctx.Err() != nil:
			cause := context.Cause(ctx)
			if !errors.Is(cause, errCancelled) && !errors.Is(cause, errExpired) {
				// The worker is stopping: the line runs again elsewhere, nothing is counted.
				return stopped(l.CustomID, cause), 0
			}
			return done(stopped(l.CustomID, cause))
		case err == nil && a.status >= 200 && a.status < 300:
			return done(resultLine{CustomID: l.CustomID, Kind: batchstate.Output, Line: responseLine(l.CustomID, reqID, a.status, a.body)})
		case err == nil && (a.final || !retryable(a.status)):
			return done(resultLine{CustomID: l.CustomID, Kind: batchstate.Error, Line: responseLine(l.CustomID, reqID, a.status, a.body)})
		}
		if attempt < w.o.Attempts {
			return resultLine{}, w.backoff(attempt, a.header) // counted once published
		}
		var last string
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("status %d: %s", a.status, httpapi.Truncate(string(a.body), 512))
		}
		w.deadLetter(c, l, attempt, last)
		if err == nil { // the upstream's last answer is the line's response
			return done(resultLine{CustomID: l.CustomID, Kind: batchstate.Error, Line: responseLine(l.CustomID, reqID, a.status, a.body)})
		}
		return done(resultLine{CustomID: l.CustomID, Kind: batchstate.Error, Line: errorLine(l.CustomID, "upstream_unavailable", last)})
	}
}

// answer is what one attempt of a line got: the status, headers and body of the upstream's
// response or of the gateway's own refusal.
type answer struct {
	status int
	header http.Header
	body   []byte
	// wait: the gateway refused for now (see waitCodes); final: a failure no retry mends.
	wait, final bool
}

// call sends one request and reads its answer; err only when no answer came.
func (w *Worker) call(ctx context.Context, endpoint, reqID string, body []byte) (answer, error) {
	ctx = pipeline.WithRequestID(guard.WithPriority(ctx, guard.Batch), reqID)
	resp, err := w.o.Caller.Call(ctx, endpoint, body)
	if err != nil {
		var oe *pipeline.Error
		if errors.As(err, &oe) {
			wait := waitCodes[oe.Code]
			if oe.Code == "rate_limit_exceeded" {
				// Without Retry-After the request can never fit the budget (more tokens than
				// its whole burst): waiting would loop until the window ends.
				wait = httpapi.RetryAfter(oe.Header) > 0
			}
			return answer{status: oe.Status, header: oe.Header, body: oe.JSON(), wait: wait}, nil
		}
		return answer{}, err
	}
	defer resp.Close()
	b, err := io.ReadAll(io.LimitReader(resp, w.o.MaxResponseBytes+1))
	if err != nil {
		return answer{}, fmt.Errorf("reading the upstream's response: %w", err)
	}
	if int64(len(b)) > w.o.MaxResponseBytes {
		return answer{status: http.StatusBadGateway, final: true, body: pipeline.ServerError(http.StatusBadGateway,
			"response_too_large", fmt.Sprintf("The upstream's response is larger than %d bytes.", w.o.MaxResponseBytes)).JSON()}, nil
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// waitCodes are the gateway's refusals that mean "not now" rather than "this request failed":
// load shedding, the rate limiter out of reach, no upstream up or all of them cut off by their
// breakers (an outage a batch waits out, as OpenAI's do). rate_limit_exceeded waits when the
// refusal says when to retry.
var waitCodes = map[string]bool{"overloaded": true, "queue_timeout": true, "rate_limiter_unavailable": true,
	"no_healthy_upstream": true, "upstream_circuit_open": true}

// retryable reports whether a status may succeed when tried again.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500
}

// backoff is the wait before the next attempt: the upstream's Retry-After when it sent one,
// else an exponential wait with jitter.
func (w *Worker) backoff(attempt int, h http.Header) time.Duration {
	const maxWait = 30 * time.Second
	if d := httpapi.RetryAfter(h); d > 0 {
		return min(d, maxWait)
	}
	d := min(w.o.RetryBackoff<<(attempt-1), maxWait)
	return d/2 + mrand.N(d/2+1)
}

func (w *Worker) deadLetter(c *chunk, l Line, attempts int, last string) {
	msg, err := newMessage(c.Batch, deadLetter{Batch: c.Batch, Endpoint: c.Endpoint, CustomID: l.CustomID,
		Body: l.Body, Attempts: attempts, Error: last})
	if err == nil {
		err = w.o.Bus.Publish(w.o.Topics.DeadLetter, msg)
	}
	if err != nil {
		w.log.Error("publishing a failed line to the dead-letter topic", "batch", c.Batch, "custom_id", l.CustomID, "err", err)
		return
	}
	w.o.Metrics.deadLettered.Inc()
}

// acquire registers a chunk of the batch as running here, reading the batch's state when this
// worker has none fresh: its context ends when the batch is cancelled or expires.
func (w *Worker) acquire(ctx context.Context, id string) (*running, error) {
	w.mu.Lock()
	run, ok := w.batches[id]
	if !ok {
		rctx, cancel := context.WithCancelCause(ctx)
		run = &running{ctx: rctx, cancel: cancel}
		w.batches[id] = run
	}
	run.refs++
	fresh := ok && time.Since(run.read) < w.o.StatusInterval
	w.mu.Unlock()
	if fresh {
		return run, nil
	}
	if err := w.refresh(ctx, id, run); err != nil {
		w.release(id)
		return nil, err
	}
	return run, nil
}

func (w *Worker) release(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	run := w.batches[id]
	run.refs--
	if run.refs == 0 {
		run.cancel(nil)
		delete(w.batches, id)
	}
}

// refresh reads the batch's state and cancels its requests if it was cancelled or expired.
func (w *Worker) refresh(ctx context.Context, id string, run *running) error {
	b, err := w.o.State.Get(ctx, id)
	if errors.Is(err, batchstate.ErrNotFound) {
		b, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("reading batch %s: %w", id, err)
	}
	w.mu.Lock()
	run.state, run.read = b, time.Now()
	w.mu.Unlock()
	switch {
	case b == nil:
	case b.Status == batchstate.Cancelling || b.Status == batchstate.Cancelled:
		run.cancel(errCancelled)
	case b.ExpiredAt != 0 || (b.ExpiresAt != 0 && time.Now().Unix() >= b.ExpiresAt):
		if b.ExpiredAt == 0 {
			// Marked before any line is given up, so the batch finishes as expired, not
			// completed, whoever finalizes it.
			if err := markExpired(ctx, w.o.State, id, time.Now()); err != nil {
				return fmt.Errorf("marking batch %s expired: %w", id, err)
			}
		}
		run.cancel(errExpired)
	}
	return nil
}

// markExpired records that the batch's completion window ended while it was in progress.
func markExpired(ctx context.Context, st batchstate.Store, id string, now time.Time) error {
	_, err := st.Update(ctx, id, func(b *batchstate.Batch) error {
		if b.ExpiredAt != 0 || b.Status != batchstate.InProgress {
			return batchstate.ErrUnchanged
		}
		b.ExpiredAt = now.Unix()
		return nil
	})
	return err
}

// watch re-reads the state of the batches running here, so a cancel stops their requests
// within StatusInterval.
func (w *Worker) watch(ctx context.Context) {
	every(ctx, w.o.StatusInterval, func() bool {
		w.mu.Lock()
		runs := make(map[string]*running, len(w.batches))
		for id, r := range w.batches {
			runs[id] = r
		}
		w.mu.Unlock()
		for id, r := range runs {
			if err := w.refresh(ctx, id, r); err != nil && ctx.Err() == nil {
				w.log.Warn("reading a running batch's state", "batch", id, "err", err)
			}
		}
		return true
	})
}

// responseLine is an output or error file line for a request the upstream (or the gateway)
// answered.
func responseLine(customID, reqID string, status int, body []byte) json.RawMessage {
	if !json.Valid(body) {
		body = tensor.AppendJSONString(nil, string(body))
	}
	b := make([]byte, 0, len(body)+len(customID)+128)
	b = append(b, `{"id":"batch_`...)
	b = append(b, reqID...)
	b = append(b, `","custom_id":`...)
	b = tensor.AppendJSONString(b, customID)
	b = append(b, `,"response":{"status_code":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"request_id":"`...)
	b = append(b, reqID...)
	b = append(b, `","body":`...)
	b = append(b, body...)
	return append(b, `},"error":null}`...)
}

// errorLine is an error file line for a request that got no answer.
func errorLine(customID, code, msg string) json.RawMessage {
	b := append([]byte(`{"id":"batch_req_`), pipeline.NewRequestID()...)
	b = append(b, `","custom_id":`...)
	b = tensor.AppendJSONString(b, customID)
	b = append(b, `,"response":null,"error":{"code":`...)
	b = tensor.AppendJSONString(b, code)
	b = append(b, `,"message":`...)
	b = tensor.AppendJSONString(b, msg)
	return append(b, `}}`...)
}
