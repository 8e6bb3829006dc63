package gateway

import (
	"github.com/infergate/infergate/engines"
	"github.com/prometheus/client_golang/prometheus"
)

// collector publishes each model's statistics at scrape time, so the request path only bumps the
// atomic counters it keeps anyway for ModelStatistics. Counter names follow Triton's nv_inference_*.
type collector struct {
	reg *engines.Registry

	success, failure, count, execCount             *prometheus.Desc
	requestUS, queueUS, inputUS, inferUS, outputUS *prometheus.Desc
	latency                                        *prometheus.Desc
}

func newCollector(reg *engines.Registry) *collector {
	labels := []string{"model", "version"}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, labels, nil) }
	return &collector{
		reg:       reg,
		success:   d("nv_inference_request_success", "Number of successful inference requests."),
		failure:   d("nv_inference_request_failure", "Number of failed inference requests."),
		count:     d("nv_inference_count", "Number of inferences performed (a batch of n counts n)."),
		execCount: d("nv_inference_exec_count", "Number of model executions performed."),
		requestUS: d("nv_inference_request_duration_us", "Cumulative inference request duration in microseconds."),
		queueUS:   d("nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds."),
		inputUS:   d("nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds."),
		inferUS:   d("nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds."),
		outputUS:  d("nv_inference_compute_output_duration_us", "Cumulative compute output duration in microseconds."),
		latency:   d("infergate_request_duration_seconds", "Inference request latency, successful and failed."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.success, c.failure, c.count, c.execCount, c.requestUS, c.queueUS, c.inputUS, c.inferUS, c.outputUS, c.latency} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, e := range c.reg.Entries() {
		s := &e.Stats
		l := []string{e.Name(), e.Version()}
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
		}
		counter(c.success, float64(s.Success.Count()))
		counter(c.failure, float64(s.Fail.Count()))
		counter(c.count, float64(s.Inferences()))
		counter(c.execCount, float64(s.Executions()))
		counter(c.requestUS, float64((s.Success.Total() + s.Fail.Total()).Microseconds()))
		counter(c.queueUS, float64(s.Queue.Total().Microseconds()))
		counter(c.inputUS, float64(s.ComputeInput.Total().Microseconds()))
		counter(c.inferUS, float64(s.ComputeInfer.Total().Microseconds()))
		counter(c.outputUS, float64(s.ComputeOutput.Total().Microseconds()))
		buckets, n, sum := s.Histogram()
		ch <- prometheus.MustNewConstHistogram(c.latency, n, sum, buckets, l...)
	}
}
