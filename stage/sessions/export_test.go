package sessions

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// Counters of the metrics, for tests.
func (m *Metrics) Turns(model, result string) float64 {
	return value(m.turns.WithLabelValues(model, result))
}
func (m *Metrics) Trimmed(model string) float64  { return value(m.trimmed.WithLabelValues(model)) }
func (m *Metrics) Busy(model string) float64     { return value(m.busy.WithLabelValues(model)) }
func (m *Metrics) Waits(model string) float64    { return value(m.waits.WithLabelValues(model)) }
func (m *Metrics) StoreErrors(op string) float64 { return value(m.storeErrors.WithLabelValues(op)) }
func (m *Metrics) Active(model string) float64   { return value(m.active.WithLabelValues(model)) }
func (m *Metrics) Created(model string) float64  { return value(m.created.WithLabelValues(model)) }
func (m *Metrics) Deleted(model string) float64  { return value(m.deleted.WithLabelValues(model)) }
