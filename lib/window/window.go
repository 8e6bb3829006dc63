// Package window keeps request aggregates over a sliding window of time in fixed memory: a ring
// of slots, one per period (a second for the console's overview, a minute per model or API key),
// each holding counters and, optionally, log-scale latency histograms. Recording a request is a
// few atomic additions to the slot of its period, with no lock; a slot is reused, zeroed, once
// its period has left the window. Nothing grows with traffic, so the memory is what New allocates
// (Bytes), however many requests are recorded.
//
// It is written here because what the console needs is small and specific (per-period points
// for charts and percentiles over any span of the window, at a known, fixed cost) and a metrics
// library's rolling summaries would bring their own allocation and locking per observation.
//
// The package does no I/O and reads no clock: callers pass the time, so tests can walk a window
// forward deterministically.
package window

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Counts are a slot's counters: what requests did in one period.
type Counts struct {
	// Requests counts finished requests; Errors those that failed on the gateway's or an
	// upstream's side (5xx, an upstream cut short); Refused those the gateway turned away
	// (401, 403, 429: a key, a rate limit, load shedding).
	Requests, Errors, Refused int64
	// ContextRefused counts LLM requests refused for exceeding the model's context length.
	ContextRefused int64
	// CacheHits counts answers served from the response cache.
	CacheHits int64
	// TokensIn and TokensOut are prompt and completion tokens.
	TokensIn, TokensOut int64
}

// Event is one thing to record: counters and, when positive, durations for the histograms.
type Event struct {
	Counts
	// Latency, TTFT (time to first token) and ITL (inter-token latency) go to histograms 0, 1
	// and 2, when the ring keeps that many and the duration is positive.
	Latency, TTFT, ITL time.Duration
}

// Histogram buckets: bucket 0 holds durations under 32 µs; then four buckets per doubling from
// 32 µs, so each spans about 19% (a percentile read from it is within 10% of the truth), up to
// 2^27 µs (134 s); the last bucket holds everything longer.
const (
	minShift   = 5 // 2^5 µs
	maxShift   = 27
	subBuckets = 4
	// Buckets is the number of buckets of a histogram.
	Buckets = 2 + (maxShift-minShift)*subBuckets
)

// bucketOf is the histogram bucket of d.
func bucketOf(d time.Duration) int {
	us := uint64(d / time.Microsecond)
	if us < 1<<minShift {
		return 0
	}
	e := bits.Len64(us) - 1 // 2^e <= us < 2^(e+1)
	if e >= maxShift {
		return Buckets - 1
	}
	sub := int(us>>(e-2)) & (subBuckets - 1)
	return 1 + (e-minShift)*subBuckets + sub
}

// bucketUpper is the largest duration bucket b holds (the overflow bucket: its lower bound).
func bucketUpper(b int) time.Duration {
	if b == 0 {
		return (1 << minShift) * time.Microsecond
	}
	if b >= Buckets-1 {
		return (1 << maxShift) * time.Microsecond
	}
	e := (b-1)/subBuckets + minShift
	sub := (b - 1) % subBuckets
	// The bucket holds [2^e + sub*2^(e-2), 2^e + (sub+1)*2^(e-2)).
	return time.Duration((uint64(1)<<e)+uint64(sub+1)<<(e-2)) * time.Microsecond
}

// Histogram counts durations by bucket.
type Histogram [Buckets]uint32

// Count is the number of durations counted.
func (h *Histogram) Count() int64 {
	var n int64
	for _, c := range h {
		n += int64(c)
	}
	return n
}

// Quantile is the duration at or under which the fraction q (0..1) of the counted durations
// lie, as the upper bound of the bucket that holds it; 0 when nothing was counted.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	// The rank of the q-quantile, 1-based: the smallest r with r >= q*n.
	rank := int64(q*float64(n) + 0.999999)
	rank = min(max(rank, 1), n)
	var seen int64
	for i, c := range h {
		seen += int64(c)
		if seen >= rank {
			return bucketUpper(i)
		}
	}
	return bucketUpper(Buckets - 1)
}

// The counters of a slot, by index.
const (
	cRequests = iota
	cErrors
	cRefused
	cContextRefused
	cCacheHits
	cTokensIn
	cTokensOut
	nCounters
)

// slot is one period's aggregates, added to with atomics: recording takes no lock, so the
// gateway's cores do not queue on one mutex to count their requests.
type slot struct {
	period atomic.Int64 // the period's number (Unix seconds / width); 0: never used
	counts [nCounters]atomic.Int64
	hists  []atomic.Uint32 // nh*Buckets, backed by the ring's one array
}

// Ring holds the last n periods of a fixed width. It is safe for concurrent use.
type Ring struct {
	width int64 // seconds per period
	// reset serializes the zeroing of a slot taken over by a new period (once per period), so
	// two recorders of that period's first events do not both zero it.
	reset sync.Mutex
	slots []slot
	nh    int
}

// New returns a ring of slots periods of width each (at least one second), keeping hists
// histograms (0 to 3: latency, TTFT, ITL) per slot.
func New(slots int, width time.Duration, hists int) *Ring {
	slots = max(slots, 1)
	hists = min(max(hists, 0), 3)
	w := max(int64(width/time.Second), 1)
	r := &Ring{width: w, slots: make([]slot, slots), nh: hists}
	backing := make([]atomic.Uint32, slots*hists*Buckets)
	for i := range r.slots {
		n := hists * Buckets
		r.slots[i].hists = backing[i*n : (i+1)*n : (i+1)*n]
	}
	return r
}

// Bytes is the memory the ring holds: fixed at New.
func (r *Ring) Bytes() int {
	const slotHeader = 8 + nCounters*8 + 24 // period, counters, the hists slice header
	return len(r.slots)*(slotHeader+r.nh*Buckets*4) + 64
}

// Width is a period's length.
func (r *Ring) Width() time.Duration { return time.Duration(r.width) * time.Second }

// Len is the number of periods the ring keeps.
func (r *Ring) Len() int { return len(r.slots) }

func (r *Ring) period(now time.Time) int64 { return now.Unix() / r.width }

// Record adds ev to the period of now. An event older than the window is dropped.
//
// The adds are atomic and take no lock. A slot is zeroed, under reset, when the first event of
// a new period finds it holding a period that left the window; an event of the old period that
// raced with that zeroing (one recorded a whole window late) may be lost or counted in the new
// one, which a status page can afford.
func (r *Ring) Record(now time.Time, ev *Event) {
	p := r.period(now)
	s := &r.slots[p%int64(len(r.slots))]
	if cur := s.period.Load(); cur != p {
		if cur > p {
			return // older than the window: its slot holds a newer period
		}
		r.reset.Lock()
		switch cur = s.period.Load(); {
		case cur < p:
			for i := range s.counts {
				s.counts[i].Store(0)
			}
			for i := range s.hists {
				s.hists[i].Store(0)
			}
			s.period.Store(p)
		case cur > p:
			r.reset.Unlock()
			return
		}
		r.reset.Unlock()
	}
	c := &ev.Counts
	for i, v := range [nCounters]int64{c.Requests, c.Errors, c.Refused, c.ContextRefused, c.CacheHits, c.TokensIn, c.TokensOut} {
		if v != 0 {
			s.counts[i].Add(v)
		}
	}
	for i, d := range [3]time.Duration{ev.Latency, ev.TTFT, ev.ITL} {
		if i < r.nh && d > 0 {
			s.hists[i*Buckets+bucketOf(d)].Add(1)
		}
	}
}

// addTo adds the slot's aggregates to pt.
func (r *Ring) addTo(pt *Point, s *slot) {
	c := &pt.Counts
	c.Requests += s.counts[cRequests].Load()
	c.Errors += s.counts[cErrors].Load()
	c.Refused += s.counts[cRefused].Load()
	c.ContextRefused += s.counts[cContextRefused].Load()
	c.CacheHits += s.counts[cCacheHits].Load()
	c.TokensIn += s.counts[cTokensIn].Load()
	c.TokensOut += s.counts[cTokensOut].Load()
	for h := range r.nh {
		for b := range Buckets {
			pt.Hists[h][b] += s.hists[h*Buckets+b].Load()
		}
	}
}

// Point is the aggregates of a span of periods.
type Point struct {
	// End is the end of the span (exclusive); Seconds its length.
	End     time.Time
	Seconds int64
	Counts  Counts
	// Hists are the span's histograms (latency, TTFT, ITL, as many as the ring keeps).
	Hists [3]Histogram
}

// Rate is n per second over the point's span.
func (p *Point) Rate(n int64) float64 {
	if p.Seconds <= 0 {
		return 0
	}
	return float64(n) / float64(p.Seconds)
}

// Series returns the window up to now (the current, partial period included) as points of
// step periods each, oldest first; the window's periods not divisible by step are left off its
// old end. A step of 0 or less, or over the window, is the whole window in one point.
func (r *Ring) Series(now time.Time, step int) []Point {
	n := len(r.slots)
	if step <= 0 || step > n {
		step = n
	}
	points := n / step
	out := make([]Point, points)
	last := r.period(now)
	first := last - int64(points*step) + 1
	for i := range out {
		end := first + int64((i+1)*step)
		out[i].End = time.Unix(end*r.width, 0)
		out[i].Seconds = int64(step) * r.width
	}
	// The newest point's span ends now, not at its period's end.
	if len(out) > 0 {
		out[len(out)-1].Seconds -= r.width - now.Unix()%r.width - 1
		out[len(out)-1].End = now
	}
	for p := first; p <= last; p++ {
		s := &r.slots[p%int64(n)]
		if s.period.Load() != p {
			continue
		}
		r.addTo(&out[(p-first)/int64(step)], s)
	}
	return out
}

// Total is the last periods periods up to now (the current one included) as one point.
func (r *Ring) Total(now time.Time, periods int) Point {
	periods = min(max(periods, 1), len(r.slots))
	last := r.period(now)
	first := last - int64(periods) + 1
	pt := Point{End: now, Seconds: int64(periods-1)*r.width + now.Unix()%r.width + 1}
	for p := first; p <= last; p++ {
		s := &r.slots[p%int64(len(r.slots))]
		if s.period.Load() != p {
			continue
		}
		r.addTo(&pt, s)
	}
	return pt
}

// Keyed is a Ring per name (an API key's, a model's), up to a fixed number of names: past it,
// new names share the ring named Other, so a caller cannot grow the memory by inventing names.
// Finding a name's ring takes no lock once it exists (a sync.Map, which suits keys written once
// and read on every request).
type Keyed struct {
	rings  sync.Map // name -> *Ring
	mu     sync.Mutex
	n      int // names in rings, under mu
	max    int
	slots  int
	width  time.Duration
	hists  int
	others *Ring
}

// Other names the ring of the names past a Keyed's bound.
const Other = "(other)"

// NewKeyed keeps up to maxNames rings of New(slots, width, hists).
func NewKeyed(maxNames, slots int, width time.Duration, hists int) *Keyed {
	return &Keyed{max: max(maxNames, 1), slots: slots, width: width, hists: hists, others: New(slots, width, hists)}
}

// Of is name's ring, made on first use.
func (k *Keyed) Of(name string) *Ring {
	if r, ok := k.rings.Load(name); ok {
		return r.(*Ring)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if r, ok := k.rings.Load(name); ok {
		return r.(*Ring)
	}
	if k.n >= k.max {
		return k.others
	}
	r := New(k.slots, k.width, k.hists)
	k.rings.Store(name, r)
	k.n++
	return r
}

// Each calls f with every name's ring (Other's last, when used), in no particular order.
func (k *Keyed) Each(f func(name string, r *Ring)) {
	k.rings.Range(func(name, r any) bool {
		f(name.(string), r.(*Ring))
		return true
	})
	k.mu.Lock()
	full := k.n >= k.max
	k.mu.Unlock()
	if full {
		f(Other, k.others)
	}
}

// Bytes is the most memory the rings may hold: every name's, and Other's.
func (k *Keyed) Bytes() int { return (k.max + 1) * k.others.Bytes() }
