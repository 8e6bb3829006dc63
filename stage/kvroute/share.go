package kvroute

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// ShareOptions tune Share. Zero values take the defaults.
type ShareOptions struct {
	// Prefix starts the Redis key of the model's stream (default "infergate:kvroute:"); replicas
	// share an index when they use the same prefix and model name.
	Prefix string
	// TTL is how long a pick is worth learning: older records are not applied, and the stream
	// expires when no replica wrote for this long (default 10m).
	TTL time.Duration
	// MaxLen bounds the stream, approximately, in records (default 100000).
	MaxLen int64
	// WarmRecords is how many of the newest records a replica applies at start (default 20000).
	WarmRecords int64
	// FlushInterval is how long picks wait to be sent in one pipelined batch (default 10ms).
	FlushInterval time.Duration
	// Queue bounds the picks waiting to be sent (default 4096); beyond it they are dropped, and
	// counted: sharing is best effort, routing never waits for Redis.
	Queue int
	// Timeout bounds each Redis call (default 1s); the blocking read, which waits up to
	// readBlock for records, gets readBlock more.
	Timeout time.Duration
	Logger  *slog.Logger
}

func (o ShareOptions) withDefaults() ShareOptions {
	if o.Prefix == "" {
		o.Prefix = "infergate:kvroute:"
	}
	if o.TTL <= 0 {
		o.TTL = 10 * time.Minute
	}
	if o.MaxLen <= 0 {
		o.MaxLen = 100000
	}
	if o.WarmRecords <= 0 {
		o.WarmRecords = 20000
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 10 * time.Millisecond
	}
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Shared connects an Index to the other replicas' through a Redis stream, so that replicas
// sharing a Redis route one conversation to the same endpoint: each pick (the endpoint and the
// prompt's block hashes) is appended to the model's stream, and every replica applies the
// others' records to its own index, within about a round trip. A replica starting applies the
// newest WarmRecords records younger than TTL first.
//
// Sharing is best effort and off the request path: picks are queued and sent in pipelined
// batches, and a full queue or an unreachable Redis drops records (counted, and logged at most
// once per interval); each replica then routes on what it knows. The stream is bounded
// (MaxLen, approximate trimming) and expires TTL after its last write. Records are the hashes
// only, never prompt text.
type Shared struct {
	x       *Index
	client  rueidis.Client
	opts    ShareOptions
	key     string
	origin  string
	queue   chan record
	warn    *logthrottle.Throttle
	dropped atomic.Int64
	applied atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type record struct {
	endpoint string
	hashes   []uint64
}

// Share shares x with the replicas using the same Redis, prefix and model, until Close. Call it
// before x routes requests.
func Share(x *Index, client rueidis.Client, opts ShareOptions) *Shared {
	opts = opts.withDefaults()
	var id [8]byte
	_, _ = rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	s := &Shared{x: x, client: client, opts: opts, key: opts.Prefix + x.model, origin: hex.EncodeToString(id[:]),
		queue: make(chan record, opts.Queue), warn: logthrottle.New(opts.Logger, 0), cancel: cancel}
	x.sent = s.enqueue
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.send(ctx) }()
	go func() { defer s.wg.Done(); s.receive(ctx) }()
	return s
}

// Close stops sharing; picks made later stay local.
func (s *Shared) Close() {
	s.cancel()
	s.wg.Wait()
}

// Collectors are the sharing's counters for Prometheus:
// infergate_kvroute_shared_records_total{model, outcome="applied"|"dropped"}.
func (s *Shared) Collectors() []prometheus.Collector {
	f := func(outcome string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "infergate_kvroute_shared_records_total",
			Help:        "Cache-aware routing records shared through Redis: applied (another replica's pick learned) or dropped (not sent: queue full or Redis unreachable).",
			ConstLabels: prometheus.Labels{"model": s.x.model, "outcome": outcome}}, func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{f("applied", &s.applied), f("dropped", &s.dropped)}
}

// Stats are the records this replica dropped (queue full, Redis unreachable) and applied from
// other replicas.
func (s *Shared) Stats() (dropped, applied int64) { return s.dropped.Load(), s.applied.Load() }

func (s *Shared) enqueue(endpoint string, hashes []uint64) {
	select {
	case s.queue <- record{endpoint, hashes}:
	default:
		s.dropped.Add(1)
	}
}

// send writes queued picks to the stream, a batch per FlushInterval.
func (s *Shared) send(ctx context.Context) {
	t := time.NewTicker(s.opts.FlushInterval)
	defer t.Stop()
	maxLen := strconv.FormatInt(s.opts.MaxLen, 10)
	var cmds rueidis.Commands
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cmds = cmds[:0]
	drain:
		for len(cmds) < 512 {
			select {
			case r := <-s.queue:
				cmds = append(cmds, s.client.B().Xadd().Key(s.key).Maxlen().Almost().Threshold(maxLen).Id("*").
					FieldValue().FieldValue("o", s.origin).FieldValue("e", r.endpoint).FieldValue("h", packHashes(r.hashes)).Build())
			default:
				break drain
			}
		}
		if len(cmds) == 0 {
			continue
		}
		cmds = append(cmds, s.client.B().Pexpire().Key(s.key).Milliseconds(s.opts.TTL.Milliseconds()).Build())
		cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		for _, res := range s.client.DoMulti(cctx, cmds...) {
			if err := res.Error(); err != nil {
				s.dropped.Add(int64(len(cmds) - 1))
				if ctx.Err() == nil {
					s.warn.Warn("kvroute.share", "sharing cache-aware routing through Redis failed; routing on this replica's picks alone", "err", err)
				}
				break
			}
		}
		cancel()
	}
}

// readBlock is how long a read waits for records from the other replicas before asking again.
const readBlock = time.Second

// receive applies the other replicas' records: the newest ones at start, then each as it comes.
func (s *Shared) receive(ctx context.Context) {
	last := ""
	for ctx.Err() == nil {
		if last == "" {
			var err error
			if last, err = s.warm(ctx); err != nil {
				s.retry(ctx, err)
				continue
			}
		}
		// Bounded too: a Redis that hangs, or a connection that died without a word, fails the
		// read and the loop retries, rather than waiting for an answer that may never come. By a
		// timer that cancels, not a deadline: given a deadline the client reads with a socket
		// deadline, deaf to cancellation, and Close would wait for the read to end.
		rctx, cancel := context.WithCancel(ctx)
		late := time.AfterFunc(readBlock+s.opts.Timeout, cancel)
		res, err := s.client.Do(rctx, s.client.B().Xread().Count(512).Block(readBlock.Milliseconds()).Streams().Key(s.key).Id(last).Build()).AsXRead()
		if !late.Stop() && err != nil && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %v: %w", readBlock+s.opts.Timeout, err)
		}
		cancel()
		if rueidis.IsRedisNil(err) {
			continue // no record within the block
		}
		if err != nil {
			s.retry(ctx, err)
			continue
		}
		for _, e := range res[s.key] {
			s.apply(e)
			last = e.ID
		}
	}
}

// warm applies the newest records younger than TTL, oldest first, and returns the id to read
// on from.
func (s *Shared) warm(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	since := time.Now().Add(-s.opts.TTL).UnixMilli()
	es, err := s.client.Do(cctx, s.client.B().Xrevrange().Key(s.key).End("+").Start(strconv.FormatInt(since, 10)).
		Count(s.opts.WarmRecords).Build()).AsXRange()
	if err != nil && !rueidis.IsRedisNil(err) {
		return "", err
	}
	for i := len(es) - 1; i >= 0; i-- {
		s.apply(es[i])
	}
	if len(es) > 0 {
		return es[0].ID, nil
	}
	// Nothing recent: read on from now (records written meanwhile come after this id).
	return strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10), nil
}

func (s *Shared) retry(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	s.warn.Warn("kvroute.share", "reading the other replicas' cache-aware routing from Redis failed; retrying", "err", err)
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

// apply records another replica's pick in the index; its own, malformed and expired ones are
// skipped.
func (s *Shared) apply(e rueidis.XRangeEntry) {
	if e.FieldValues["o"] == s.origin {
		return
	}
	ms, _, _ := strings.Cut(e.ID, "-")
	if t, err := strconv.ParseInt(ms, 10, 64); err != nil || time.Since(time.UnixMilli(t)) > s.opts.TTL {
		return
	}
	endpoint := e.FieldValues["e"]
	hashes, err := unpackHashes(e.FieldValues["h"], s.x.opts.MaxBlocks)
	if err != nil || endpoint == "" || len(endpoint) > maxEndpointName || len(hashes) == 0 {
		return
	}
	s.x.Record(endpoint, hashes)
	s.applied.Add(1)
}

// maxEndpointName bounds an endpoint name read from Redis: names are the operator's upstream
// names, short; a longer one is not a record this package wrote.
const maxEndpointName = 256

// packHashes is hashes as little-endian uint64s.
func packHashes(hashes []uint64) string {
	b := make([]byte, 8*len(hashes))
	for i, h := range hashes {
		binary.LittleEndian.PutUint64(b[8*i:], h)
	}
	return string(b)
}

var errRecord = errors.New("kvroute: a shared record's hashes are malformed")

// unpackHashes reads packHashes' string, of at most maxBlocks hashes.
func unpackHashes(s string, maxBlocks int) ([]uint64, error) {
	if len(s)%8 != 0 || len(s)/8 > maxBlocks {
		return nil, fmt.Errorf("%w: %d bytes", errRecord, len(s))
	}
	out := make([]uint64, len(s)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64([]byte(s[8*i : 8*i+8]))
	}
	return out, nil
}
