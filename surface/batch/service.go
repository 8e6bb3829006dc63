// Package batch runs offline batch inference behind OpenAI's Files and Batches API: an uploaded
// JSONL file of requests becomes a batch, validated as a whole, whose lines travel in chunks over
// a bus (Watermill: GoChannel in one process, Kafka across machines) to workers that call the
// model through the gateway's own routing and guard at batch priority. Results come back over the
// bus, are stored once per custom_id, and are assembled into the output and error files exactly
// once. Any replica or worker may die at any time: delivery is at least once, storage is
// idempotent, and claims that expire let another replica finish what one started.
package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/files"
)

// Options configures a Service.
type Options struct {
	Files files.Store
	State batchstate.Store
	Bus   bus.Bus
	// Topics default to DefaultTopics().
	Topics  Topics
	Logger  *slog.Logger
	Metrics *Metrics
	// MaxFileBytes bounds an uploaded file; default 200 MiB, as OpenAI's.
	MaxFileBytes int64
	// MaxLines bounds the requests of one batch; default 100,000.
	MaxLines int
	// MaxLineBytes bounds one input line (one request); default 16 MiB. Over Kafka keep it under
	// the brokers' message.max.bytes (1 MB by default): a line travels in one message.
	MaxLineBytes int
	// ChunkLines is the most lines a requests-topic message carries; default 64. A chunk also
	// stops before it passes 512 KiB, so it stays under Kafka's message size limit.
	ChunkLines int
	// ClaimTTL is how long a replica owns a batch's validation, dispatch or finalization before
	// another may take it over; default 1 minute.
	ClaimTTL time.Duration
	// SweepInterval is how often a replica looks for batches to take over, expire or finish;
	// default 2 s.
	SweepInterval time.Duration
	// OrphanSweepInterval is how often a replica looks for output and error files that a
	// finalization wrote but never committed (its replica died in between) and removes them; the
	// look lists every file, so it is rare; default 10 minutes.
	OrphanSweepInterval time.Duration
	// Grace is how long after a cancel or the end of the completion window lines in flight
	// may still report their results before the rest are given up; default 2 s.
	Grace time.Duration
	// ID names this replica in claims; default a random id.
	ID string
	// StoreTimeout bounds the batch state store's part of one Files or Batches API request:
	// past it, or as soon as the store reports it cannot be reached (Redis down or hung), the
	// request answers 503 with Retry-After rather than waiting for the store; default 2 s.
	StoreTimeout time.Duration
	// RedispatchAfter, when set, publishes again the lines without a result of a batch that made
	// no progress for that long: for a bus that loses what it holds when a process ends (the
	// in-process bus) under state that outlives the process (Redis). Zero: never.
	RedispatchAfter time.Duration
}

// Service serves the Files and Batches API, dispatches batches to the bus, collects results
// and finalizes batches. Workers (in this process or others) run the lines.
type Service struct {
	o     Options
	log   *slog.Logger
	m     *Metrics
	clock func() time.Time // time.Now; tests set it before using the service

	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // guards closed and wg.Add
	closed bool
	wg     sync.WaitGroup

	// progress is, per active batch, when this replica last saw its results move.
	progress map[string]seen

	// finalizing holds the batches this replica is finalizing: the claim keeps other replicas
	// out, this keeps a second result message of the same batch from starting a second run here.
	finalizing sync.Map
}

// New returns a service; Run starts its collector and sweeper.
func New(o Options) (*Service, error) {
	if o.Files == nil || o.State == nil || o.Bus == nil {
		return nil, errors.New("batch: Files, State and Bus are required")
	}
	if o.Topics == (Topics{}) {
		o.Topics = DefaultTopics()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 200 << 20
	}
	if o.MaxLines <= 0 {
		o.MaxLines = 100_000
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = 16 << 20
	}
	if o.ChunkLines <= 0 {
		o.ChunkLines = 64
	}
	if o.ClaimTTL <= 0 {
		o.ClaimTTL = time.Minute
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = 2 * time.Second
	}
	if o.Grace <= 0 {
		o.Grace = 2 * time.Second
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = 2 * time.Second
	}
	if o.OrphanSweepInterval <= 0 {
		o.OrphanSweepInterval = 10 * time.Minute
	}
	if o.ID == "" {
		o.ID = "replica-" + pipeline.NewRequestID()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{o: o, log: o.Logger.With("component", "batch"), m: o.Metrics, clock: time.Now, ctx: ctx,
		cancel: cancel, progress: map[string]seen{}}, nil
}

// Run collects results and sweeps batches until ctx ends or Close is called.
func (s *Service) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	msgs, err := s.o.Bus.Subscribe(ctx, s.o.Topics.Results, collectorsGroup)
	if err != nil {
		return fmt.Errorf("batch: subscribing to %s: %w", s.o.Topics.Results, err)
	}
	return consume(ctx, msgs, 16, s.sweepers, s.collect)
}

// sweepers runs the batch sweep and, beside it, the orphan sweep: listing every file may take a
// while and must not hold batches up.
func (s *Service) sweepers(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() {
		every(ctx, s.o.OrphanSweepInterval, func() bool {
			s.sweepOrphans(ctx)
			return ctx.Err() == nil
		})
	})
	s.sweep(ctx)
	wg.Wait()
}

// consume handles each message in a goroutine of its own, at most limit at a time, while
// beside runs along; it returns once msgs closed and every handler returned.
func consume(ctx context.Context, msgs <-chan *message.Message, limit int, beside func(context.Context),
	handle func(context.Context, *message.Message)) error {
	var wg sync.WaitGroup
	wg.Go(func() { beside(ctx) })
	sem := make(chan struct{}, limit)
	for msg := range msgs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			handle(ctx, msg)
		})
	}
	wg.Wait()
	return ctx.Err()
}

// Close stops Run and the batches this replica is validating, dispatching or finalizing (their
// claims expire and another replica takes them over), and waits for them.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// background runs f for a batch step outside the request that started it; after Close it runs
// nothing (the step's claim expires and a replica that runs takes it over).
func (s *Service) background(f func(ctx context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.ctx)
	}()
}

func (s *Service) now() time.Time { return s.clock() }

// collect stores one results message and finalizes its batch when that was its last line.
func (s *Service) collect(ctx context.Context, msg *message.Message) {
	r, err := decodeResults(msg.Payload)
	if err != nil {
		s.log.Error("dropping a malformed results message", "err", err)
		msg.Ack()
		return
	}
	rs := make([]batchstate.Result, len(r.Results))
	for i, l := range r.Results {
		rs[i] = batchstate.Result{CustomID: l.CustomID, Kind: l.Kind, Line: l.Line}
	}
	counts, err := s.o.State.Record(ctx, r.Batch, rs)
	if errors.Is(err, batchstate.ErrNotFound) {
		// The batch is gone (its keys expired long after it finished): nobody wants these.
		msg.Ack()
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("recording batch results; they will be delivered again", "batch", r.Batch, "err", err)
		}
		msg.Nack()
		return
	}
	msg.Ack()
	if counts.Done() {
		s.background(func(ctx context.Context) { s.finalize(ctx, r.Batch) })
	}
}

// claim takes the batch's claim for this replica if it is free or expired and the batch is in
// one of the statuses, applying change; it reports whether this replica now owns the step.
func (s *Service) claim(ctx context.Context, id string, change func(*batchstate.Batch) error, statuses ...batchstate.Status) (*batchstate.Batch, bool, error) {
	owned := false
	b, err := s.o.State.Update(ctx, id, func(b *batchstate.Batch) error {
		owned = false
		now := s.now().UnixMilli()
		if !hasStatus(b, statuses...) || (b.Claim != "" && b.Claim != s.o.ID && b.ClaimUntil > now) {
			return batchstate.ErrUnchanged
		}
		if change != nil {
			if err := change(b); err != nil {
				return err
			}
		}
		b.Claim, b.ClaimUntil = s.o.ID, now+s.o.ClaimTTL.Milliseconds()
		owned = true
		return nil
	})
	return b, owned, err
}

// holdClaim runs step while keeping this replica's claim on the batch alive, renewing it every
// third of ClaimTTL; if the claim is lost (another replica took it after a stall) or cannot be
// renewed, step's context ends, so a slow step never runs beside its successor.
func (s *Service) holdClaim(ctx context.Context, id string, step func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		every(ctx, s.o.ClaimTTL/3, func() bool {
			lost, released := false, false
			_, err := s.o.State.Update(ctx, id, func(b *batchstate.Batch) error {
				if lost = b.Claim != s.o.ID; lost {
					released = b.Claim == "" // the step finished and let it go
					return batchstate.ErrUnchanged
				}
				b.ClaimUntil = s.now().Add(s.o.ClaimTTL).UnixMilli()
				return nil
			})
			if released { // nothing to say, but a step still running must stop all the same
				cancel()
				return false
			}
			if lost || (err != nil && ctx.Err() == nil) {
				s.log.Warn("lost a batch's claim; stopping its step", "batch", id, "err", err)
				cancel()
				return false
			}
			return true
		})
	}()
	step(ctx)
	cancel()
	<-renewed
}

func ptr[T any](v T) *T { return &v }

func hasStatus(b *batchstate.Batch, statuses ...batchstate.Status) bool {
	for _, st := range statuses {
		if b.Status == st {
			return true
		}
	}
	return false
}

// prepare validates a batch's input file and dispatches its lines, or fails it with the file's
// errors. The caller holds the batch's claim.
func (s *Service) prepare(ctx context.Context, id string) {
	b, err := s.o.State.Get(ctx, id)
	if err != nil {
		s.log.Warn("preparing a batch", "batch", id, "err", err)
		return
	}
	in, errs, err := s.scanFile(ctx, b, nil)
	if err != nil {
		s.log.Warn("reading a batch's input; another try follows when the claim expires", "batch", id, "err", err)
		return
	}
	now := s.now().Unix()
	if errs == nil && len(b.OwnerModels) > 0 && !slices.Contains(b.OwnerModels, in.model) {
		errs = []batchstate.ErrorEntry{{Code: "model_not_allowed", Param: ptr("body.model"),
			Message: fmt.Sprintf("The API key that created this batch may not use the model %q.", in.model)}}
	}
	if errs != nil {
		_, err := s.o.State.Update(ctx, id, func(b *batchstate.Batch) error {
			if b.Status != batchstate.Validating {
				return batchstate.ErrUnchanged
			}
			b.Status, b.FailedAt, b.Errors, b.Claim, b.ClaimUntil = batchstate.Failed, now, errs, "", 0
			return nil
		})
		if err != nil {
			s.log.Warn("failing a batch", "batch", id, "err", err)
			return
		}
		s.m.batches.WithLabelValues(string(batchstate.Failed)).Inc()
		s.log.Info("batch failed validation", "batch", id, "errors", len(errs), "first", errs[0].Message)
		return
	}
	b, err = s.o.State.Update(ctx, id, func(b *batchstate.Batch) error {
		if b.Status != batchstate.Validating || b.Claim != s.o.ID {
			return batchstate.ErrUnchanged
		}
		b.Status, b.InProgressAt, b.Model, b.Counts.Total = batchstate.InProgress, now, in.model, int64(in.n)
		b.ClaimUntil = s.now().Add(s.o.ClaimTTL).UnixMilli()
		return nil
	})
	if err != nil {
		s.log.Warn("starting a batch", "batch", id, "err", err)
		return
	}
	if b.Status != batchstate.InProgress || b.Claim != s.o.ID {
		return // cancelled while it was validated, or taken over
	}
	s.m.batches.WithLabelValues(string(batchstate.InProgress)).Inc()
	s.dispatch(ctx, b, in)
}

// openInput opens a batch's input file; when it is gone, no file but the error that says so.
func (s *Service) openInput(ctx context.Context, b *batchstate.Batch) (io.ReadCloser, []batchstate.ErrorEntry, error) {
	f, err := s.o.Files.Open(ctx, b.InputFileID)
	if errors.Is(err, files.ErrNotFound) {
		return nil, []batchstate.ErrorEntry{{Code: "file_not_found", Message: fmt.Sprintf("The input file %s no longer exists.", b.InputFileID)}}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("opening the input file %s: %w", b.InputFileID, err)
	}
	return f, nil, nil
}

// scanFile opens a batch's input file and validates it with scanInput, passing each: what the
// file holds, or the errors that fail the batch (file_not_found when it is gone); err when it
// could not be read (try again later) or each failed.
func (s *Service) scanFile(ctx context.Context, b *batchstate.Batch, each func(Line) error) (input, []batchstate.ErrorEntry, error) {
	f, errs, err := s.openInput(ctx, b)
	if f == nil {
		return input{}, errs, err
	}
	defer f.Close()
	return scanInput(f, b.Endpoint, s.o.MaxLines, s.o.MaxLineBytes, each)
}

// changedInput is the error of an input file that a read found other than its validation did.
var changedInput = []batchstate.ErrorEntry{{Code: "input_changed", Message: "The input file changed since it was validated."}}

// sameInput reports whether what a read of the batch's input found is what the batch was
// validated from.
func sameInput(b *batchstate.Batch, in input) bool {
	return in.model == b.Model && int64(in.n) == b.Counts.Total
}

// dispatch publishes the lines of the batch's input, which a read just validated as in, then
// marks the batch dispatched and frees its claim. The batch is in progress: its model and total
// are set. Each chunk has a partition key of its own (batch id and chunk number), so one batch
// spreads over every partition and so over every worker of the group, rather than queueing behind
// one.
func (s *Service) dispatch(ctx context.Context, b *batchstate.Batch, in input) {
	if !sameInput(b, in) {
		s.log.Error("a batch's input no longer holds what the batch started with; another try follows when the claim expires",
			"batch", b.ID, "file", b.InputFileID, "requests", in.n, "model", in.model, "total", b.Counts.Total, "batch_model", b.Model)
		return
	}
	if !s.publish(ctx, b, in, nil) {
		return
	}
	_, err := s.o.State.Update(ctx, b.ID, func(b *batchstate.Batch) error {
		if b.Claim != s.o.ID {
			// This replica stalled and another took the batch over: the batch is its to mark
			// (or to give up, when its window ended meanwhile).
			return batchstate.ErrUnchanged
		}
		b.Dispatched, b.Claim, b.ClaimUntil = true, "", 0
		return nil
	})
	if err != nil {
		s.log.Warn("marking a batch dispatched", "batch", b.ID, "err", err)
	}
}

// publish reads the batch's input file again (a read just validated it as in) and sends its
// lines (those whose custom_id keep accepts; every line when keep is nil) to the requests topic
// in chunks as they fill. Chunks go out in groups (a Kafka producer sends a group in one go), and
// the next group is read and encoded while the bus sends the last (a Kafka publish waits for the
// brokers): one chunk's lines and three groups (one filling, one waiting, one being sent) are all
// it holds, whatever the file's size. False if it could not send them all: the bus failed, ctx
// ended, or the input could not be read or no longer is what was validated (then, as when a
// takeover finds it so, nothing marks the batch dispatched and a later try reads it again).
func (s *Service) publish(ctx context.Context, b *batchstate.Batch, in input, keep func(customID string) bool) bool {
	f, errs, err := s.openInput(ctx, b)
	if f == nil {
		if err == nil {
			err = errors.New(errs[0].Message)
		}
		s.log.Warn("opening a batch's input to publish its lines; another try follows when the claim expires", "batch", b.ID, "err", err)
		return false
	}
	defer f.Close()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	groups := make(chan []*message.Message, 1)
	sent := make(chan error, 1)
	go func() {
		var err error
		for msgs := range groups {
			if err != nil {
				continue // the reader is stopping: drain
			}
			if err = s.o.Bus.Publish(s.o.Topics.Requests, msgs...); err != nil {
				err = fmt.Errorf("publishing to %s: %w", s.o.Topics.Requests, err)
				cancel()
			}
		}
		sent <- err
	}()

	var (
		msgs   []*message.Message
		size   int // of msgs' payloads
		chunks int
		lines  int // in the chunks made so far
	)
	send := func() error {
		if len(msgs) == 0 {
			return nil
		}
		select {
		case groups <- msgs: // the sender owns them now
		case <-ctx.Done():
			return ctx.Err()
		}
		msgs, size = make([]*message.Message, 0, publishGroup), 0
		return nil
	}
	ch := chunker{maxLines: s.o.ChunkLines, maxBytes: maxChunkBytes, emit: func(ls []Line) error {
		c := chunk{Batch: b.ID, Endpoint: b.Endpoint, Model: b.Model, Lines: ls}
		payload := encodeChunk(&c)
		if size+len(payload) > maxGroupBytes {
			if err := send(); err != nil {
				return err
			}
		}
		msgs = append(msgs, newRawMessage(b.ID+"/"+strconv.Itoa(chunks), payload))
		size += len(payload)
		chunks++
		lines += len(ls)
		if len(msgs) == publishGroup {
			if err := send(); err != nil {
				return err
			}
		}
		return ctx.Err()
	}}
	err = readLines(f, in, s.o.MaxLineBytes, func(l Line) error {
		if keep != nil && !keep(l.CustomID) {
			return nil
		}
		return ch.add(l)
	})
	if err == nil {
		if err = ch.flush(); err == nil {
			err = send()
		}
	}
	close(groups)
	if perr := <-sent; perr != nil {
		err = perr // the reader stopped because the bus failed
	}
	switch {
	case parent.Err() != nil:
		return false // the claim was lost or the service is closing: whoever goes on says why
	case errors.Is(err, errInputChanged):
		s.log.Error("a batch's input changed since it was validated; another try follows when the claim expires",
			"batch", b.ID, "file", b.InputFileID, "err", err)
		return false
	case err != nil:
		s.log.Warn("publishing a batch's lines; another try follows when the claim expires", "batch", b.ID, "err", err)
		return false
	}
	s.m.queued.Add(float64(lines))
	return true
}

// A group of chunks sent in one Publish call holds at most publishGroup chunks and, unless one
// chunk is larger, maxGroupBytes.
const (
	publishGroup  = 16
	maxGroupBytes = 1 << 20
)

// maxChunkBytes bounds the request bodies of one chunk (a single larger line goes alone).
const maxChunkBytes = 512 << 10

// chunker groups lines, as they are read, into chunks of at most maxLines lines whose bodies hold
// at most maxBytes together (a line larger than that is a chunk of its own), handing each chunk
// to emit once the next line does not fit, and the last one to flush.
type chunker struct {
	maxLines, maxBytes int
	// emit must not keep the slice: the chunker reuses it.
	emit  func([]Line) error
	lines []Line
	size  int
}

func (c *chunker) add(l Line) error {
	if len(c.lines) > 0 && (len(c.lines) >= c.maxLines || c.size+len(l.Body) > c.maxBytes) {
		if err := c.flush(); err != nil {
			return err
		}
	}
	c.lines = append(c.lines, l)
	c.size += len(l.Body)
	return nil
}

// flush emits the lines held, if any.
func (c *chunker) flush() error {
	if len(c.lines) == 0 {
		return nil
	}
	err := c.emit(c.lines)
	clear(c.lines) // the bodies are in the encoded chunk now
	c.lines, c.size = c.lines[:0], 0
	return err
}

// fileID is the id of a batch's output ("output") or error ("error") file. nonce tells one
// finalization's files from another's: a replica that lost its claim mid-way never replaces the
// files its successor committed.
func fileID(batchID, which, nonce string) string {
	return "file-" + batchID + "-" + which + "-" + nonce
}

// batchOfFile returns the batch whose finalization named a file id with fileID, or false if id
// is no such name.
func batchOfFile(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, "file-")
	if !ok {
		return "", false
	}
	batchID, rest, ok := strings.Cut(rest, "-")
	if !ok || !strings.HasPrefix(batchID, "batch_") {
		return "", false
	}
	which, nonce, ok := strings.Cut(rest, "-")
	if !ok || (which != "output" && which != "error") || nonce == "" || strings.Contains(nonce, "-") {
		return "", false
	}
	return batchID, true
}

// minOrphanAge is the least age of a file the orphan sweep removes. The batch being terminal is
// what makes a file an orphan (a finalization commits only a batch that is not); the age is a
// margin for clocks that disagree.
const minOrphanAge = 5 * time.Minute

// sweepOrphans removes the output and error files that a finalization wrote but that its batch
// does not name, once the batch is terminal: nothing will name them any more. dropFiles removes
// those of a replica that lost its claim; these are left by a replica that died before it could
// commit or drop them. Files of batches that are gone are kept: once a batch expired, its
// committed files cannot be told from orphans, and they are the user's.
func (s *Service) sweepOrphans(ctx context.Context) {
	list, _, err := s.o.Files.List(ctx, files.ListOptions{Purpose: "batch_output"})
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("listing files for orphaned batch files", "err", err)
		}
		return
	}
	before := s.now().Add(-max(minOrphanAge, 2*s.o.ClaimTTL)).Unix()
	final := map[string]*batchstate.Batch{} // by id; nil when its files must stay
	for _, f := range list {
		if ctx.Err() != nil {
			return
		}
		id, ok := batchOfFile(f.ID)
		if !ok || f.CreatedAt > before {
			continue
		}
		b, seen := final[id]
		if !seen {
			b, err = s.o.State.Get(ctx, id)
			if err != nil {
				if !errors.Is(err, batchstate.ErrNotFound) && ctx.Err() == nil {
					s.log.Warn("reading a batch for its orphaned files", "batch", id, "err", err)
				}
				b = nil
			} else if !b.Status.Terminal() {
				b = nil
			}
			final[id] = b
		}
		if b == nil || f.ID == b.OutputFileID || f.ID == b.ErrorFileID {
			continue
		}
		err := s.o.Files.Delete(ctx, f.ID)
		if errors.Is(err, files.ErrNotFound) {
			continue // another replica's sweep was first
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("removing an orphaned batch file", "file", f.ID, "err", err)
			}
			continue
		}
		s.m.orphans.Inc()
		s.log.Info("removed an orphaned batch file", "file", f.ID, "batch", id)
	}
}

// finalize assembles a finished batch's output and error files, exactly once across replicas,
// and moves it to its terminal status: completed, cancelled or expired.
func (s *Service) finalize(ctx context.Context, id string) {
	if _, busy := s.finalizing.LoadOrStore(id, true); busy {
		return
	}
	defer s.finalizing.Delete(id)
	cur, err := s.o.State.Get(ctx, id)
	if err != nil || !finished(cur) {
		return
	}
	now := s.now()
	_, owned, err := s.claim(ctx, id, func(b *batchstate.Batch) error {
		if b.Status == batchstate.InProgress {
			b.Status, b.FinalizingAt = batchstate.Finalizing, now.Unix()
		}
		return nil
	}, batchstate.InProgress, batchstate.Cancelling, batchstate.Finalizing)
	if err != nil {
		s.log.Warn("claiming a batch's finalization", "batch", id, "err", err)
		return
	}
	if owned {
		s.holdClaim(ctx, id, func(ctx context.Context) { s.assemble(ctx, cur) })
	}
}

// assemble writes the files of a batch whose finalization this replica claimed and commits them
// with the batch's terminal status, if the claim is still this replica's.
func (s *Service) assemble(ctx context.Context, cur *batchstate.Batch) {
	id, nonce := cur.ID, pipeline.NewRequestID()[:16]
	outN, errN, err := s.writeFiles(ctx, cur, nonce)
	committed := false
	var b *batchstate.Batch
	if err == nil {
		b, err = s.o.State.Update(ctx, id, func(b *batchstate.Batch) error {
			committed = false
			if b.Claim != s.o.ID || b.Status.Terminal() {
				return batchstate.ErrUnchanged
			}
			t := s.now().Unix()
			switch {
			case b.Status == batchstate.Cancelling:
				b.Status, b.CancelledAt = batchstate.Cancelled, t
			case b.ExpiredAt != 0:
				b.Status = batchstate.Expired
			default:
				if b.FinalizingAt == 0 {
					b.FinalizingAt = t
				}
				b.Status, b.CompletedAt = batchstate.Completed, t
			}
			b.OutputFileID, b.ErrorFileID = "", ""
			if outN > 0 {
				b.OutputFileID = fileID(id, "output", nonce)
			}
			if errN > 0 {
				b.ErrorFileID = fileID(id, "error", nonce)
			}
			b.Claim, b.ClaimUntil = "", 0
			committed = true
			return nil
		})
		if err != nil || b == nil {
			// The update ran but was not stored (its context ended, the store failed): not
			// committed, whatever the function said; dropFiles keeps the files if it was after all.
			committed = false
		}
	}
	if !committed {
		if err != nil && ctx.Err() == nil {
			s.log.Warn("finalizing a batch; another try follows when the claim expires", "batch", id, "err", err)
		}
		s.dropFiles(id, nonce)
		return
	}
	s.m.batches.WithLabelValues(string(b.Status)).Inc()
	s.log.Info("batch finished", "batch", id, "status", b.Status, "completed", b.Counts.Completed, "failed", b.Counts.Failed)
	if err := s.o.State.DropResults(ctx, id); err != nil {
		s.log.Warn("dropping a finished batch's results", "batch", id, "err", err)
	}
}

// dropFiles removes the files a finalization wrote but did not commit, unless the batch names
// them after all (an update whose answer was lost may still have been applied).
func (s *Service) dropFiles(id, nonce string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := s.o.State.Get(ctx, id)
	if err != nil {
		return // unsure: leave them
	}
	for _, which := range []string{"output", "error"} {
		fid := fileID(id, which, nonce)
		if fid != b.OutputFileID && fid != b.ErrorFileID {
			if err := s.o.Files.Delete(ctx, fid); err != nil && !errors.Is(err, files.ErrNotFound) {
				s.log.Warn("removing an uncommitted batch file", "file", fid, "err", err)
			}
		}
	}
}

// writeFiles writes the batch's output and error files from its recorded results, streaming
// them (a large batch's results never sit whole in memory); empty files are removed.
func (s *Service) writeFiles(ctx context.Context, b *batchstate.Batch, nonce string) (outN, errN int, err error) {
	id := b.ID
	type sink struct {
		w    *io.PipeWriter
		n    int
		done chan error
	}
	now := s.now().Unix()
	open := func(which string) *sink {
		r, w := io.Pipe()
		k := &sink{w: w, done: make(chan error, 1)}
		go func() {
			_, err := s.o.Files.Put(ctx, files.File{ID: fileID(id, which, nonce), CreatedAt: now,
				Filename: id + "_" + which + ".jsonl", Purpose: "batch_output", Owner: b.Owner}, r, 0)
			r.CloseWithError(err) // unblocks the writer if Put gave up
			k.done <- err
		}()
		return k
	}
	out, errs := open("output"), open("error")
	nl := []byte{'\n'}
	err = s.o.State.Results(ctx, id, func(r batchstate.Result) error {
		k := out
		switch r.Kind {
		case batchstate.Skipped:
			return nil
		case batchstate.Error:
			k = errs
		}
		k.n++
		if _, err := k.w.Write(r.Line); err != nil {
			return err
		}
		_, err := k.w.Write(nl)
		return err
	})
	out.w.CloseWithError(err)
	errs.w.CloseWithError(err)
	e1, e2 := <-out.done, <-errs.done
	if err = errors.Join(err, e1, e2); err != nil {
		return 0, 0, err
	}
	for _, k := range []struct {
		n     int
		which string
	}{{out.n, "output"}, {errs.n, "error"}} {
		if k.n == 0 {
			if err := s.o.Files.Delete(ctx, fileID(id, k.which, nonce)); err != nil && !errors.Is(err, files.ErrNotFound) {
				return 0, 0, err
			}
		}
	}
	return out.n, errs.n, nil
}

// sweep looks after every active batch now and then: it takes over steps whose replica died,
// gives up the lines of cancelled and expired batches, and finalizes finished ones.
func (s *Service) sweep(ctx context.Context) {
	every(ctx, s.o.SweepInterval, func() bool {
		ids, err := s.o.State.Active(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("listing active batches", "err", err)
			}
			return true
		}
		for _, id := range ids {
			if ctx.Err() != nil {
				return false
			}
			s.sweepOne(ctx, id)
		}
		for id := range s.progress {
			if !slices.Contains(ids, id) {
				delete(s.progress, id)
			}
		}
		return true
	})
}

// every calls f each interval until ctx ends or f returns false.
func every(ctx context.Context, interval time.Duration, f func() bool) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}

func (s *Service) sweepOne(ctx context.Context, id string) {
	b, err := s.o.State.Get(ctx, id)
	if err != nil {
		return
	}
	now := s.now()
	nowMs := now.UnixMilli()
	claimFree := b.Claim == "" || b.ClaimUntil <= nowMs
	graceOver := func(at int64) bool { return at != 0 && now.Sub(time.Unix(at, 0)) >= s.o.Grace }
	switch {
	case finished(b):
		if claimFree {
			s.finalize(ctx, id)
		}
	case b.Status == batchstate.Validating && b.ExpiresAt != 0 && now.Unix() >= b.ExpiresAt:
		// It never got going within its window (its input cannot be read, say).
		_, err := s.o.State.Update(ctx, id, func(b *batchstate.Batch) error {
			if b.Status != batchstate.Validating {
				return batchstate.ErrUnchanged
			}
			b.Status, b.ExpiredAt, b.Claim, b.ClaimUntil = batchstate.Expired, now.Unix(), "", 0
			return nil
		})
		if err != nil {
			s.log.Warn("expiring a batch", "batch", id, "err", err)
		}
	case b.Status == batchstate.Validating && claimFree:
		if _, owned, err := s.claim(ctx, id, nil, batchstate.Validating); err == nil && owned {
			s.log.Info("taking over a batch's validation", "batch", id, "from", b.Claim)
			s.holdClaim(ctx, id, func(ctx context.Context) { s.prepare(ctx, id) })
		}
	case b.Status == batchstate.InProgress && b.ExpiresAt != 0 && now.Unix() >= b.ExpiresAt:
		// Before the dispatch takeover: a batch whose dispatch keeps failing (its input is
		// gone) must still end with its window.
		if b.ExpiredAt == 0 {
			if err := markExpired(ctx, s.o.State, id, now); err != nil {
				s.log.Warn("marking a batch expired", "batch", id, "err", err)
			}
			return
		}
		if graceOver(b.ExpiredAt) && claimFree {
			s.giveUp(ctx, id, batchstate.Error)
		}
	case b.Status == batchstate.InProgress && !b.Dispatched && claimFree:
		if b, owned, err := s.claim(ctx, id, nil, batchstate.InProgress); err == nil && owned && !b.Dispatched {
			s.log.Info("taking over a batch's dispatch", "batch", id)
			s.holdClaim(ctx, id, func(ctx context.Context) {
				// As the first dispatch did, publish only from an input that passes as a whole.
				in, errs, err := s.scanFile(ctx, b, nil)
				switch {
				case err != nil:
					s.log.Warn("reading a batch's input to dispatch it; another try follows when the claim expires", "batch", id, "err", err)
				case errs != nil:
					s.log.Warn("a batch's input no longer passes; another try follows when the claim expires", "batch", id, "first", errs[0].Message)
				default:
					s.dispatch(ctx, b, in)
				}
			})
		}
	case b.Status == batchstate.Cancelling && graceOver(b.CancellingAt) && claimFree:
		s.giveUp(ctx, id, batchstate.Skipped)
	case b.Status == batchstate.InProgress && claimFree && s.stalled(b, now):
		if b, owned, err := s.claim(ctx, id, nil, batchstate.InProgress); err == nil && owned && b.Dispatched {
			s.log.Warn("a batch made no progress; publishing its remaining lines again", "batch", id, "after", s.o.RedispatchAfter)
			s.holdClaim(ctx, id, func(ctx context.Context) { s.redispatch(ctx, b) })
			s.releaseClaim(ctx, id)
		}
	}
}

// finished reports whether every line of a running batch has its result. One whose input
// vanished before any line had one has none to wait for (giveUpLines shrank its Total to 0).
func finished(b *batchstate.Batch) bool {
	return b.Counts.Done() || b.Counts.Total == 0 && b.Status != batchstate.Validating && !b.Status.Terminal()
}

// seen is a batch's count of lines with a result, and when this replica saw it change.
type seen struct {
	done  int64
	since time.Time
}

// stalled reports whether the dispatched batch's results have not moved for RedispatchAfter
// (sweeps are sequential: progress needs no lock).
func (s *Service) stalled(b *batchstate.Batch, now time.Time) bool {
	if s.o.RedispatchAfter <= 0 || !b.Dispatched {
		return false
	}
	done := b.Counts.Completed + b.Counts.Failed + b.Counts.Skipped
	p, ok := s.progress[b.ID]
	if !ok || p.done != done {
		s.progress[b.ID] = seen{done: done, since: now}
		return false
	}
	if now.Sub(p.since) < s.o.RedispatchAfter {
		return false
	}
	s.progress[b.ID] = seen{done: done, since: now} // once per period
	return true
}

// redispatch publishes again the lines of the batch that have no result yet: one read of its
// input validates it and asks the store which custom_ids have a result, a page at a time, and a
// second publishes the lines of those that have none. It holds those custom_ids, never the lines.
func (s *Service) redispatch(ctx context.Context, b *batchstate.Batch) {
	left := map[string]struct{}{}
	in, errs, err := s.idPages(ctx, b, func(ids []string) error {
		done, err := s.o.State.Recorded(ctx, b.ID, ids)
		if err != nil {
			return fmt.Errorf("reading the batch's results: %w", err)
		}
		for j, id := range ids {
			if !done[j] {
				left[id] = struct{}{}
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("reading a stalled batch's input", "batch", b.ID, "err", err)
		return
	}
	if errs == nil && !sameInput(b, in) {
		errs = changedInput
	}
	if errs != nil {
		s.log.Warn("a stalled batch's input no longer passes", "batch", b.ID, "first", errs[0].Message)
		return
	}
	if len(left) == 0 {
		return
	}
	s.publish(ctx, b, in, func(id string) bool {
		_, ok := left[id]
		return ok
	})
}

// idPages validates the batch's input file and hands the custom_ids of its lines to each, in
// file order, at most idPage at a time (the slice is reused: each must not keep it). It stops at
// the first invalid line, returning the errors, or at each's first error.
func (s *Service) idPages(ctx context.Context, b *batchstate.Batch, each func(ids []string) error) (input, []batchstate.ErrorEntry, error) {
	page := make([]string, 0, idPage)
	in, errs, err := s.scanFile(ctx, b, func(l Line) error {
		page = append(page, l.CustomID)
		if len(page) < idPage {
			return nil
		}
		err := each(page)
		page = page[:0]
		return err
	})
	if err != nil || errs != nil || len(page) == 0 {
		return in, errs, err
	}
	return in, nil, each(page)
}

// idPage is how many lines one call to the state store names.
const idPage = 1000

// releaseClaim frees this replica's claim on the batch.
func (s *Service) releaseClaim(ctx context.Context, id string) {
	_, err := s.o.State.Update(ctx, id, func(b *batchstate.Batch) error {
		if b.Claim != s.o.ID {
			return batchstate.ErrUnchanged
		}
		b.Claim, b.ClaimUntil = "", 0
		return nil
	})
	if err != nil {
		s.log.Warn("releasing a batch's claim", "batch", id, "err", err)
	}
}

// giveUp records a result of kind for every line of the batch that has none (Skipped for a
// cancelled batch, a batch_expired error for an expired one), so the batch finishes without
// waiting for workers to drain its chunks; it then finalizes it. One replica does it, under the
// batch's claim.
func (s *Service) giveUp(ctx context.Context, id string, kind batchstate.ResultKind) {
	// An undispatched batch is given up too: a dispatch runs under the claim, so none is under
	// way, and chunks it published before it stopped find their lines recorded.
	b, owned, err := s.claim(ctx, id, nil, batchstate.InProgress, batchstate.Cancelling)
	if err != nil || !owned {
		return // another replica's: a later sweep
	}
	s.holdClaim(ctx, id, func(ctx context.Context) { s.giveUpLines(ctx, b, kind) })
	s.finalize(ctx, id)
}

// giveUpLines records the results of giveUp: a first read of the input checks it as a whole, as
// the batch's validation did, before anything is recorded; a second names the lines a page at a
// time (a line that has a result keeps it: the store records one result per custom_id).
func (s *Service) giveUpLines(ctx context.Context, b *batchstate.Batch, kind batchstate.ResultKind) {
	in, errs, err := s.scanFile(ctx, b, nil)
	if err == nil && errs == nil {
		rs := make([]batchstate.Result, 0, idPage)
		var again input
		again, errs, err = s.idPages(ctx, b, func(ids []string) error {
			rs = rs[:0]
			for _, id := range ids {
				r := batchstate.Result{CustomID: id, Kind: kind}
				if kind == batchstate.Error {
					r.Line = stopped(id, errExpired).Line
				}
				rs = append(rs, r)
			}
			if _, err := s.o.State.Record(ctx, b.ID, rs); err != nil {
				return fmt.Errorf("recording the batch's given-up lines: %w", err)
			}
			return nil
		})
		if err == nil && errs == nil && again != in {
			errs = changedInput
		}
	}
	if err != nil {
		s.log.Warn("giving up a batch's remaining lines", "batch", b.ID, "err", err)
		return
	}
	if errs != nil {
		// The input is gone or no longer passes (another replica's limits, or it changed between
		// the two reads): the lines without a result cannot be named, so the batch ends with the
		// lines it has, and says so.
		_, err := s.o.State.Update(ctx, b.ID, func(b *batchstate.Batch) error {
			c := b.Counts
			missing := c.Total - c.Completed - c.Failed - c.Skipped
			if missing <= 0 {
				return batchstate.ErrUnchanged // said already
			}
			b.Counts.Total = c.Completed + c.Failed + c.Skipped
			b.Errors = append(b.Errors, batchstate.ErrorEntry{Code: "input_unavailable",
				Message: fmt.Sprintf("%d requests that had not run when the batch stopped are in neither file: its input could not be read again (%s).", missing, errs[0].Message)})
			return nil
		})
		if err != nil {
			s.log.Warn("ending a batch whose input is gone", "batch", b.ID, "err", err)
		}
	}
}
