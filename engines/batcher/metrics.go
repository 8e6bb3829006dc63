package batcher

import "github.com/prometheus/client_golang/prometheus"

// Metrics describe every batcher's queue and batches, by model. Make them once (NewMetrics),
// register Collectors once, and pass them in Options to share them between models.
type Metrics struct {
	pending  *prometheus.GaugeVec
	sizes    *prometheus.HistogramVec
	rejected *prometheus.CounterVec
}

// NewMetrics makes the metrics.
func NewMetrics() *Metrics {
	return &Metrics{
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "infergate_batcher_pending_requests",
			Help: "Requests waiting in a model's dynamic batching queue (Triton's nv_inference_pending_request_count)."}, []string{"model"}),
		sizes: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "infergate_batcher_batch_size",
			Help: "Rows per model execution formed by the dynamic batcher.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}, []string{"model"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_batcher_rejected_total",
			Help: "Requests the dynamic batching queue refused (reason queue_full) or dropped past their queue timeout (reason timeout)."}, []string{"model", "reason"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.pending, m.sizes, m.rejected}
}

// modelMetrics are one model's series, looked up once.
type modelMetrics struct {
	pending           prometheus.Gauge
	sizes             prometheus.Observer
	full, timedOutCnt prometheus.Counter
}

func (m *Metrics) forModel(model string) modelMetrics {
	return modelMetrics{
		pending:     m.pending.WithLabelValues(model),
		sizes:       m.sizes.WithLabelValues(model),
		full:        m.rejected.WithLabelValues(model, "queue_full"),
		timedOutCnt: m.rejected.WithLabelValues(model, "timeout"),
	}
}
