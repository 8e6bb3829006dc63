package ratelimit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts decisions and Redis round trips. One Metrics may be shared by every limiter of
// a process (register its Collectors once); a nil *Metrics records nothing.
type Metrics struct {
	decisions    *prometheus.CounterVec
	redisLatency prometheus.Histogram
	redisErrors  *prometheus.CounterVec
	redisUp      prometheus.Gauge

	// Resolved once: the hot path does no label lookups.
	byStore [numStores][numResults]prometheus.Counter
	timeout prometheus.Counter
	failed  prometheus.Counter

	redis bool // a Redis limiter counts here: its collectors are registered too
}

type store uint8

const (
	storeLocal    store = iota // a Local limiter's own decision
	storeRedis                 // decided by Redis
	storeFallback              // a Redis limiter decided locally because Redis failed (FailOpen)
	numStores
)

type result uint8

const (
	resultAllowed result = iota
	resultDenied
	resultTooLarge
	resultUnavailable // FailClosed refused because Redis failed
	numResults
)

// NewMetrics returns the collectors, not yet registered.
func NewMetrics() *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_ratelimit_decisions_total",
			Help: "Rate limit decisions by where they were made (local: in-process limiter; redis; fallback: in-process because Redis failed) and result (allowed, denied, too_large: cost above the burst, unavailable: Redis failed and the policy is fail-closed).",
		}, []string{"store", "result"}),
		redisLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "infergate_ratelimit_redis_duration_seconds",
			Help:    "Time of one rate limit script call to Redis, failed ones included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_ratelimit_redis_errors_total",
			Help: "Rate limit script calls to Redis that failed, by kind (timeout: no answer within the limiter's timeout; error: any other failure).",
		}, []string{"kind"}),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_ratelimit_redis_up",
			Help: "1 while rate limit decisions go to Redis, 0 while Redis is considered down and the failure policy applies.",
		}),
	}
	stores := [numStores]string{"local", "redis", "fallback"}
	results := [numResults]string{"allowed", "denied", "too_large", "unavailable"}
	for s := range numStores {
		for r := range numResults {
			m.byStore[s][r] = m.decisions.WithLabelValues(stores[s], results[r])
		}
	}
	m.timeout = m.redisErrors.WithLabelValues("timeout")
	m.failed = m.redisErrors.WithLabelValues("error")
	m.redisUp.Set(1)
	return m
}

// Collectors returns the collectors to register: the Redis ones only once a Redis limiter counts
// here (NewRedis), so that a process without Redis does not report it up.
func (m *Metrics) Collectors() []prometheus.Collector {
	if !m.redis {
		return []prometheus.Collector{m.decisions}
	}
	return []prometheus.Collector{m.decisions, m.redisLatency, m.redisErrors, m.redisUp}
}

func (m *Metrics) decision(s store, d Decision) {
	if m == nil {
		return
	}
	r := resultAllowed
	switch {
	case d.TooLarge:
		r = resultTooLarge
	case !d.Allowed:
		r = resultDenied
	}
	m.byStore[s][r].Inc()
}

func (m *Metrics) unavailable() {
	if m != nil {
		m.byStore[storeRedis][resultUnavailable].Inc()
	}
}

func (m *Metrics) redisCall(d time.Duration, err error, timedOut bool) {
	if m == nil {
		return
	}
	m.redisLatency.Observe(d.Seconds())
	switch {
	case err == nil:
	case timedOut:
		m.timeout.Inc()
	default:
		m.failed.Inc()
	}
}

func (m *Metrics) setRedisUp(up bool) {
	if m == nil {
		return
	}
	if up {
		m.redisUp.Set(1)
	} else {
		m.redisUp.Set(0)
	}
}
