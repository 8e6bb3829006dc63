package breaker

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are labelled by endpoint name, which comes from configuration, never from clients.
type metrics struct {
	state        *prometheus.GaugeVec
	transitions  *prometheus.CounterVec
	refused      *prometheus.CounterVec
	redisSeconds *prometheus.HistogramVec
	redisErrors  *prometheus.CounterVec
	degraded     prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_breaker_state",
			Help: "Circuit breaker state per upstream endpoint as this replica knows it: 0 closed, 1 open, 2 half-open.",
		}, []string{"endpoint"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_breaker_transitions_total",
			Help: "Circuit breaker state changes this replica learned of, by endpoint and states.",
		}, []string{"endpoint", "from", "to"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_breaker_refused_total",
			Help: "Requests the circuit breaker refused, by endpoint and reason (open, half_open: probes out, cooldown: after a 429).",
		}, []string{"endpoint", "reason"}),
		redisSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_breaker_redis_duration_seconds",
			Help:    "Redis calls of the shared circuit breaker, by operation (flush, acquire, probe, sync).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"op"}),
		redisErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_breaker_redis_errors_total",
			Help: "Failed Redis calls of the shared circuit breaker, by operation.",
		}, []string{"op"}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "infergate_breaker_redis_degraded",
			Help: "1 while Redis is unreachable and this replica breaks circuits on its own outcomes only.",
		}),
	}
}

// notifier reports state changes to the metrics and the user's hook.
type notifier struct {
	m    *metrics
	hook func(endpoint string, from, to State)
	// active, when set, mutes changes while it reports false: the Redis breaker's fallback
	// speaks only while it decides.
	active func() bool
}

func (n *notifier) changed(endpoint string, from, to State) {
	if from == to || (n.active != nil && !n.active()) {
		return
	}
	n.m.state.WithLabelValues(endpoint).Set(float64(to))
	n.m.transitions.WithLabelValues(endpoint, from.String(), to.String()).Inc()
	if n.hook != nil {
		n.hook(endpoint, from, to)
	}
}

func (n *notifier) refuse(e *OpenError) error {
	reason := "open"
	switch {
	case e.Throttled:
		reason = "cooldown"
	case e.State == HalfOpen:
		reason = "half_open"
	}
	n.m.refused.WithLabelValues(e.Endpoint, reason).Inc()
	return e
}
