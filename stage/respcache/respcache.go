// Package respcache is the response cache of chat completions and completions: a pipeline stage
// that answers a request the way an earlier, identical (exact mode) or similar (semantic mode)
// request was answered, without asking the upstream.
//
// Keys. A request's exact key is the SHA-256 of its canonical JSON (members sorted, one spelling
// per number and string) without the members that do not change the answer (stream,
// stream_options, user, the gateway's own), prefixed by the model and the owner: the API key's
// name, or "" when the cache is shared by every key. Semantic mode also embeds the last user
// message's text and searches for it only inside its partition: the hash of the same request
// with that text taken out, so the system prompt, the earlier turns, the tools and the sampling
// parameters must all be the same (a follow-up question is never answered for another
// conversation). An exact hit is looked for first. Unless the embedder is an embeddings model
// (ModelEmbedder), a semantic hit also needs the same words as the entry's text, up to case,
// punctuation and spacing (sameWords): a lexical embedder's similarity cannot tell
// a long prompt from the same prompt with one word changed.
//
// What is cached. Sampling makes an answer one of many: a request is served from cache (and
// its answer stored) only with an explicit temperature of 0, unless SamplingAny; an absent
// temperature is the model's default, which samples. Requests for several choices (n > 1)
// bypass the cache. A miss goes upstream; its answer passes through unchanged and unbuffered,
// is kept on the side (streams assembled into the equivalent answer), and is stored only when
// it ended cleanly with status 200 and every choice finished with stop or length (tool calls
// only with ToolCalls). Cache-Control: no-cache skips the lookup, no-store the store.
// Concurrent misses of one key wait for the first one's answer instead of all going upstream.
//
// Every answer says what the cache did in X-Infergate-Cache: hit, "semantic; similarity=0.973",
// miss, or "bypass; reason=..." (temperature, n, no-cache, store, path, body, too-deep). A hit
// has a fresh id and created; a streamed request gets it replayed as the chunks a model would
// have sent, ending with [DONE].
package respcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/infergate/infergate/lib/openaiwire"
)

// Header is the response header that says what the cache did.
const Header = "X-Infergate-Cache"

const (
	pathChat        = "/v1/chat/completions"
	pathCompletions = "/v1/completions"
)

// Mode is how requests are matched.
type Mode string

const (
	// ModeExact matches requests whose normalised bodies are the same.
	ModeExact Mode = "exact"
	// ModeSemantic also matches a request whose last user message is similar enough to a
	// cached one's, the rest of the request being the same.
	ModeSemantic Mode = "semantic"
)

// Scope is whose answers a request may get.
type Scope string

const (
	// ScopeKey: a caller only gets answers produced for its own API key (Owner).
	ScopeKey Scope = "key"
	// ScopeShared: every caller of the model shares the cache.
	ScopeShared Scope = "shared"
)

// Embedder turns texts into vectors (lib/embed's interface).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// A ModelEmbedder is an Embedder backed by an embeddings model that the operator named
// (embed.Remote): its vectors place rewordings of a question near each other, so its similarity
// alone decides a semantic hit. Any other embedder is taken for a lexical one (embed.Lexical),
// whose similarity counts shared words: a hit with it also needs the same words.
type ModelEmbedder interface {
	Embedder
	// EmbeddingsModel names the model; "" is none.
	EmbeddingsModel() string
}

// Options configure one model's cache.
type Options struct {
	// Model is the model's public name (the cache's keys start with it).
	Model string
	// Mode defaults to ModeExact.
	Mode Mode
	// Threshold is the least cosine similarity of a semantic hit; default 0.95.
	Threshold float32
	// SamplingAny serves and stores requests whatever their temperature (cache.sampling: any).
	SamplingAny bool
	// ToolCalls stores answers that call tools too.
	ToolCalls bool
	// Scope defaults to ScopeKey.
	Scope Scope
	// Owner names the caller's API key (ScopeKey); nil or "" when API keys are off.
	Owner func(ctx context.Context) string
	// Store holds the entries, this model's only; default NewMemory(MemoryOptions{}).
	Store Store
	// Embedder embeds texts for ModeSemantic (required there). Unless it is a ModelEmbedder, a
	// semantic hit also needs the same words.
	Embedder Embedder
	// EmbedTimeout bounds an embedding; default 1 s. A failed one makes the lookup exact only.
	EmbedTimeout time.Duration
	// MaxEmbedBytes: a longer text is not embedded (the request is matched exactly only),
	// since a match on a part of it could be wrong about the rest; default 16 KiB.
	MaxEmbedBytes int
	// MaxEntryBytes bounds one answer (a stream's assembled answer): a longer one is passed
	// on but not stored; default 1 MiB.
	MaxEntryBytes int
	// IgnoreFields are further body members left out of the key: the gateway's own, which do
	// not change the answer.
	IgnoreFields []string
	// Metrics is where the cache is counted (NewMetrics; shared by every model); default
	// unregistered metrics of its own.
	Metrics *Metrics
	// Logger defaults to slog.Default(); failures that repeat per request are throttled.
	Logger *slog.Logger
	// Now is the clock of the answers' created; default time.Now.
	Now func() time.Time
}

// Cache is one model's response cache.
type Cache struct {
	opts  Options
	keyer keyer
	m     *modelMetrics
	warn  *logthrottle.Throttle
	// checkWords: a semantic hit needs the entry's words (the embedder is not a ModelEmbedder).
	checkWords bool

	mu      sync.Mutex
	flights map[string]*flight // misses on their way, by exact key
	waiting atomic.Int64       // requests waiting for a flight (tests)

	wg sync.WaitGroup // stores in the background
}

// flight is a miss that others with the same key wait for.
type flight struct {
	done chan struct{}
	resp []byte // the stored template, once done; nil: nothing to share
}

// New returns the cache described by opts.
func New(opts Options) (*Cache, error) {
	if opts.Model == "" {
		return nil, errors.New("respcache: no model")
	}
	switch opts.Mode {
	case "":
		opts.Mode = ModeExact
	case ModeExact, ModeSemantic:
	default:
		return nil, fmt.Errorf("respcache: model %s: mode %q is neither exact nor semantic", opts.Model, opts.Mode)
	}
	switch opts.Scope {
	case "":
		opts.Scope = ScopeKey
	case ScopeKey, ScopeShared:
	default:
		return nil, fmt.Errorf("respcache: model %s: scope %q is neither key nor shared", opts.Model, opts.Scope)
	}
	if opts.Threshold == 0 {
		opts.Threshold = 0.95
	}
	if opts.Threshold < 0 || opts.Threshold > 1 {
		return nil, fmt.Errorf("respcache: model %s: threshold %v is not in (0, 1]", opts.Model, opts.Threshold)
	}
	if opts.Mode == ModeSemantic && opts.Embedder == nil {
		return nil, fmt.Errorf("respcache: model %s: semantic mode needs an embedder", opts.Model)
	}
	if opts.Store == nil {
		opts.Store = NewMemory(MemoryOptions{})
	}
	if opts.EmbedTimeout <= 0 {
		opts.EmbedTimeout = time.Second
	}
	if opts.MaxEmbedBytes <= 0 {
		opts.MaxEmbedBytes = 16 << 10
	}
	if opts.MaxEntryBytes <= 0 {
		opts.MaxEntryBytes = 1 << 20
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	model, _ := opts.Embedder.(ModelEmbedder)
	return &Cache{
		opts:       opts,
		checkWords: opts.Mode == ModeSemantic && (model == nil || model.EmbeddingsModel() == ""),
		keyer: keyer{model: opts.Model, semantic: opts.Mode == ModeSemantic, sampling: opts.SamplingAny,
			skip: append(append([]string(nil), skipped...), opts.IgnoreFields...)},
		m:       opts.Metrics.forModel(opts.Model, opts.Store),
		warn:    logthrottle.New(opts.Logger, logthrottle.DefaultInterval),
		flights: map[string]*flight{},
	}, nil
}

// Flush empties the model's cache (DELETE /admin/cache) and returns how many entries it held.
func (c *Cache) Flush(ctx context.Context) (int, error) {
	n, err := c.opts.Store.Flush(ctx)
	if err != nil {
		c.m.storeError("flush")
		return n, fmt.Errorf("respcache: flushing model %s: %w", c.opts.Model, err)
	}
	return n, nil
}

// Interceptor is the cache as a pipeline stage.
func (c *Cache) Interceptor() pipeline.Interceptor {
	return func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			return c.handle(ctx, req, next)
		}
	}
}

// wait returns once the answers stored in the background are stored (tests).
func (c *Cache) wait() { c.wg.Wait() }

// Header values.
const (
	valueHit  = "hit"
	valueMiss = "miss"
)

func (c *Cache) handle(ctx context.Context, req *pipeline.Request, next pipeline.Handler) (*pipeline.Response, error) {
	if req.Path != pathChat && req.Path != pathCompletions {
		return c.bypass(ctx, req, next, reasonPath)
	}
	ctl := parseControl(req.Header.Values("Cache-Control"))
	if ctl.noCache && ctl.noStore {
		return c.bypass(ctx, req, next, reasonNoCache)
	}
	// The request's parsed view: the stages before may have parsed it already, and the ones
	// after read the same one; no map of its members is built.
	w, err := req.Wire()
	if err != nil {
		return c.bypass(ctx, req, next, reasonBody)
	}
	owner := ""
	if c.opts.Scope == ScopeKey && c.opts.Owner != nil {
		owner = c.opts.Owner(ctx)
	}
	lk := c.keyer.derive(req.Path, owner, w)
	if lk.bypass != "" {
		return c.bypass(ctx, req, next, lk.bypass)
	}
	if len(lk.text) > c.opts.MaxEmbedBytes {
		lk.partition, lk.text = "", ""
	}
	if ctl.noCache {
		c.m.bypassed(reasonNoCache)
		return c.miss(ctx, req, next, &lk, nil, nil, bypassValue(reasonNoCache))
	}

	resp, err := c.opts.Store.Get(ctx, lk.key)
	if err != nil {
		return c.storeFailed(ctx, req, next, "get", err)
	}
	if resp != nil {
		c.m.hit.Inc()
		return c.hit(ctx, req, next, w, resp, valueHit)
	}
	var vec []float32
	if lk.text != "" {
		if vec = c.embed(ctx, lk.text); vec != nil {
			match, err := c.opts.Store.Nearest(ctx, lk.partition, vec, c.opts.Threshold)
			if err != nil {
				return c.storeFailed(ctx, req, next, "nearest", err)
			}
			if match.Similarity > 0 {
				c.m.similarity.Observe(float64(match.Similarity))
			}
			if match.Response != nil && c.checkWords && !sameWords(match.Words, wordsOf(lk.text)) {
				match.Response = nil // shared words, but not the same: another question
			}
			if match.Response != nil {
				c.m.semanticHit.Inc()
				return c.hit(ctx, req, next, w, match.Response,
					"semantic; similarity="+strconv.FormatFloat(float64(match.Similarity), 'f', 3, 32))
			}
		}
	}

	// A miss. The first miss of a key leads; those that come while it is on its way wait for
	// its answer rather than ask the upstream the same question.
	c.mu.Lock()
	f := c.flights[lk.key]
	lead := f == nil && !ctl.noStore
	if lead {
		f = &flight{done: make(chan struct{})}
		c.flights[lk.key] = f
	}
	c.mu.Unlock()
	if f != nil && !lead {
		c.waiting.Add(1)
		select {
		case <-f.done:
			c.waiting.Add(-1)
		case <-ctx.Done():
			c.waiting.Add(-1)
			return nil, ctx.Err()
		}
		if f.resp != nil {
			c.m.hit.Inc()
			return c.hit(ctx, req, next, w, f.resp, valueHit)
		}
		f = nil // the leader got nothing to share: ask on our own
	}
	c.m.miss.Inc()
	if ctl.noStore {
		res, err := next(ctx, req)
		if err == nil {
			setHeader(res, valueMiss)
		}
		return res, err
	}
	return c.miss(ctx, req, next, &lk, vec, f, valueMiss)
}

// bypass passes req on without looking it up, and says why.
func (c *Cache) bypass(ctx context.Context, req *pipeline.Request, next pipeline.Handler, reason string) (*pipeline.Response, error) {
	c.m.bypassed(reason)
	res, err := next(ctx, req)
	if err == nil {
		setHeader(res, bypassValue(reason))
	}
	return res, err
}

func bypassValue(reason string) string { return "bypass; reason=" + reason }

// storeFailed bypasses the cache for a request the store could not look up: its answer is
// not stored either, the store being unlikely to take it.
func (c *Cache) storeFailed(ctx context.Context, req *pipeline.Request, next pipeline.Handler, op string, err error) (*pipeline.Response, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	c.m.storeError(op)
	c.warn.Warn("respcache store failed", "response cache store failed: bypassing the cache",
		"model", c.opts.Model, "op", op, "err", err)
	return c.bypass(ctx, req, next, reasonStore)
}

func setHeader(res *pipeline.Response, value string) {
	if res.GatewayHeader == nil {
		res.GatewayHeader = http.Header{}
	}
	res.GatewayHeader[Header] = []string{value}
}

// hit answers req with a stored template. A template a stream request cannot replay (stored by an
// older version, or altered in a shared store) is not an answer: the request goes upstream.
func (c *Cache) hit(ctx context.Context, req *pipeline.Request, next pipeline.Handler, w *openaiwire.Body, template []byte, value string) (*pipeline.Response, error) {
	id := idPrefix(req.Path) + pipeline.NewRequestID()[:24]
	created := c.opts.Now().Unix()
	full, err := fullAnswer(template, id, created)
	if err != nil {
		return nil, fmt.Errorf("respcache: model %s: a stored answer: %w", c.opts.Model, err)
	}
	res := &pipeline.Response{StatusCode: http.StatusOK, GatewayHeader: http.Header{Header: {value}}}
	if !req.Stream() {
		// With its length the client is sent one body, not chunks.
		res.Header = http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(full))}}
		res.Body = pipeline.NewBody(full, hitUsage)
		return res, nil
	}
	so, _ := w.Get("stream_options")
	chunks, err := replay(req.Path, full, replayOptions{ID: id, Created: created, IncludeUsage: openaiwire.IncludeUsage(so)})
	if err != nil {
		c.warn.Warn("respcache replay failed", "response cache: a stored answer does not replay as a stream: asking the upstream",
			"model", c.opts.Model, "err", err)
		return c.bypass(ctx, req, next, reasonStored)
	}
	res.Header = http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}}
	res.Stream = true
	res.Body = pipeline.NewEventBody(chunks, hitUsage)
	return res, nil
}

// embed returns text's normalised vector, or nil when the embedder failed.
func (c *Cache) embed(ctx context.Context, text string) []float32 {
	ctx, cancel := context.WithTimeout(ctx, c.opts.EmbedTimeout)
	defer cancel()
	start := time.Now()
	vs, err := c.opts.Embedder.Embed(ctx, []string{text})
	c.m.embedSeconds.Observe(time.Since(start).Seconds())
	if err == nil && len(vs) != 1 {
		err = fmt.Errorf("%d vectors for 1 text", len(vs))
	}
	if err != nil {
		c.m.storeError("embed")
		c.warn.Warn("respcache embed failed", "response cache: embedding failed: matching exactly only",
			"model", c.opts.Model, "err", err)
		return nil
	}
	return normalize(append([]float32(nil), vs[0]...))
}

// miss asks the upstream and stores its answer if it may. f, when set, is the flight this
// request leads: it ends with the answer, or with nothing.
func (c *Cache) miss(ctx context.Context, req *pipeline.Request, next pipeline.Handler, lk *lookup, vec []float32, f *flight, value string) (*pipeline.Response, error) {
	res, err := next(ctx, req)
	if err != nil || res.StatusCode != http.StatusOK {
		c.land(f, lk.key, nil)
		if err == nil {
			c.m.answer(skipStatus)
			setHeader(res, value)
		}
		return res, err
	}
	setHeader(res, value)
	path, key, partition, text := req.Path, lk.key, lk.partition, lk.text
	res.Body = newRecorder(res.Body, res.Stream, req.Path, c.opts.MaxEntryBytes, func(resp []byte, skip string) {
		if skip != "" {
			c.m.answer(skip)
			c.land(f, key, nil)
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.store(ctx, path, key, partition, text, vec, resp, f)
		}()
	})
	return res, nil
}

// store checks and stores an answer, off the request's path: the client has its last byte.
func (c *Cache) store(ctx context.Context, path, key, partition, text string, vec []float32, resp []byte, f *flight) {
	template, skip := storable(path, resp, c.opts.ToolCalls)
	if skip != "" {
		c.m.answer(skip)
		c.land(f, key, nil)
		return
	}
	// Waiters need not wait for the store.
	c.resolve(f, template)
	ctx = context.WithoutCancel(ctx)
	if text != "" && vec == nil {
		vec = c.embed(ctx, text)
	}
	words := ""
	if vec != nil && c.checkWords {
		if words = wordsOf(text); words == "" {
			vec = nil // no words to check a semantic hit against: none
		}
	}
	if vec == nil {
		partition = ""
	}
	err := c.opts.Store.Put(ctx, Entry{Key: key, Partition: partition, Vector: vec, Words: words, Response: template})
	switch {
	case errors.Is(err, ErrTooLarge):
		c.m.answer(skipTooLarge)
	case err != nil:
		c.m.answer(skipStore)
		c.m.storeError("put")
		c.warn.Warn("respcache put failed", "response cache store failed: answer not stored",
			"model", c.opts.Model, "err", err)
	default:
		c.m.answer("stored")
	}
	c.land(f, key, template)
}

// resolve gives f's waiters resp (nil: nothing), once.
func (c *Cache) resolve(f *flight, resp []byte) {
	if f == nil {
		return
	}
	select {
	case <-f.done:
	default:
		f.resp = resp
		close(f.done)
	}
}

// land ends flight f of key: its waiters get resp if they did not yet, and later misses of key
// find the store (which has the answer now, if it took it).
func (c *Cache) land(f *flight, key string, resp []byte) {
	if f == nil {
		return
	}
	c.resolve(f, resp)
	c.mu.Lock()
	if c.flights[key] == f {
		delete(c.flights, key)
	}
	c.mu.Unlock()
}
