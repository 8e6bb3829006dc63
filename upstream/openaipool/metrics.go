package openaipool

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are per public model and endpoint. Requests rejected before routing (bad body, unknown
// model) are counted with empty labels, so a client cannot mint label values.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	ttft     *prometheus.HistogramVec
	itl      *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
	healthy  *prometheus.GaugeVec
	tokens   *prometheus.CounterVec
	scrapes  *prometheus.CounterVec
}

func newMetrics() *metrics {
	lat := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_openai_requests_total",
			Help: "OpenAI API requests by public model, upstream endpoint and HTTP status code returned to the client (499: client went away, 0: upstream failed mid-response).",
		}, []string{"model", "endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_openai_request_duration_seconds",
			Help:    "Time from request received to the last response byte written.",
			Buckets: lat,
		}, []string{"model", "endpoint"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_openai_time_to_first_token_seconds",
			Help:    "Streaming requests: time from request received to the first response chunk written.",
			Buckets: lat,
		}, []string{"model", "endpoint"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "infergate_openai_inter_token_latency_seconds",
			Help:    "Streaming requests: time between two consecutive response chunks arriving from the upstream.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"model", "endpoint"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_openai_in_flight_requests",
			Help: "Requests being proxied now.",
		}, []string{"model", "endpoint"}),
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_openai_upstream_metrics_scrapes_total",
			Help: "Scrapes of vLLM endpoints' /metrics (their load, for /olla/vllm/health and /metrics and routing) by endpoint and result (ok, error).",
		}, []string{"endpoint", "result"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "infergate_openai_upstream_healthy",
			Help: "1 if the endpoint passed its last health check, else 0.",
		}, []string{"endpoint", "type"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "infergate_openai_tokens_total",
			Help: "Tokens reported in upstream usage objects: a response's own, or a stream's last usage chunk (sent when the client asks for stream_options.include_usage).",
		}, []string{"model", "endpoint", "direction"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.latency, m.ttft, m.itl, m.inflight, m.healthy, m.tokens, m.scrapes}
}

// codeLabel avoids strconv for the common codes.
func codeLabel(code int) string {
	switch code {
	case 200:
		return "200"
	case 400:
		return "400"
	case 404:
		return "404"
	case 500:
		return "500"
	case 502:
		return "502"
	case 503:
		return "503"
	}
	return strconv.Itoa(code)
}
