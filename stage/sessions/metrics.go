package sessions

import "github.com/prometheus/client_golang/prometheus"

// Metrics count sessions and their turns, labelled by model (configured names only: a client
// can name only models the gateway serves).
type Metrics struct {
	created, deleted *prometheus.CounterVec
	active           *prometheus.GaugeVec
	turns            *prometheus.CounterVec
	trimmed          *prometheus.CounterVec
	busy             *prometheus.CounterVec
	waits            *prometheus.CounterVec
	storeErrors      *prometheus.CounterVec
}

// Turn results, the values of the turns metric's result label.
const (
	turnStored    = "stored"     // the answer was whole and the turn appended
	turnNotStored = "not_stored" // the answer failed, was cut short, or the client went away
	turnLost      = "lock_lost"  // the turn outlived its lock, or the session was deleted meanwhile
)

// NewMetrics makes the metrics; register Collectors once.
func NewMetrics() *Metrics {
	return &Metrics{
		created: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_sessions_created_total",
			Help: "Chat sessions created."}, []string{"model"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_sessions_deleted_total",
			Help: "Chat sessions deleted by their owner."}, []string{"model"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "infergate_sessions_active",
			Help: "Chat sessions held by this process's in-memory store (expired ones until swept)."}, []string{"model"}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_sessions_turns_total",
			Help: "Session turns sent upstream, by result: stored, not_stored (the answer failed or was cut short), lock_lost."},
			[]string{"model", "result"}),
		trimmed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_sessions_trimmed_tokens_total",
			Help: "Tokens of session history left out of prompts to fit the context window."}, []string{"model"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_sessions_lock_waits_total",
			Help: "Turns that found another turn of the session in progress and waited for it (up to the lock wait)."}, []string{"model"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_sessions_busy_total",
			Help: "Turns refused with 409 because another turn of the session was in progress."}, []string{"model"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "infergate_sessions_store_errors_total",
			Help: "Failed session store calls, by operation."}, []string{"op"}),
	}
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.created, m.deleted, m.active, m.turns, m.trimmed, m.busy, m.waits, m.storeErrors}
}
