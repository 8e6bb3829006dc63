// Package window keeps request aggregates over a sliding window of time in fixed memory: a ring
// of slots, one per period (a second for the console's overview, a minute per model or API key),
// each holding counters and, optionally, log-scale latency histograms. Recording a request is a
// few additions under a mutex on the slot of its period; a slot is reused, zeroed, once its
// period has left the window. Nothing grows with traffic, so the memory is what New allocates
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

func (c *Counts) add(o *Counts) {
	c.Requests += o.Requests
	c.Errors += o.Errors
	c.Refused += o.Refused
	c.ContextRefused += o.ContextRefused
	c.CacheHits += o.CacheHits
	c.TokensIn += o.TokensIn
	c.TokensOut += o.TokensOut
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

func (h *Histogram) add(o *Histogram) {
	for i, c := range o {
		h[i] += c
	}
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

// slot is one period's aggregates.
type slot struct {
	period int64 // the period's number (Unix seconds / width); 0: never used
	counts Counts
	hists  []Histogram // len = the ring's histogram count, backed by the ring's one array
}

// Ring holds the last n periods of a fixed width. It is safe for concurrent use.
type Ring struct {
	width int64 // seconds per period
	mu    sync.Mutex
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
	backing := make([]Histogram, slots*hists)
	for i := range r.slots {
		r.slots[i].hists = backing[i*hists : (i+1)*hists : (i+1)*hists]
	}
	return r
}

// Bytes is the memory the ring holds: fixed at New.
func (r *Ring) Bytes() int {
	const slotHeader = 8 + 7*8 + 24 // period, Counts, the hists slice header
	return len(r.slots)*(slotHeader+r.nh*Buckets*4) + 64
}

// Width is a period's length.
func (r *Ring) Width() time.Duration { return time.Duration(r.width) * time.Second }

// Len is the number of periods the ring keeps.
func (r *Ring) Len() int { return len(r.slots) }

func (r *Ring) period(now time.Time) int64 { return now.Unix() / r.width }

// Record adds ev to the period of now. An event older than the window is dropped.
func (r *Ring) Record(now time.Time, ev *Event) {
	p := r.period(now)
	var b [3]int
	durs := [3]time.Duration{ev.Latency, ev.TTFT, ev.ITL}
	for i := range r.nh {
		b[i] = -1
		if durs[i] > 0 {
			b[i] = bucketOf(durs[i])
		}
	}
	r.mu.Lock()
	s := &r.slots[p%int64(len(r.slots))]
	switch {
	case s.period < p: // the slot last held a period that has left the window
		s.period = p
		s.counts = Counts{}
		clear(s.hists)
	case s.period > p: // older than the window: its slot holds a newer period
		r.mu.Unlock()
		return
	}
	s.counts.add(&ev.Counts)
	for i := range r.nh {
		if b[i] >= 0 {
			s.hists[i][b[i]]++
		}
	}
	r.mu.Unlock()
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
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := first; p <= last; p++ {
		s := &r.slots[p%int64(n)]
		if s.period != p {
			continue
		}
		pt := &out[(p-first)/int64(step)]
		pt.Counts.add(&s.counts)
		for h := range r.nh {
			pt.Hists[h].add(&s.hists[h])
		}
	}
	return out
}

// Total is the last periods periods up to now (the current one included) as one point.
func (r *Ring) Total(now time.Time, periods int) Point {
	periods = min(max(periods, 1), len(r.slots))
	last := r.period(now)
	first := last - int64(periods) + 1
	pt := Point{End: now, Seconds: int64(periods-1)*r.width + now.Unix()%r.width + 1}
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := first; p <= last; p++ {
		s := &r.slots[p%int64(len(r.slots))]
		if s.period != p {
			continue
		}
		pt.Counts.add(&s.counts)
		for h := range r.nh {
			pt.Hists[h].add(&s.hists[h])
		}
	}
	return pt
}

// Keyed is a Ring per name (an API key's, a model's), up to a fixed number of names: past it,
// new names share the ring named Other, so a caller cannot grow the memory by inventing names.
type Keyed struct {
	mu     sync.RWMutex
	rings  map[string]*Ring
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
	return &Keyed{rings: map[string]*Ring{}, max: max(maxNames, 1), slots: slots, width: width, hists: hists,
		others: New(slots, width, hists)}
}

// Of is name's ring, made on first use.
func (k *Keyed) Of(name string) *Ring {
	k.mu.RLock()
	r := k.rings[name]
	k.mu.RUnlock()
	if r != nil {
		return r
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if r = k.rings[name]; r != nil {
		return r
	}
	if len(k.rings) >= k.max {
		return k.others
	}
	r = New(k.slots, k.width, k.hists)
	k.rings[name] = r
	return r
}

// Each calls f with every name's ring (Other's last, when used), in no particular order.
func (k *Keyed) Each(f func(name string, r *Ring)) {
	k.mu.RLock()
	rings := make(map[string]*Ring, len(k.rings))
	for n, r := range k.rings {
		rings[n] = r
	}
	full := len(k.rings) >= k.max
	k.mu.RUnlock()
	for n, r := range rings {
		f(n, r)
	}
	if full {
		f(Other, k.others)
	}
}

// Bytes is the most memory the rings may hold: every name's, and Other's.
func (k *Keyed) Bytes() int { return (k.max + 1) * k.others.Bytes() }
