package batch

import (
	"time"

	"github.com/infergate/infergate/store/batchstate"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the batch service's and workers' Prometheus metrics. One Metrics may serve a
// service and a worker in one process.
type Metrics struct {
	queued       prometheus.Counter
	inFlight     prometheus.Gauge
	slotWaiting  prometheus.Gauge
	done         *prometheus.CounterVec
	lineSeconds  prometheus.Histogram
	retries      prometheus.Counter
	yields       prometheus.Counter
	deadLettered prometheus.Counter
	batches      *prometheus.CounterVec
	orphans      prometheus.Counter
}

// NewMetrics returns unregistered metrics; register Collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		queued: prometheus.NewCounter(prometheus.CounterOpts{Name: "infergate_batch_lines_queued_total",
			Help: "Batch lines published to the requests topic."}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "infergate_batch_lines_in_flight",
			Help: "Batch lines this process is sending upstream now."}),
		slotWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Name: "infergate_batch_lines_waiting_for_slot",
			Help: "Batch lines this process holds that wait for a slot of batch.concurrency (shared through Redis when configured)."}),
		done: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_batch_lines_done_total",
			Help: "Batch lines this process finished, by result: completed (2xx), failed, skipped (batch cancelled)."}, []string{"result"}),
		lineSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "infergate_batch_line_duration_seconds",
			Help: "Time from a line's last try to its result, waits for the guard included (earlier tries went through the retries topic).", Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12)}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "infergate_batch_line_retries_total",
			Help: "Attempts of batch lines beyond their first."}),
		yields: prometheus.NewCounter(prometheus.CounterOpts{Name: "infergate_batch_line_yields_total",
			Help: "Times a batch line waited because the guard held batch work back (load shedding, rate limits)."}),
		deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "infergate_batch_lines_dead_lettered_total",
			Help: "Batch lines that kept failing and went to the dead-letter topic."}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_batch_batches_total",
			Help: "Batches that reached a status here, by status."}, []string{"status"}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{Name: "infergate_batch_orphan_files_removed_total",
			Help: "Output and error files that a finalization wrote but never committed (its replica died), removed here."}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.queued, m.inFlight, m.slotWaiting, m.done, m.lineSeconds, m.retries, m.yields, m.deadLettered, m.batches, m.orphans}
}

func (m *Metrics) lineDone(kind batchstate.ResultKind, d time.Duration) {
	m.done.WithLabelValues(resultLabel(kind)).Inc()
	if kind != batchstate.Skipped {
		m.lineSeconds.Observe(d.Seconds())
	}
}

func resultLabel(k batchstate.ResultKind) string {
	switch k {
	case batchstate.Output:
		return "completed"
	case batchstate.Error:
		return "failed"
	}
	return "skipped"
}
