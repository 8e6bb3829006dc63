package guard

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/lib/logthrottle"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/store/ratelimit"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Guard.
type Options struct {
	// Shedder bounds requests in flight; nil admits any number.
	Shedder *Shedder
	// Limiter keeps the token buckets of Limits: in-process, or shared through Redis. Nil: no
	// rate limits.
	Limiter ratelimit.Limiter
	Limits  Limits
	// Breaker, when set, lets the admin endpoint list every endpoint's breaker state.
	Breaker breaker.Breaker
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Budget is a rate limit: requests and tokens per minute (each with a burst of a minute's worth).
// Zero means no limit.
type Budget struct {
	RequestsPerMinute float64 `yaml:"requests_per_minute"`
	TokensPerMinute   float64 `yaml:"tokens_per_minute"`
}

// Limits are the budgets a request spends from: its API key's (callers without a key share
// "anonymous"), its model's (all callers together) and its route's (openai or kserve).
type Limits struct {
	// PerKey is every API key's budget; Keys overrides it by key name.
	PerKey Budget            `yaml:"per_key"`
	Keys   map[string]Budget `yaml:"keys"`
	// PerModel is every model's budget; Models overrides it by model name.
	PerModel Budget            `yaml:"per_model"`
	Models   map[string]Budget `yaml:"models"`
	// Routes are budgets for all of a surface's traffic: "openai" (the OpenAI API, HTTP and
	// gRPC) and "kserve" (every KServe transport).
	Routes map[string]Budget `yaml:"routes"`
	// DefaultMaxTokens is the completion length a token estimate assumes for a request that names
	// no max_tokens; default 256. Estimates are settled against the upstream's usage.
	DefaultMaxTokens int `yaml:"default_max_tokens"`
}

// Validate checks that every budget is a finite, non-negative number.
func (l Limits) Validate() error {
	var errs []error
	check := func(where string, b Budget) {
		for _, v := range []float64{b.RequestsPerMinute, b.TokensPerMinute} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				errs = append(errs, fmt.Errorf("%s: budgets must be finite and >= 0", where))
				return
			}
		}
	}
	check("per_key", l.PerKey)
	check("per_model", l.PerModel)
	for k, b := range l.Keys {
		check("keys."+k, b)
	}
	for m, b := range l.Models {
		check("models."+m, b)
	}
	for r, b := range l.Routes {
		if r != RouteOpenAI && r != RouteKServe {
			errs = append(errs, fmt.Errorf("routes.%s: routes are %s and %s", r, RouteOpenAI, RouteKServe))
		}
		check("routes."+r, b)
	}
	if l.DefaultMaxTokens < 0 {
		errs = append(errs, errors.New("default_max_tokens must be >= 0"))
	}
	return errors.Join(errs...)
}

// The routes budgets are kept per.
const (
	RouteOpenAI = "openai"
	RouteKServe = "kserve"
)

// Guard admits or refuses each request for a model, whatever surface it came in on: the API key's
// model allow-list (403 / PERMISSION_DENIED) and load shedding (429 / RESOURCE_EXHAUSTED when
// full, 503 / UNAVAILABLE after waiting too long). Its KServe and OpenAI hooks plug into the
// model registry and the OpenAI proxy; a request that passes one (an LLM reached through the
// KServe bridge) is not counted again by the other.
type Guard struct {
	opts      Options
	log       *slog.Logger
	warn      *logthrottle.Throttle // per-request warnings: one line per interval, with a count
	decisions *prometheus.CounterVec
	// admitted are decisions' admitted counters of each route, looked up once: the label hash
	// was a third of a microsecond of every request.
	admitted map[string]prometheus.Counter

	// The last decision of recently used buckets, for the admin endpoint, in shards so that
	// concurrent requests rarely wait for each other.
	tracked [16]struct {
		sync.Mutex
		buckets map[string]bucketUse
	}
}

// bucketUse is what the admin endpoint shows of a bucket.
type bucketUse struct {
	d    ratelimit.Decision
	used time.Time
}

// maxTrackedBuckets bounds the admin endpoint's view of recently used buckets, per shard.
const maxTrackedBuckets = 256

// New returns a guard.
func New(opts Options) *Guard {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Shedder == nil {
		opts.Shedder = NewShedder(ShedderConfig{})
	}
	g := &Guard{opts: opts, log: opts.Logger, warn: logthrottle.New(opts.Logger, 0),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_guard_decisions_total",
			Help: "Requests the guard decided on, by route (openai, kserve) and result: admitted, forbidden (model not allowed for the key), rate_limited, too_large (more tokens than a whole budget), overloaded, queue_timeout, limiter_unavailable, canceled.",
		}, []string{"route", "result"})}
	g.admitted = map[string]prometheus.Counter{
		RouteOpenAI: g.decisions.WithLabelValues(RouteOpenAI, "admitted"),
		RouteKServe: g.decisions.WithLabelValues(RouteKServe, "admitted"),
	}
	for i := range g.tracked {
		g.tracked[i].buckets = map[string]bucketUse{}
	}
	return g
}

// Collectors are the guard's metrics: decisions, and the shedder's load.
func (g *Guard) Collectors() []prometheus.Collector {
	s := g.opts.Shedder
	gauge := func(name, help string, v func(ShedderStats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v(s.Stats())) })
	}
	return []prometheus.Collector{g.decisions,
		gauge("infergate_guard_in_flight_requests", "Requests holding a load-shedding slot.", func(st ShedderStats) int { return st.InFlight }),
		gauge("infergate_guard_in_flight_batch_requests", "Batch requests holding a load-shedding slot.", func(st ShedderStats) int { return st.Batch }),
		gauge("infergate_guard_waiting_requests", "Requests waiting for a load-shedding slot.", func(st ShedderStats) int { return st.Waiting }),
	}
}

type admittedKey struct{}

type priorityKey struct{}

// WithPriority marks the requests made with ctx (batch workers mark theirs Batch).
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

func priorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}

// refusal is why a request was refused, in terms every surface can render: the OpenAI error
// (status, error object, headers such as Retry-After and X-RateLimit-*) and KServe's code, which
// gets the same message and headers.
type refusal struct {
	result string       // the metric's label
	code   connect.Code // KServe's
	err    *pipeline.Error
}

func (r *refusal) connectError() *connect.Error {
	e := connect.NewError(r.code, errors.New(r.err.Message))
	for k, vv := range r.err.Header {
		e.Meta()[k] = vv
	}
	return e
}

// ticket is an admitted request.
type ticket struct {
	ctx     context.Context
	limit   ratelimit.Decision // of the budget closest to running out, for X-RateLimit-*
	limited bool
	release func()
	lim     ratelimit.Limiter
	spent   []spent // what the request took from its budgets
}

// spent is what a request took from one budget.
type spent struct {
	key    string
	limit  ratelimit.Limit
	cost   float64
	tokens bool
	res    ratelimit.Reservation
}

// finish ends an admitted OpenAI request: its slot is freed and its budgets settled against what
// it used. A request that never reached an upstream gets everything back; one answered with an
// error status, or from the response cache, gets its tokens back; otherwise its token estimate becomes the usage (the
// upstream's, or the gateway's own prompt count), the stream's chunks standing in for the
// completion and the prompt's estimate for the prompt when neither was counted, or stays as
// charged when nothing is known.
func (t *ticket) finish(u pipeline.Usage, promptEstimate float64) {
	t.release()
	if len(t.spent) == 0 {
		return
	}
	ctx := context.WithoutCancel(t.ctx)
	var used float64
	switch {
	case u.Status == 0:
		t.refund(ctx)
		return
	case u.Status >= 400, u.Cached:
		used = 0
	case u.PromptTokens+u.CompletionTokens+u.Chunks > 0:
		// The upstream's counts, or the gateway's (a model with a tokenizer counts its prompts);
		// where one is missing, the prompt's estimate and the stream's chunks stand in.
		prompt, completion := float64(u.PromptTokens), float64(u.CompletionTokens)
		if prompt == 0 && completion == 0 {
			prompt = promptEstimate
		}
		if completion == 0 {
			completion = float64(u.Chunks)
		}
		used = prompt + completion
	default:
		return
	}
	for _, s := range t.spent {
		if s.tokens {
			if err := s.res.Settle(ctx, used); err != nil && !errors.Is(err, context.Canceled) {
				slog.Default().Debug("settling a token estimate failed", "err", err)
			}
		}
	}
}

var noRelease = func() {}

// admit decides on one request for model coming in on route, estimated at tokens (0: the route
// has no token cost), and counts the decision.
func (g *Guard) admit(ctx context.Context, model, route string, tokens float64) (*ticket, *refusal) {
	if ctx.Value(admittedKey{}) != nil {
		return &ticket{ctx: ctx, release: noRelease}, nil
	}
	t, r := g.decide(ctx, model, route, tokens)
	g.count(route, r)
	return t, r
}

// count counts a decision on route: admitted when r is nil.
func (g *Guard) count(route string, r *refusal) {
	if r != nil {
		g.decisions.WithLabelValues(route, r.result).Inc()
	} else if c, ok := g.admitted[route]; ok {
		c.Inc()
	} else {
		g.decisions.WithLabelValues(route, "admitted").Inc()
	}
}

func (g *Guard) decide(ctx context.Context, model, route string, tokens float64) (*ticket, *refusal) {
	p := PrincipalFrom(ctx)
	if p != nil && !p.MayUse(model) {
		// To a key, a model it may not use does not exist: the same answer as for an unknown
		// name, in each protocol's words, so keys cannot probe other tenants' models.
		e := pipeline.ModelNotFound(model)
		if route != RouteOpenAI {
			e = pipeline.NotFound("model", "model_not_found", fmt.Sprintf("Request for unknown model: '%s' is not found", model))
		}
		return nil, &refusal{result: "forbidden", code: connect.CodeNotFound, err: e}
	}
	t := &ticket{release: noRelease}
	if g.opts.Limiter != nil {
		keyName := "anonymous"
		if p != nil {
			keyName = p.Name
		}
		if r := g.limit(ctx, t, keyName, model, route, tokens); r != nil {
			return nil, r
		}
	}
	release, err := g.opts.Shedder.Acquire(ctx, model, priorityOf(ctx))
	if err != nil {
		t.refund(ctx)
		return nil, g.shedRefusal(ctx, err)
	}
	t.release = release
	t.ctx = context.WithValue(ctx, admittedKey{}, true)
	return t, nil
}

// check is one bucket a request spends from.
type check struct {
	key    string
	kind   string // key, model or route: what a refusal names
	name   string // the key's, model's or route's name
	limit  ratelimit.Limit
	cost   float64
	tokens bool
	d      ratelimit.Decision
	res    ratelimit.Reservation // for a token budget, to settle against the actual usage
	err    error
}

// spend asks the limiter for c's cost.
func (c *check) spend(ctx context.Context, lim ratelimit.Limiter) {
	if c.tokens {
		c.d, c.res, c.err = ratelimit.ReserveTokens(ctx, lim, c.key, c.limit, c.cost)
		return
	}
	c.d, c.err = lim.Allow(ctx, c.key, c.limit, c.cost)
}

// checks appends to cs the buckets a request spends from.
func (g *Guard) checks(cs []check, keyName, model, route string, tokens float64) []check {
	add := func(kind, name string, b Budget) {
		if b.RequestsPerMinute > 0 {
			cs = append(cs, check{key: kind + ":" + name + ":req", kind: kind, name: name, limit: ratelimit.PerMinute(b.RequestsPerMinute), cost: 1})
		}
		if b.TokensPerMinute > 0 && tokens > 0 {
			cs = append(cs, check{key: kind + ":" + name + ":tok", kind: kind, name: name, limit: ratelimit.PerMinute(b.TokensPerMinute), cost: tokens, tokens: true})
		}
	}
	l := &g.opts.Limits
	kb, ok := l.Keys[keyName]
	if !ok {
		kb = l.PerKey
	}
	add("key", keyName, kb)
	mb, ok := l.Models[model]
	if !ok {
		mb = l.PerModel
	}
	add("model", model, mb)
	add("route", route, l.Routes[route])
	return cs
}

// scope is what a refusal names.
func (c *check) scope() string {
	switch c.kind {
	case "key":
		return fmt.Sprintf("API key '%s'", c.name)
	case "model":
		return fmt.Sprintf("model '%s'", c.name)
	}
	return fmt.Sprintf("the %s API", c.name)
}

// limit spends the request's budgets, all or nothing. The buckets are asked at once, so with
// Redis the decision costs one round trip (pipelined), whatever the number of budgets.
func (g *Guard) limit(ctx context.Context, t *ticket, keyName, model, route string, tokens float64) *refusal {
	return g.limitWith(ctx, t, keyName, model, route, tokens, false)
}

// limitWith is limit, restricted to the token budgets when tokensOnly.
func (g *Guard) limitWith(ctx context.Context, t *ticket, keyName, model, route string, tokens float64, tokensOnly bool) *refusal {
	var buf [6]check // every bucket a request can spend from: no allocation for the list
	cs := g.checks(buf[:0], keyName, model, route, tokens)
	if tokensOnly {
		cs = slices.DeleteFunc(cs, func(c check) bool { return !c.tokens })
	}
	if len(cs) == 0 {
		return nil
	}
	lim := g.opts.Limiter
	switch batch, ok := lim.(ratelimit.BatchLimiter); {
	case len(cs) == 1:
		cs[0].spend(ctx, lim)
	case ok:
		reqs := make([]ratelimit.Request, len(cs))
		for i := range cs {
			reqs[i] = ratelimit.Request{Key: cs[i].key, Limit: cs[i].limit, Cost: cs[i].cost}
		}
		for i, r := range batch.AllowAll(ctx, reqs) {
			cs[i].d, cs[i].err = r.Decision, r.Err
			if cs[i].tokens && r.Err == nil && r.Decision.Allowed {
				cs[i].res = ratelimit.Reserved(lim, cs[i].key, cs[i].limit, cs[i].cost)
			}
		}
	default:
		for i := range cs {
			cs[i].spend(ctx, lim)
		}
	}
	g.track(cs)
	var refused *check
	var failed error
	for i := range cs {
		c := &cs[i]
		switch {
		case c.err != nil:
			failed = c.err
		case !c.d.Allowed && (refused == nil || c.d.RetryAfter > refused.d.RetryAfter):
			refused = c
		}
	}
	if failed != nil || refused != nil {
		// Give back what the other buckets spent on a request that will not run.
		for i := range cs {
			if c := &cs[i]; c.err == nil && c.d.Allowed {
				_ = lim.Adjust(context.WithoutCancel(ctx), c.key, c.limit, -c.cost)
			}
		}
	}
	switch {
	case failed != nil && ctx.Err() != nil:
		return &refusal{result: "canceled", code: connect.CodeCanceled, err: pipeline.Canceled(ctx.Err())}
	case failed != nil:
		g.warn.Warn("limiter-failed", "rate limiter failed; requests refused (fail-closed)", "err", failed)
		return &refusal{result: "limiter_unavailable", code: connect.CodeUnavailable,
			err: pipeline.Unavailable("rate_limiter_unavailable", time.Second, "rate limits cannot be checked right now; retry later")}
	case refused != nil:
		result, what := "rate_limited", "requests"
		if refused.tokens {
			what = "tokens"
		}
		per := refused.limit.Burst
		var msg string
		if refused.d.TooLarge {
			result = "too_large"
			msg = fmt.Sprintf("request too large for %s: about %.0f tokens, but the limit is %.0f tokens per minute", refused.scope(), refused.cost, per)
		} else {
			msg = fmt.Sprintf("rate limit reached for %s: %.0f %s per minute; retry after %s", refused.scope(), per, what, ceil(refused.d.RetryAfter))
		}
		h := http.Header{}
		refused.d.SetHeaders(h)
		return &refusal{result: result, code: connect.CodeResourceExhausted, err: pipeline.RateLimited(what, msg, h)}
	}
	// X-RateLimit-* describe the budget closest to running out.
	tightest := &cs[0]
	t.lim = lim
	t.spent = make([]spent, 0, len(cs))
	for i := range cs {
		c := &cs[i]
		t.spent = append(t.spent, spent{key: c.key, limit: c.limit, cost: c.cost, tokens: c.tokens, res: c.res})
		if cs[i].d.Remaining/cs[i].limit.Burst < tightest.d.Remaining/tightest.limit.Burst {
			tightest = &cs[i]
		}
	}
	t.limit = tightest.d
	t.limited = true
	return nil
}

// track remembers the buckets' last decisions for the admin endpoint.
func (g *Guard) track(cs []check) {
	now := time.Now()
	for i := range cs {
		if cs[i].err != nil {
			continue
		}
		s := &g.tracked[maphash.String(trackSeed, cs[i].key)%uint64(len(g.tracked))]
		s.Lock()
		if _, ok := s.buckets[cs[i].key]; !ok && len(s.buckets) >= maxTrackedBuckets {
			var lru string
			for k, u := range s.buckets {
				if lru == "" || u.used.Before(s.buckets[lru].used) {
					lru = k
				}
			}
			delete(s.buckets, lru)
		}
		s.buckets[cs[i].key] = bucketUse{d: cs[i].d, used: now}
		s.Unlock()
	}
}

var trackSeed = maphash.MakeSeed()

// refund gives back a ticket's token estimates in full (the request did not run).
func (t *ticket) refund(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	for _, s := range t.spent {
		if s.tokens {
			_ = s.res.Settle(ctx, 0)
		} else {
			_ = t.lim.Adjust(ctx, s.key, s.limit, -s.cost)
		}
	}
}

func ceil(d time.Duration) time.Duration {
	return (d + time.Second - 1).Truncate(time.Second)
}

func (g *Guard) shedRefusal(ctx context.Context, err error) *refusal {
	switch {
	case errors.Is(err, ErrOverloaded):
		return &refusal{result: "overloaded", code: connect.CodeResourceExhausted, err: pipeline.Overloaded(g.opts.Shedder.RetryAfter(), err.Error())}
	case errors.Is(err, ErrQueueTimeout):
		return &refusal{result: "queue_timeout", code: connect.CodeUnavailable,
			err: pipeline.Unavailable("queue_timeout", g.opts.Shedder.RetryAfter(), err.Error())}
	}
	// The caller went away while waiting: nobody reads the answer, but keep it truthful.
	return &refusal{result: "canceled", code: connect.CodeCanceled, err: pipeline.Canceled(ctx.Err())}
}

// KServe is the model registry's Admission: every KServe request, on every transport.
func (g *Guard) KServe() engines.Admission {
	return func(ctx context.Context, e *engines.Entry, _ *engines.Request) (context.Context, func(error), error) {
		t, r := g.admit(ctx, e.Name(), RouteKServe, 0)
		if r != nil {
			return nil, nil, r.connectError()
		}
		return t.ctx, func(error) { t.release() }, nil
	}
}

// OpenAI is the LLM pipeline's admission (run it with pipeline.Admit, as the first stage):
// every request of the OpenAI HTTP API, OpenAIService, the KServe bridge and batch workers. A
// request the KServe side already admitted (an LLM reached through the bridge) holds its slot and
// request budgets already, but still spends the token budgets: its text reaches the LLM here.
func (g *Guard) OpenAI() pipeline.Admission {
	return func(ctx context.Context, req *pipeline.Request) (pipeline.Admitted, error) {
		var tokens, prompt float64
		if g.opts.Limiter != nil {
			tokens, prompt = g.estimate(req)
		}
		var t *ticket
		var r *refusal
		if ctx.Value(admittedKey{}) != nil {
			t, r = g.admitTokens(ctx, req.Model(), tokens)
		} else {
			t, r = g.admit(ctx, req.Model(), RouteOpenAI, tokens)
		}
		if r != nil {
			return pipeline.Admitted{}, r.err
		}
		var h http.Header
		if t.limited {
			h = http.Header{}
			t.limit.SetHeaders(h)
		}
		return pipeline.Admitted{Context: t.ctx, Header: h, Done: func(u pipeline.Usage) { t.finish(u, prompt) }}, nil
	}
}

// admitTokens spends only the token budgets of a request already admitted on the KServe side.
func (g *Guard) admitTokens(ctx context.Context, model string, tokens float64) (*ticket, *refusal) {
	t := &ticket{ctx: ctx, release: noRelease}
	if g.opts.Limiter == nil || tokens <= 0 {
		return t, nil
	}
	keyName := "anonymous"
	if p := PrincipalFrom(ctx); p != nil {
		keyName = p.Name
	}
	r := g.limitWith(ctx, t, keyName, model, RouteOpenAI, tokens, true)
	g.count(RouteOpenAI, r)
	return t, r
}

// estimate is a request's token cost before it runs, and the prompt's part of it: its body's
// length at about 4 bytes a token (the prompt, plus the JSON around it, which errs high) and the
// completion it may generate (none for embeddings).
func (g *Guard) estimate(req *pipeline.Request) (total, prompt float64) {
	maxTokens := 0
	if req.Path != "/v1/embeddings" {
		maxTokens = req.Routing().MaxTokens
		if maxTokens < 0 {
			maxTokens = g.opts.Limits.DefaultMaxTokens
			if maxTokens == 0 {
				maxTokens = 256
			}
		}
	}
	prompt = ratelimit.EstimateTokens(req.BodyLen(), 0)
	return prompt + float64(maxTokens), prompt
}
