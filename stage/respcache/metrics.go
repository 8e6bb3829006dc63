package respcache

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the response caches of every model (label model: a configured name, never a
// client's). Make them once with NewMetrics, pass them to every model's Options, and register
// Collectors once.
type Metrics struct {
	requests     *prometheus.CounterVec
	bypasses     *prometheus.CounterVec
	stores       *prometheus.CounterVec
	similarity   *prometheus.HistogramVec
	embedSeconds *prometheus.HistogramVec
	storeErrors  *prometheus.CounterVec
	stats        *statsCollector
}

// NewMetrics makes the metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_respcache_requests_total",
			Help: "Chat completion and completion requests by cache result: hit (exact), semantic_hit, miss (asked upstream), bypass (not looked up; see infergate_respcache_bypass_total)."},
			[]string{"model", "result"}),
		bypasses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_respcache_bypass_total",
			Help: "Requests that bypassed the cache, by reason: temperature, n, no-cache, store (the store failed), path, body, too-deep, stored (a stored answer that does not replay as a stream; it also counted as a hit)."},
			[]string{"model", "reason"}),
		stores: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_respcache_answers_total",
			Help: "Upstream answers of cacheable requests by outcome: stored, or why not (status, partial, too_large, finish_reason, tool_calls, invalid, store_error, no_store)."},
			[]string{"model", "outcome"}),
		similarity: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "infergate_respcache_similarity",
			Help:    "Cosine similarity of the nearest cached entry to a semantic lookup, hit or not (for tuning the threshold).",
			Buckets: []float64{.5, .6, .7, .8, .85, .9, .925, .95, .96, .97, .98, .99, .995, 1}},
			[]string{"model"}),
		embedSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "infergate_respcache_embed_seconds",
			Help:    "Time to embed a request's text for a semantic lookup or store.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16)},
			[]string{"model"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_respcache_store_errors_total",
			Help: "Failed store operations (get, nearest, put, flush) and embeddings (embed): the request bypassed the cache, or its answer was not stored."},
			[]string{"model", "op"}),
		stats: &statsCollector{
			stores: map[string]Store{},
			entries: prometheus.NewDesc("infergate_respcache_entries",
				"Entries in the model's cache (a Redis store: those this replica indexes).", []string{"model"}, nil),
			bytes: prometheus.NewDesc("infergate_respcache_bytes",
				"Bytes of the model's cache entries, approximately (a Redis store: those this replica indexes).", []string{"model"}, nil),
			evictions: prometheus.NewDesc("infergate_respcache_evictions_total",
				"Entries evicted to keep the model's cache within its bounds.", []string{"model"}, nil),
		},
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.bypasses, m.stores, m.similarity, m.embedSeconds, m.storeErrors, m.stats}
}

// modelMetrics are one model's series, looked up once.
type modelMetrics struct {
	hit, semanticHit, miss, bypass prometheus.Counter
	bypasses, stores, storeErrors  *prometheus.CounterVec
	similarity, embedSeconds       prometheus.Observer
	model                          string
}

func (m *Metrics) forModel(model string, s Store) *modelMetrics {
	m.stats.set(model, s)
	return &modelMetrics{
		hit:          m.requests.WithLabelValues(model, "hit"),
		semanticHit:  m.requests.WithLabelValues(model, "semantic_hit"),
		miss:         m.requests.WithLabelValues(model, "miss"),
		bypass:       m.requests.WithLabelValues(model, "bypass"),
		bypasses:     m.bypasses,
		stores:       m.stores,
		storeErrors:  m.storeErrors,
		similarity:   m.similarity.WithLabelValues(model),
		embedSeconds: m.embedSeconds.WithLabelValues(model),
		model:        model,
	}
}

func (mm *modelMetrics) bypassed(reason string) {
	mm.bypass.Inc()
	mm.bypasses.WithLabelValues(mm.model, reason).Inc()
}

func (mm *modelMetrics) answer(outcome string) { mm.stores.WithLabelValues(mm.model, outcome).Inc() }

func (mm *modelMetrics) storeError(op string) { mm.storeErrors.WithLabelValues(mm.model, op).Inc() }

// statsCollector reads every model's store counts when scraped, so the request path pays
// nothing for them.
type statsCollector struct {
	mu                        sync.Mutex
	stores                    map[string]Store
	entries, bytes, evictions *prometheus.Desc
}

func (c *statsCollector) set(model string, s Store) {
	c.mu.Lock()
	c.stores[model] = s
	c.mu.Unlock()
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.bytes
	ch <- c.evictions
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for model, s := range c.stores {
		st := s.Stats()
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.Entries), model)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes), model)
		ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(st.Evictions), model)
	}
}
