package anthropic

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Request modes.
const (
	modeTranslate = "translate" // translated to OpenAI chat and served by the chat handler
	modeNative    = "native"    // passed to an upstream that speaks /v1/messages
	modeCount     = "count_tokens"
)

// outcome is how a request ended, a label value.
type outcome string

const (
	outcomeOK             outcome = "ok"
	outcomeClientError    outcome = "client_error"    // a 4xx: refused, by the translator or the gateway
	outcomeServerError    outcome = "server_error"    // a 5xx before any answer
	outcomeStreamError    outcome = "stream_error"    // a stream that ended in an error event
	outcomeTranslateError outcome = "translate_error" // an upstream answer that could not be translated
)

func outcomeOf(status int) outcome {
	switch {
	case status == 0 || status < 300:
		return outcomeOK
	case status < 500:
		return outcomeClientError
	}
	return outcomeServerError
}

// Metrics count the Messages API's requests.
type Metrics struct {
	requests          *prometheus.CounterVec
	translationErrors *prometheus.CounterVec
	// the Messages requests (not count_tokens) for Stats
	translated, native, ok, failed, streaming, latency atomic.Int64
}

// Stats are the Messages API's counts since the process started, as a status page shows them
// (Olla's /internal/stats/translators): requests translated to OpenAI chat or passed through to
// an upstream that speaks /v1/messages (native), how they ended, and their latency. count_tokens
// is not counted.
type Stats struct {
	Translated, Native  int64
	Successes, Failures int64
	Streaming           int64
	LatencyTotal        time.Duration
}

// Stats returns the counts.
func (m *Metrics) Stats() Stats {
	return Stats{Translated: m.translated.Load(), Native: m.native.Load(), Successes: m.ok.Load(), Failures: m.failed.Load(),
		Streaming: m.streaming.Load(), LatencyTotal: time.Duration(m.latency.Load())}
}

// message counts one Messages request in Stats: mode (translate or native), how it ended, whether
// it streamed, and when it started.
func (m *Metrics) message(mode string, out outcome, stream bool, start time.Time) {
	if mode == modeNative {
		m.native.Add(1)
	} else {
		m.translated.Add(1)
	}
	if out == outcomeOK {
		m.ok.Add(1)
	} else {
		m.failed.Add(1)
	}
	if stream {
		m.streaming.Add(1)
	}
	m.latency.Add(int64(time.Since(start)))
}

// NewMetrics makes the metrics; register Collectors once.
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_anthropic_requests_total",
			Help: "Anthropic Messages API requests by mode (translate: served as OpenAI chat; native: passed to an upstream's /v1/messages; count_tokens) and outcome (ok, client_error, server_error, stream_error, translate_error, canceled)."},
			[]string{"mode", "outcome"}),
		translationErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_anthropic_translation_errors_total",
			Help: "Translations that failed: request (an Anthropic request refused with a 400), response (an upstream answer that is not a chat completion), stream (an upstream stream that could not be translated)."},
			[]string{"direction"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.translationErrors}
}
