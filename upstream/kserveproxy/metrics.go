package kserveproxy

import "github.com/prometheus/client_golang/prometheus"

// metrics are per public model and endpoint; requests the gateway refuses before they reach the
// proxy (validation, unknown models) are in the gateway's own nv_inference_* statistics.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
	healthy  *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_kserve_upstream_requests_total",
			Help: "Requests forwarded to KServe upstreams, by public model, endpoint and gRPC code of the attempt (ok, unavailable, invalid_argument, canceled, ...); a failed-over request counts once per endpoint tried.",
		}, []string{"model", "endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_kserve_upstream_request_duration_seconds",
			Help:    "Time from forwarding a request to an upstream to its last response (for decoupled models, the whole stream).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"model", "endpoint"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_kserve_upstream_in_flight_requests",
			Help: "Requests being forwarded to KServe upstreams now.",
		}, []string{"model", "endpoint"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_kserve_upstream_healthy",
			Help: "1 if the KServe endpoint passed its last health check, else 0.",
		}, []string{"endpoint"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.latency, m.inflight, m.healthy}
}

// forget drops an endpoint's series.
func (m *metrics) forget(endpoint string) {
	l := prometheus.Labels{"endpoint": endpoint}
	m.requests.DeletePartialMatch(l)
	m.latency.DeletePartialMatch(l)
	m.inflight.DeletePartialMatch(l)
	m.healthy.DeletePartialMatch(l)
}
