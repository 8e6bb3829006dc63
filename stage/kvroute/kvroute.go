// Package kvroute routes LLM requests to the endpoint most likely to hold their prompt's prefix
// in its KV cache (models.<name>.routing: cache_aware), as Dynamo's KV router and llm-d's
// prefix-cache scorer do, without events from the engines: the gateway remembers, per endpoint,
// the prompt blocks it sent there.
//
// A prompt is cut into blocks and each block's hash chains its parent's, so equal hashes mean
// equal prefixes: blocks of BlockSize token ids when the model has a tokenizer (the ids the
// engine caches; the hash covers them as little-endian uint32s), otherwise blocks of
// BlockSize*4 bytes of the request's text (a chat's messages as JSON, a completion's prompt).
// Each endpoint keeps the hashes of the blocks it was sent in an LRU bounded by Capacity blocks:
// an approximation of the engine's own cache, which evicts too.
//
// An endpoint's cost is the blocks it would have to prefill (the prompt's blocks past its
// longest cached prefix) plus LoadWeight times the blocks of the requests it is serving (as
// Dynamo's router weighs the blocks it predicts active on a worker); the cheapest usable
// endpoint of the highest priority tier wins, ties going to the least loaded and then in
// rotation. A prompt no endpoint holds any of is placed by load alone. The chosen endpoint then
// remembers the prompt's blocks.
package kvroute

import (
	"context"
	"encoding/binary"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/stage/prompt"
	"github.com/infergate/infergate/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Options tune the index. Zero values take the defaults.
type Options struct {
	// BlockSize is the tokens per block: the engines' KV block size (vLLM's default, 16).
	BlockSize int
	// Capacity bounds the blocks remembered per endpoint (default 32768: about an 8B model's KV
	// cache on one 80 GB GPU at block size 16).
	Capacity int
	// LoadWeight is what one block of the requests in flight on an endpoint (their prompts'
	// blocks) costs, in blocks to prefill (default 0.1): an endpoint busy with long prompts
	// waits long before it starts another.
	LoadWeight float64
	// MaxBlocks bounds the blocks hashed per prompt (default 1024): a longer prompt is routed
	// on its first MaxBlocks blocks.
	MaxBlocks int
	// Metrics, when set, counts the index's picks (NewMetrics; shared by every model).
	Metrics *Metrics
}

// Metrics count how often the routing found a prompt's prefix where it sent it, for every
// model: the prefix-routing hit rate operators watch (the console shows it).
type Metrics struct {
	picks  *prometheus.CounterVec
	blocks *prometheus.CounterVec
}

// NewMetrics makes the metrics; register Collectors once.
func NewMetrics() *Metrics {
	return &Metrics{
		picks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_kvroute_picks_total",
			Help: "Requests routed on their prompt's prefix, by whether the chosen endpoint had been sent any of it (hit) or none (miss)."},
			[]string{"model", "result"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_kvroute_blocks_total",
			Help: "Prompt blocks of the requests routed on their prefix: cached (the chosen endpoint had been sent them) or prefill (it had not)."},
			[]string{"model", "result"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.picks, m.blocks}
}

// counters are one model's series of Metrics, looked up once.
type counters struct{ hit, miss, cached, prefill prometheus.Counter }

func (o Options) withDefaults() Options {
	if o.BlockSize <= 0 {
		o.BlockSize = 16
	}
	if o.Capacity <= 0 {
		o.Capacity = 32768
	}
	if o.LoadWeight <= 0 {
		o.LoadWeight = 0.1
	}
	if o.MaxBlocks <= 0 {
		o.MaxBlocks = 1024
	}
	return o
}

// Index is one model's record of the prompt blocks sent to each endpoint. It is safe for
// concurrent use.
type Index struct {
	opts   Options
	model  string
	seed   uint64
	mu     sync.Mutex
	eps    map[string]*blocks
	active map[string]int64 // blocks of the requests in flight, per endpoint
	// sent, when the index is shared (Share), takes each pick's endpoint and blocks for the
	// other replicas; it must not block.
	sent func(endpoint string, hashes []uint64)
	c    *counters // nil without Options.Metrics
}

// New is an empty index for model.
func New(model string, opts Options) *Index {
	x := &Index{opts: opts.withDefaults(), model: model, seed: xxhash.Sum64String(model), eps: map[string]*blocks{},
		active: map[string]int64{}}
	if m := opts.Metrics; m != nil {
		x.c = &counters{hit: m.picks.WithLabelValues(model, "hit"), miss: m.picks.WithLabelValues(model, "miss"),
			cached: m.blocks.WithLabelValues(model, "cached"), prefill: m.blocks.WithLabelValues(model, "prefill")}
	}
	return x
}

// Stage is the interceptor that routes each request of the model with the index: it hashes the
// prompt (with m's tokenizer when m is not nil; its ids stay in req.PromptTokens for the stages
// after it) and hands the terminal handler a picker that knows them.
func (x *Index) Stage(m *prompt.Model) pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			hashes, err := x.hashes(ctx, m, req)
			if err != nil {
				return nil, err
			}
			if len(hashes) == 0 {
				return next(ctx, req)
			}
			p := &picker{x: x, hashes: hashes}
			res, err := next(upstream.WithPicker(ctx, p), req)
			if err != nil {
				p.done()
				return nil, err
			}
			res.Body = &doneBody{Body: res.Body, p: p}
			return res, nil
		}
	}
}

// hashes are the chained block hashes of req's prompt; none for a request without one.
func (x *Index) hashes(ctx context.Context, m *prompt.Model, req *pipeline.Request) ([]uint64, error) {
	if m != nil {
		if _, ok, err := m.PromptLen(ctx, req); err != nil || !ok {
			return nil, err
		}
		if req.PromptTokens != nil {
			return x.TokenHashes(req.PromptTokens), nil
		}
	}
	w, err := req.Wire()
	if err != nil {
		return nil, err
	}
	var text []byte
	switch req.Path {
	case "/v1/chat/completions":
		text, _ = w.Get("messages")
	case "/v1/completions":
		text, _ = w.Get("prompt")
	default:
		return nil, nil
	}
	return x.TextHashes(text), nil
}

// TokenHashes are the chained hashes of ids' full blocks.
func (x *Index) TokenHashes(ids []int) []uint64 {
	bs := x.opts.BlockSize
	n := min(len(ids)/bs, x.opts.MaxBlocks)
	out := make([]uint64, n)
	buf := make([]byte, 8+4*bs)
	parent := x.seed
	for b := range n {
		binary.LittleEndian.PutUint64(buf, parent)
		for i, id := range ids[b*bs : (b+1)*bs] {
			binary.LittleEndian.PutUint32(buf[8+4*i:], uint32(id))
		}
		parent = xxhash.Sum64(buf)
		out[b] = parent
	}
	return out
}

// TextHashes are the chained hashes of text's full blocks of BlockSize*4 bytes (about
// BlockSize tokens).
func (x *Index) TextHashes(text []byte) []uint64 {
	bs := 4 * x.opts.BlockSize
	n := min(len(text)/bs, x.opts.MaxBlocks)
	out := make([]uint64, n)
	buf := make([]byte, 8+bs)
	parent := x.seed
	for b := range n {
		binary.LittleEndian.PutUint64(buf, parent)
		copy(buf[8:], text[b*bs:(b+1)*bs])
		parent = xxhash.Sum64(buf)
		out[b] = parent
	}
	return out
}

// Matched is how many of hashes' leading blocks endpoint holds.
func (x *Index) Matched(endpoint string, hashes []uint64) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.eps[endpoint].prefix(hashes)
}

// Record remembers that endpoint was sent the blocks of hashes.
func (x *Index) Record(endpoint string, hashes []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.record(endpoint, hashes)
}

// record is Record with x.mu held.
func (x *Index) record(endpoint string, hashes []uint64) {
	b := x.eps[endpoint]
	if b == nil {
		b = newBlocks(x.opts.Capacity)
		x.eps[endpoint] = b
	}
	b.add(hashes)
}

// picker is one request's Picker.
type picker struct {
	x      *Index
	hashes []uint64
	picked []string // the endpoints it counted the request's blocks on
	once   sync.Once
}

// done takes the request's blocks off the endpoints it was counted on.
func (p *picker) done() {
	p.once.Do(func() {
		p.x.mu.Lock()
		defer p.x.mu.Unlock()
		for _, e := range p.picked {
			if p.x.active[e] -= int64(len(p.hashes)); p.x.active[e] <= 0 {
				delete(p.x.active, e)
			}
		}
	})
}

// doneBody ends the request's count when its body is finished.
type doneBody struct {
	pipeline.Body
	p *picker
}

func (b *doneBody) Finish(clientErr error) pipeline.Usage {
	u := b.Body.Finish(clientErr)
	b.p.done()
	return u
}

// Pick implements upstream.Picker: the cheapest usable endpoint of the highest tier that has one.
func (p *picker) Pick(c upstream.Candidates, rotate uint32) int {
	x := p.x
	n := c.Len()
	best, bestMatched := -1, 0
	var bestCost float64
	var bestLoad int64
	x.mu.Lock()
	for i := 0; i < n; {
		j := i
		for j < n && c.Priority(j) == c.Priority(i) {
			j++
		}
		size := j - i
		for k := range size {
			e := i + (k+int(rotate%uint32(size)))%size
			if !c.Usable(e) {
				continue
			}
			name := c.Name(e)
			load := c.Outstanding(e)
			matched := x.eps[name].prefix(p.hashes)
			cost := float64(len(p.hashes)-matched) + x.opts.LoadWeight*float64(x.active[name])
			if best < 0 || cost < bestCost || cost == bestCost && load < bestLoad {
				best, bestCost, bestLoad, bestMatched = e, cost, load, matched
			}
		}
		if best >= 0 {
			break
		}
		i = j
	}
	// The choice is recorded under the same lock it was scored under: a concurrent request
	// with the same prefix then sees it on this endpoint already and follows it.
	if best >= 0 {
		name := c.Name(best)
		x.active[name] += int64(len(p.hashes))
		p.picked = append(p.picked, name)
		x.record(name, p.hashes)
	}
	x.mu.Unlock()
	if best >= 0 && x.sent != nil {
		x.sent(c.Name(best), p.hashes)
	}
	if best >= 0 && x.c != nil {
		if bestMatched > 0 {
			x.c.hit.Inc()
		} else {
			x.c.miss.Inc()
		}
		x.c.cached.Add(float64(bestMatched))
		x.c.prefill.Add(float64(len(p.hashes) - bestMatched))
	}
	return best
}

// blocks is an endpoint's LRU of block hashes. It holds no pointers (slots linked by index), so
// the garbage collector never scans its entries: an index of millions of blocks costs a
// request nothing at GC time.
type blocks struct {
	at         map[uint64]int32 // hash -> slot
	slots      []slot
	head, tail int32 // most and least recently sent; -1 when empty
	cap        int
}

type slot struct {
	hash       uint64
	prev, next int32 // towards head, towards tail; -1 at the ends
}

func newBlocks(capacity int) *blocks {
	return &blocks{at: map[uint64]int32{}, head: -1, tail: -1, cap: capacity}
}

// prefix counts the leading hashes present (a nil b holds none).
func (b *blocks) prefix(hashes []uint64) int {
	if b == nil {
		return 0
	}
	for i, h := range hashes {
		if _, ok := b.at[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// add marks hashes recently sent, evicting the least recently sent beyond the capacity. The
// prompt's first blocks end up most recent: shared prefixes (a system prompt) outlive the turns
// that follow them.
func (b *blocks) add(hashes []uint64) {
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		if s, ok := b.at[h]; ok {
			b.unlink(s)
			b.pushFront(s)
			continue
		}
		var s int32
		if len(b.slots) < b.cap {
			b.slots = append(b.slots, slot{})
			s = int32(len(b.slots) - 1)
		} else {
			s = b.tail
			b.unlink(s)
			delete(b.at, b.slots[s].hash)
		}
		b.slots[s].hash = h
		b.at[h] = s
		b.pushFront(s)
	}
}

func (b *blocks) unlink(s int32) {
	p, n := b.slots[s].prev, b.slots[s].next
	if p >= 0 {
		b.slots[p].next = n
	} else {
		b.head = n
	}
	if n >= 0 {
		b.slots[n].prev = p
	} else {
		b.tail = p
	}
}

func (b *blocks) pushFront(s int32) {
	b.slots[s].prev, b.slots[s].next = -1, b.head
	if b.head >= 0 {
		b.slots[b.head].prev = s
	}
	b.head = s
	if b.tail < 0 {
		b.tail = s
	}
}
