package openaipool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stats are requests counted since the process started, for status pages (Olla's
// /internal/status and /internal/stats): the few figures those pages show, read without going
// through Prometheus's families. Requests a caller stopped early are counted, but neither as a
// success nor as a failure.
type Stats struct {
	Requests, Successes, Failures int64
	// Latency is over the finished requests: from the request's start to its last byte.
	LatencyTotal, LatencyMin, LatencyMax time.Duration
	// Bytes counts the response bytes read from the upstreams.
	Bytes int64
	// Last is when the last request finished; zero before any.
	Last time.Time
}

// AvgLatency is the mean latency; 0 before any request.
func (s Stats) AvgLatency() time.Duration {
	if s.Requests == 0 {
		return 0
	}
	return s.LatencyTotal / time.Duration(s.Requests)
}

// statsCounter is Stats kept with atomics: one per endpoint and one per public model name, updated
// once per request as it finishes.
type statsCounter struct {
	requests, successes, failures atomic.Int64
	latency, bytes                atomic.Int64 // nanoseconds, bytes
	min, max                      atomic.Int64 // nanoseconds; min 0 before the first request
	last                          atomic.Int64 // unix nanoseconds
}

// record counts one finished request: ok a success (a status below 500, read to its end), failed
// an upstream failure (5xx, or the body cut short); neither when the caller stopped early.
func (c *statsCounter) record(ok, failed bool, d time.Duration, n int64, now time.Time) {
	c.requests.Add(1)
	switch {
	case ok:
		c.successes.Add(1)
	case failed:
		c.failures.Add(1)
	}
	ns := int64(d)
	c.latency.Add(ns)
	c.bytes.Add(n)
	for {
		m := c.min.Load()
		if (m != 0 && m <= ns) || c.min.CompareAndSwap(m, ns) {
			break
		}
	}
	for {
		m := c.max.Load()
		if m >= ns || c.max.CompareAndSwap(m, ns) {
			break
		}
	}
	c.last.Store(now.UnixNano())
}

func (c *statsCounter) snapshot() Stats {
	s := Stats{Requests: c.requests.Load(), Successes: c.successes.Load(), Failures: c.failures.Load(),
		LatencyTotal: time.Duration(c.latency.Load()), LatencyMin: time.Duration(c.min.Load()),
		LatencyMax: time.Duration(c.max.Load()), Bytes: c.bytes.Load()}
	if l := c.last.Load(); l != 0 {
		s.Last = time.Unix(0, l)
	}
	return s
}

// modelStats holds the per-model counters, by public name: a route takes its model's pointer when
// the table is built, so a request pays no lookup, and a rebuilt table keeps the counts.
type modelStats struct {
	mu sync.Mutex
	m  map[string]*statsCounter
}

func (s *modelStats) of(model string) *statsCounter {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.m[model]
	if c == nil {
		if s.m == nil {
			s.m = map[string]*statsCounter{}
		}
		c = new(statsCounter)
		s.m[model] = c
	}
	return c
}

// ModelStats returns each public model name's counts (every name that was ever routed), by name.
func (u *Pool) ModelStats() map[string]Stats {
	u.models.mu.Lock()
	defer u.models.mu.Unlock()
	out := make(map[string]Stats, len(u.models.m))
	for name, c := range u.models.m {
		out[name] = c.snapshot()
	}
	return out
}
