package responses

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count the Responses API's requests.
type Metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	storeErrors prometheus.Counter
	truncations prometheus.Counter
}

// NewMetrics makes the metrics; register Collectors once.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_responses_requests_total",
			Help: "Responses API requests by operation (create, retrieve, delete, input_items, cancel) and outcome (ok, refused: a 4xx from the gateway's own checks, upstream_error, error, stream_error)."},
			[]string{"op", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "infergate_responses_create_seconds",
			Help:    "POST /v1/responses served, by mode (translate: onto the gateway's chat completions; native: the upstream's /v1/responses), outcome and whether it streamed.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)},
			[]string{"mode", "outcome", "stream"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "infergate_responses_store_errors_total",
			Help: "Responses asked to be stored that were not (the store failed, or the conversation passed its bound on one record): their answer went out, a follow-up naming them gets previous_response_not_found."}),
		truncations: prometheus.NewCounter(prometheus.CounterOpts{Name: "infergate_responses_truncations_total",
			Help: "Requests with truncation auto sent again with the oldest turns of their conversation left out, after the model's context refused them."}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.storeErrors, m.truncations}
}

func (m *Metrics) observe(mode, outcome string, stream bool, start, end time.Time) {
	m.duration.WithLabelValues(mode, outcome, strconv.FormatBool(stream)).Observe(end.Sub(start).Seconds())
}
