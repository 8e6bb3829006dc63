package gateway

import "sync/atomic"

// Readiness is whether a gateway accepts new work: ready until its Shutdown starts, which turns
// it false for good. The zero value is ready. Create it before the parts that report it (the
// OpenAI surface's /health takes its Ready) and give it to the gateway in Config.Readiness, so
// that nothing built before the gateway needs the gateway itself.
type Readiness struct{ draining atomic.Bool }

// Ready reports whether the gateway accepts new work.
func (r *Readiness) Ready() bool { return !r.draining.Load() }

// drain turns r false: the gateway's Shutdown began.
func (r *Readiness) drain() { r.draining.Store(true) }
