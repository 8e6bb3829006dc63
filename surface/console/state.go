package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/lib/window"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/breaker"
	"github.com/infergate/infergate/upstream"
	"github.com/infergate/infergate/upstream/kserveproxy"
	"github.com/infergate/infergate/upstream/openaipool"
	"github.com/infergate/infergate/upstream/registry"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Pool is what the console reads of the OpenAI upstreams' pool (openaipool.Pool).
type Pool interface {
	Endpoints() []openaipool.Endpoint
	Table(keep func(model string) bool) []openaipool.ModelRoutes
}

// Sources are the gateway's parts the console reads its state from, each when asked (every poll),
// never copied; a nil source's section is empty.
type Sources struct {
	Version string
	Started time.Time
	// ConfigPath is where the config came from (a file's path, "environment").
	ConfigPath string
	// Config is the effective config with every secret removed.
	Config func() any
	// Pool is the OpenAI upstreams; KServe lists the KServe upstreams.
	Pool   Pool
	KServe func() []kserveproxy.EndpointStatus
	// Breaker is the upstreams' circuit breaker; nil when off.
	Breaker breaker.Breaker
	// Backends lists the backends registered through the RegistryService.
	Backends func(ctx context.Context) ([]registry.Registration, error)
	// Tensors is the model registry behind the KServe surface.
	Tensors *engines.Registry
	// Stages names a model's LLM stages in pipeline order.
	Stages func(model string) []string
	// TensorStages names a tensor model's stages in the order a KServe request goes through
	// them (the transport's, the registry's, then the engine that computes the answer).
	TensorStages func(e *engines.Entry) []string
	// Batches lists the newest batches, newest first.
	Batches func(ctx context.Context) ([]*batchstate.Batch, error)
	// Metrics is the gateway's Prometheus registry: the figures kept only as metrics (the
	// response cache's size, sessions, disaggregation) are read from it, in the process.
	Metrics prometheus.Gatherer
	Logger  *slog.Logger
}

// State is the console's JSON document (GET /console/api/state). docs/console.md describes
// every field.
type State struct {
	Now        int64      `json:"now"` // Unix ms
	Version    string     `json:"version"`
	Uptime     float64    `json:"uptime_seconds"`
	ConfigPath string     `json:"config_path"`
	Config     any        `json:"config"`
	Overview   Overview   `json:"overview"`
	Upstreams  []Upstream `json:"upstreams"`
	Backends   []Backend  `json:"backends"`
	Tensors    []Tensor   `json:"tensor_models"`
	LLMs       []LLM      `json:"llms"`
	Batches    []Batch    `json:"batches"`
	Keys       []Key      `json:"keys"`
	// MemoryBytes is the fixed memory of the console's rings.
	MemoryBytes int      `json:"memory_bytes"`
	Errors      []string `json:"errors,omitempty"`
}

// Overview is the gateway's traffic: figures over the last minute, percentiles over the whole
// window, and the window as a series of points.
type Overview struct {
	WindowSeconds int     `json:"window_seconds"`
	StepSeconds   int     `json:"step_seconds"`
	Requests      float64 `json:"requests_per_second"`
	Errors        float64 `json:"errors_per_second"`
	Refused       float64 `json:"refused_per_second"`
	TokensIn      float64 `json:"tokens_in_per_second"`
	TokensOut     float64 `json:"tokens_out_per_second"`
	InFlight      int64   `json:"in_flight"`
	LatencyP50    float64 `json:"latency_p50_ms"`
	LatencyP99    float64 `json:"latency_p99_ms"`
	TTFTP50       float64 `json:"ttft_p50_ms"`
	TTFTP99       float64 `json:"ttft_p99_ms"`
	RequestsTotal int64   `json:"requests_in_window"`
	Series        Series  `json:"series"`
}

// Series are the window's points, oldest first, one value per point in each slice.
type Series struct {
	T          []int64   `json:"t"` // each point's end, Unix s
	Requests   []float64 `json:"requests_per_second"`
	Errors     []float64 `json:"errors_per_second"`
	LatencyP50 []float64 `json:"latency_p50_ms"`
	LatencyP99 []float64 `json:"latency_p99_ms"`
	TTFTP50    []float64 `json:"ttft_p50_ms"`
	TTFTP99    []float64 `json:"ttft_p99_ms"`
	TokensIn   []float64 `json:"tokens_in_per_second"`
	TokensOut  []float64 `json:"tokens_out_per_second"`
}

// Upstream is one upstream endpoint.
type Upstream struct {
	Name        string   `json:"name"`
	Type        string   `json:"type"`
	URL         string   `json:"url"`
	Priority    int      `json:"priority"`
	Healthy     bool     `json:"healthy"`
	Breaker     string   `json:"breaker,omitempty"`
	BreakerWait float64  `json:"breaker_retry_after_seconds,omitempty"`
	LastCheck   int64    `json:"last_check,omitempty"` // Unix ms
	NextCheck   int64    `json:"next_check,omitempty"` // Unix ms, at the latest
	LastError   string   `json:"last_error,omitempty"`
	Failures    int      `json:"consecutive_failures,omitempty"`
	Outstanding int64    `json:"outstanding"`
	Requests    int64    `json:"requests"`
	Failed      int64    `json:"failed"`
	LatencyAvg  float64  `json:"latency_avg_ms"`
	Models      []string `json:"models"`
	VLLM        *VLLM    `json:"vllm,omitempty"`
}

// VLLM is a vLLM endpoint's load as its last scrape read it.
type VLLM struct {
	Running      float64 `json:"running"`
	Waiting      float64 `json:"waiting"`
	KVCacheUsage float64 `json:"kv_cache_usage"`
}

// Backend is one registered backend's lease.
type Backend struct {
	Lease   string  `json:"lease"` // a short hash of the lease id: the id lets its holder change it
	Model   string  `json:"model"`
	Type    string  `json:"type"`
	URL     string  `json:"url"`
	Expires int64   `json:"expires"` // Unix ms
	TTL     float64 `json:"ttl_seconds"`
}

// Tensor is one tensor model: its stages and its Triton statistics.
type Tensor struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Ready      bool     `json:"ready"`
	Stages     []string `json:"stages"`
	Inferences uint64   `json:"inference_count"`
	Executions uint64   `json:"execution_count"`
	Success    uint64   `json:"success"`
	Failed     uint64   `json:"failed"`
	QueueAvg   float64  `json:"queue_avg_ms"`
	ComputeAvg float64  `json:"compute_avg_ms"`
	// Batches counts executions by batch size.
	Batches []BatchSize `json:"batch_sizes"`
}

// BatchSize is how many executions ran batches of Size.
type BatchSize struct {
	Size  uint64 `json:"size"`
	Count uint64 `json:"count"`
}

// LLM is one LLM's figures over the per-model window (15 minutes).
type LLM struct {
	Name           string   `json:"name"`
	Stages         []string `json:"stages"`
	Endpoints      []string `json:"endpoints"`
	Requests       float64  `json:"requests_per_second"` // over the last 61 to 120 s
	RequestsTotal  int64    `json:"requests_in_window"`
	Errors         int64    `json:"errors"`
	Refused        int64    `json:"refused"`
	ContextRefused int64    `json:"context_length_refusals"`
	CacheHits      int64    `json:"cache_hits"`
	CacheHitRate   *float64 `json:"cache_hit_rate"` // null when the model has no cache
	CacheBytes     *float64 `json:"cache_bytes,omitempty"`
	CacheEntries   *float64 `json:"cache_entries,omitempty"`
	Sessions       *float64 `json:"active_sessions,omitempty"`
	// Disaggregated is the share of the model's requests served prefill-then-decode, since start.
	Disaggregated *float64 `json:"disaggregated_rate,omitempty"`
	// PrefixHitRate is, for a model routed on its prompts' prefixes (routing: cache_aware), the
	// share of their blocks the chosen endpoint had been sent before, since start.
	PrefixHitRate *float64 `json:"prefix_hit_rate,omitempty"`
	LatencyP50    float64  `json:"latency_p50_ms"`
	LatencyP99    float64  `json:"latency_p99_ms"`
	TTFTP50       float64  `json:"ttft_p50_ms"`
	TTFTP99       float64  `json:"ttft_p99_ms"`
	ITLP50        float64  `json:"itl_p50_ms"`
	TokensIn      int64    `json:"tokens_in"`
	TokensOut     int64    `json:"tokens_out"`
}

// Batch is one batch's progress.
type Batch struct {
	ID        string  `json:"id"`
	Status    string  `json:"status"`
	Model     string  `json:"model,omitempty"`
	Endpoint  string  `json:"endpoint"`
	Total     int64   `json:"total"`
	Completed int64   `json:"completed"`
	Failed    int64   `json:"failed"`
	Rate      float64 `json:"lines_per_second"`
	ETA       float64 `json:"eta_seconds,omitempty"`
	Created   int64   `json:"created_at"`
}

// Key is one API key's use over the per-key window, by its configured name.
type Key struct {
	Name      string `json:"name"`
	Requests  int64  `json:"requests"`
	Errors    int64  `json:"errors"`
	Refused   int64  `json:"refused"`
	TokensIn  int64  `json:"tokens_in"`
	TokensOut int64  `json:"tokens_out"`
}

const stepSeconds = 10

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// usMS is d in milliseconds to the microsecond.
func usMS(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1000 }

func round2(f float64) float64 { return math.Round(f*100) / 100 }

// state assembles the document as of now.
func (c *Console) state(ctx context.Context) *State {
	now := c.rec.now()
	s := &State{Now: now.UnixMilli(), Version: c.src.Version, ConfigPath: c.src.ConfigPath,
		MemoryBytes: c.rec.Bytes(), Upstreams: []Upstream{}, Backends: []Backend{}, Tensors: []Tensor{}, LLMs: []LLM{},
		Batches: []Batch{}, Keys: []Key{}}
	if !c.src.Started.IsZero() {
		s.Uptime = math.Round(now.Sub(c.src.Started).Seconds())
	}
	if c.src.Config != nil {
		s.Config = c.src.Config()
	}
	s.Overview = c.overview(now)
	fams := c.gather()
	s.Upstreams = c.upstreams(now)
	if c.src.Backends != nil {
		regs, err := c.src.Backends(ctx)
		if err != nil {
			s.Errors = append(s.Errors, "registered backends: unavailable")
			c.src.Logger.Warn("console: listing registered backends", "err", err)
		}
		for _, r := range regs {
			b := r.Backend
			s.Backends = append(s.Backends, Backend{Lease: shortHash(r.ID), Model: b.GetModelName(),
				Type: strings.ToLower(strings.TrimPrefix(b.GetBackendType().String(), "BACKEND_TYPE_")),
				URL:  safeURL(b.GetUrl()), Expires: r.Expires.UnixMilli(), TTL: r.TTL.Seconds()})
		}
		slices.SortFunc(s.Backends, func(a, b Backend) int { return strings.Compare(a.Model+a.Lease, b.Model+b.Lease) })
	}
	s.Tensors = c.tensors()
	s.LLMs = c.llms(now, fams)
	if c.src.Batches != nil {
		bs, err := c.src.Batches(ctx)
		if err != nil {
			s.Errors = append(s.Errors, "batches: unavailable")
			c.src.Logger.Warn("console: listing batches", "err", err)
		}
		for _, b := range bs {
			s.Batches = append(s.Batches, batchOf(b, now))
		}
	}
	c.rec.keys.Each(func(name string, r *window.Ring) {
		pt := r.Total(now, windowMinutes)
		if pt.Counts == (window.Counts{}) {
			return
		}
		s.Keys = append(s.Keys, Key{Name: name, Requests: pt.Counts.Requests, Errors: pt.Counts.Errors, Refused: pt.Counts.Refused,
			TokensIn: pt.Counts.TokensIn, TokensOut: pt.Counts.TokensOut})
	})
	slices.SortFunc(s.Keys, func(a, b Key) int { return strings.Compare(a.Name, b.Name) })
	return s
}

func (c *Console) overview(now time.Time) Overview {
	o := Overview{WindowSeconds: WindowSeconds, StepSeconds: stepSeconds, InFlight: c.rec.inflight.Load()}
	last := c.rec.overview.Total(now, 60)
	o.Requests = round2(last.Rate(last.Counts.Requests))
	o.Errors = round2(last.Rate(last.Counts.Errors))
	o.Refused = round2(last.Rate(last.Counts.Refused))
	o.TokensIn = round2(last.Rate(last.Counts.TokensIn))
	o.TokensOut = round2(last.Rate(last.Counts.TokensOut))
	all := c.rec.overview.Total(now, WindowSeconds)
	o.RequestsTotal = all.Counts.Requests
	o.LatencyP50, o.LatencyP99 = ms(all.Hists[0].Quantile(0.5)), ms(all.Hists[0].Quantile(0.99))
	o.TTFTP50, o.TTFTP99 = ms(all.Hists[1].Quantile(0.5)), ms(all.Hists[1].Quantile(0.99))
	for _, p := range c.rec.overview.Series(now, stepSeconds) {
		sr := &o.Series
		sr.T = append(sr.T, p.End.Unix())
		sr.Requests = append(sr.Requests, round2(p.Rate(p.Counts.Requests)))
		sr.Errors = append(sr.Errors, round2(p.Rate(p.Counts.Errors)))
		sr.LatencyP50 = append(sr.LatencyP50, ms(p.Hists[0].Quantile(0.5)))
		sr.LatencyP99 = append(sr.LatencyP99, ms(p.Hists[0].Quantile(0.99)))
		sr.TTFTP50 = append(sr.TTFTP50, ms(p.Hists[1].Quantile(0.5)))
		sr.TTFTP99 = append(sr.TTFTP99, ms(p.Hists[1].Quantile(0.99)))
		sr.TokensIn = append(sr.TokensIn, round2(p.Rate(p.Counts.TokensIn)))
		sr.TokensOut = append(sr.TokensOut, round2(p.Rate(p.Counts.TokensOut)))
	}
	return o
}

func (c *Console) upstreams(now time.Time) []Upstream {
	out := []Upstream{}
	served := map[string][]string{}
	if c.src.Pool != nil {
		for _, m := range c.src.Pool.Table(nil) {
			for _, r := range m.Routes {
				served[r.Endpoint] = append(served[r.Endpoint], m.Name)
			}
		}
		for _, e := range c.src.Pool.Endpoints() {
			u := Upstream{Name: e.Name, Type: e.Type, URL: safeURL(e.URL), Priority: e.Priority, Healthy: e.Healthy,
				Outstanding: e.Outstanding, Requests: e.Stats.Requests, Failed: e.Stats.Failures,
				LatencyAvg: ms(e.Stats.AvgLatency()), Models: served[e.Name]}
			c.health(&u, e.Health, now)
			if e.VLLM != nil {
				u.VLLM = &VLLM{Running: e.VLLM.Load.Running, Waiting: e.VLLM.Load.Waiting, KVCacheUsage: round2(e.VLLM.Load.KVCacheUsage * 100)}
			}
			out = append(out, u)
		}
	}
	if c.src.KServe != nil {
		for _, e := range c.src.KServe() {
			u := Upstream{Name: e.Name, Type: upstream.TypeKServe, URL: safeURL(e.URL), Priority: e.Priority, Healthy: e.Healthy,
				Outstanding: e.Outstanding, Models: e.Models}
			c.health(&u, e.Health, now)
			out = append(out, u)
		}
	}
	for i := range out {
		if out[i].Models == nil {
			out[i].Models = []string{}
		}
		out[i].Name = endpointName(out[i].Name) // after health: the breaker knows the real name
	}
	return out
}

// health fills in an endpoint's health checks and breaker.
func (c *Console) health(u *Upstream, h upstream.Health, now time.Time) {
	if !h.LastCheck.IsZero() {
		u.LastCheck = h.LastCheck.UnixMilli()
	}
	if !h.NextCheck.IsZero() {
		u.NextCheck = h.NextCheck.UnixMilli()
	}
	u.LastError, u.Failures = h.LastError, h.Failures
	if c.src.Breaker != nil {
		u.Breaker = c.src.Breaker.State(u.Name).String()
		u.BreakerWait = round2(c.src.Breaker.RetryAfter(u.Name).Seconds())
	}
}

func (c *Console) tensors() []Tensor {
	out := []Tensor{}
	if c.src.Tensors == nil {
		return out
	}
	for _, e := range c.src.Tensors.Entries() {
		st := e.StatisticsProto()
		is := st.GetInferenceStats()
		t := Tensor{Name: e.Name(), Version: e.Version(), Ready: e.Ready(), Inferences: st.GetInferenceCount(),
			Executions: st.GetExecutionCount(), Success: is.GetSuccess().GetCount(), Failed: is.GetFail().GetCount(),
			Batches: []BatchSize{}, Stages: []string{}}
		if c.src.TensorStages != nil {
			t.Stages = c.src.TensorStages(e)
		}
		if n := is.GetSuccess().GetCount(); n > 0 {
			// To the microsecond, as the page shows them: a built-in model computes in a few,
			// which ms's hundredths of a millisecond would show as 0.
			t.QueueAvg = usMS(time.Duration(is.GetQueue().GetNs() / n))
			t.ComputeAvg = usMS(time.Duration(is.GetComputeInfer().GetNs() / n))
		}
		for _, b := range st.GetBatchStats() {
			t.Batches = append(t.Batches, BatchSize{Size: b.GetBatchSize(), Count: b.GetComputeInfer().GetCount()})
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Tensor) int { return strings.Compare(a.Name+"/"+a.Version, b.Name+"/"+b.Version) })
	return out
}

func (c *Console) llms(now time.Time, fams map[string]*dto.MetricFamily) []LLM {
	out := []LLM{}
	if c.src.Pool == nil {
		return out
	}
	for _, m := range c.src.Pool.Table(nil) {
		l := LLM{Name: m.Name, Stages: []string{}, Endpoints: []string{}}
		if c.src.Stages != nil {
			l.Stages = c.src.Stages(m.Name)
		}
		for _, r := range m.Routes {
			l.Endpoints = append(l.Endpoints, endpointName(r.Endpoint))
		}
		ring := c.rec.models.Of(m.Name)
		pt := ring.Total(now, windowMinutes)
		// The rate is the recent one: this minute and the last (61 to 120 s).
		recent := ring.Total(now, 2)
		l.Requests = round2(recent.Rate(recent.Counts.Requests))
		l.RequestsTotal = pt.Counts.Requests
		l.Errors, l.Refused, l.ContextRefused = pt.Counts.Errors, pt.Counts.Refused, pt.Counts.ContextRefused
		l.CacheHits, l.TokensIn, l.TokensOut = pt.Counts.CacheHits, pt.Counts.TokensIn, pt.Counts.TokensOut
		l.LatencyP50, l.LatencyP99 = ms(pt.Hists[0].Quantile(0.5)), ms(pt.Hists[0].Quantile(0.99))
		l.TTFTP50, l.TTFTP99 = ms(pt.Hists[1].Quantile(0.5)), ms(pt.Hists[1].Quantile(0.99))
		l.ITLP50 = ms(pt.Hists[2].Quantile(0.5))
		if slices.Contains(l.Stages, "cache") {
			rate := 0.0
			if pt.Counts.Requests > 0 {
				rate = round2(float64(pt.Counts.CacheHits) / float64(pt.Counts.Requests))
			}
			l.CacheHitRate = &rate
			l.CacheBytes = metricValue(fams, "infergate_respcache_bytes", m.Name, "", "")
			l.CacheEntries = metricValue(fams, "infergate_respcache_entries", m.Name, "", "")
		}
		if slices.Contains(l.Stages, "sessions") {
			l.Sessions = metricValue(fams, "infergate_sessions_active", m.Name, "", "")
		}
		l.Disaggregated = metricShare(fams, "infergate_disagg_requests_total", m.Name, "path", "disaggregated")
		l.PrefixHitRate = metricShare(fams, "infergate_kvroute_blocks_total", m.Name, "result", "cached")
		out = append(out, l)
	}
	return out
}

// gather reads the metrics the console shows that are kept only as Prometheus metrics.
func (c *Console) gather() map[string]*dto.MetricFamily {
	out := map[string]*dto.MetricFamily{}
	if c.src.Metrics == nil {
		return out
	}
	fams, err := c.src.Metrics.Gather()
	if err != nil {
		c.src.Logger.Warn("console: gathering metrics", "err", err)
	}
	for _, f := range fams {
		switch f.GetName() {
		case "infergate_respcache_bytes", "infergate_respcache_entries", "infergate_sessions_active", "infergate_disagg_requests_total",
			"infergate_kvroute_blocks_total":
			out[f.GetName()] = f
		}
	}
	return out
}

// metricShare is the share of model's series of the family that have label = value, rounded;
// nil when the family has none of model's, or they sum to 0.
func metricShare(fams map[string]*dto.MetricFamily, name, model, label, value string) *float64 {
	part := metricValue(fams, name, model, label, value)
	all := metricValue(fams, name, model, "", "")
	if part == nil || all == nil || *all <= 0 {
		return nil
	}
	r := round2(*part / *all)
	return &r
}

// metricValue sums the family's series of model (and, when label is set, with label = value);
// nil when it has none.
func metricValue(fams map[string]*dto.MetricFamily, name, model, label, value string) *float64 {
	f := fams[name]
	if f == nil {
		return nil
	}
	var sum float64
	found := false
	for _, m := range f.GetMetric() {
		okModel, okLabel := false, label == ""
		for _, lp := range m.GetLabel() {
			switch lp.GetName() {
			case "model":
				okModel = lp.GetValue() == model
			case label:
				okLabel = okLabel || lp.GetValue() == value
			}
		}
		if !okModel || !okLabel {
			continue
		}
		found = true
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	if !found {
		return nil
	}
	return &sum
}

// batchOf is a batch's progress: its rate since it started running, and the time left at it.
func batchOf(b *batchstate.Batch, now time.Time) Batch {
	out := Batch{ID: b.ID, Status: string(b.Status), Model: b.Model, Endpoint: b.Endpoint, Total: b.Counts.Total,
		Completed: b.Counts.Completed, Failed: b.Counts.Failed, Created: b.CreatedAt}
	done := b.Counts.Completed + b.Counts.Failed + b.Counts.Skipped
	if b.InProgressAt > 0 && done > 0 {
		end := now
		if b.Status.Terminal() {
			for _, t := range []int64{b.CompletedAt, b.FailedAt, b.CancelledAt, b.ExpiredAt, b.FinalizingAt} {
				if t > 0 {
					end = time.Unix(t, 0)
					break
				}
			}
		}
		// InProgressAt is in whole seconds: a batch a second old may read as zero seconds old.
		secs := max(end.Sub(time.Unix(b.InProgressAt, 0)).Seconds(), 1)
		out.Rate = round2(float64(done) / secs)
		if left := b.Counts.Total - done; left > 0 && out.Rate > 0 && !b.Status.Terminal() {
			out.ETA = math.Ceil(float64(left) / out.Rate)
		}
	}
	return out
}

// safeURL is u without credentials, query or fragment: what may be shown of an upstream's URL.
func safeURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "(not shown)"
	}
	return (&url.URL{Scheme: p.Scheme, Host: p.Host, Path: p.Path}).String()
}

// endpointName is how the console shows an endpoint's name: a registered backend's endpoint is
// named after its lease (registry.EndpointName), whose id lets its holder change or end it, so
// the id is shown as the same short hash as the backend's lease.
func endpointName(name string) string {
	if lease, ok := strings.CutPrefix(name, registry.EndpointName("")); ok {
		return registry.EndpointName(shortHash(lease))
	}
	return name
}

// shortHash names a secret-bearing id (a lease's) without giving it away.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:4])
}
