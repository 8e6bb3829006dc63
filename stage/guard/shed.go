package guard

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Priority orders waiting requests: online work is admitted before batch work.
type Priority int

const (
	// Online is interactive traffic: every surface's default.
	Online Priority = iota
	// Batch is offline work (batch jobs): it waits while online requests wait, and never holds more
	// than ShedderConfig.BatchShare of the global capacity.
	Batch
)

// Load-shedding errors. Both carry a suggested retry delay (see RetryAfter).
var (
	// ErrOverloaded: every slot is busy and the wait queue is full (HTTP 429, RESOURCE_EXHAUSTED).
	ErrOverloaded = errors.New("the gateway is overloaded; retry later")
	// ErrQueueTimeout: the request waited QueueTimeout for a slot (HTTP 503, UNAVAILABLE).
	ErrQueueTimeout = errors.New("timed out waiting for capacity; retry later")
)

// ShedderConfig bounds the requests in flight. Zero values mean no bound.
type ShedderConfig struct {
	// MaxInFlight bounds the requests being served at once, all models together.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxInFlightPerModel bounds each model's requests in flight; Models overrides it per model.
	MaxInFlightPerModel int            `yaml:"max_in_flight_per_model"`
	Models              map[string]int `yaml:"models"`
	// MaxQueue bounds the requests waiting for a slot; beyond it requests are refused at once.
	// Zero means requests never wait.
	MaxQueue int `yaml:"max_queue"`
	// QueueTimeout bounds one request's wait; default 1 s.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// BatchShare is the part of MaxInFlight batch requests may hold together; default 0.5.
	BatchShare float64 `yaml:"batch_share"`
}

// Shedder admits requests while capacity lasts, queues a bounded number for a bounded time, and
// refuses the rest, so an overloaded gateway answers "retry later" at once instead of slowing
// every request down.
type Shedder struct {
	cfg      ShedderConfig
	batchMax int

	mu       sync.Mutex
	inFlight int
	batch    int
	models   map[string]int
	waiting  [2][]*waiter // by priority, oldest first
	nWaiting int
}

type waiter struct {
	model    string
	priority Priority
	ready    chan struct{} // closed when the slot was handed over
	granted  bool
}

// NewShedder returns a shedder; a zero config admits everything without locking.
func NewShedder(cfg ShedderConfig) *Shedder {
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = time.Second
	}
	if cfg.BatchShare <= 0 || cfg.BatchShare > 1 {
		cfg.BatchShare = 0.5
	}
	s := &Shedder{cfg: cfg, models: map[string]int{}}
	if cfg.MaxInFlight > 0 {
		s.batchMax = max(1, int(float64(cfg.MaxInFlight)*cfg.BatchShare))
	}
	return s
}

// Bounded reports whether the shedder limits anything.
func (s *Shedder) Bounded() bool {
	return s.cfg.MaxInFlight > 0 || s.cfg.MaxInFlightPerModel > 0 || len(s.cfg.Models) > 0
}

func (s *Shedder) modelMax(model string) int {
	if n, ok := s.cfg.Models[model]; ok {
		return n
	}
	return s.cfg.MaxInFlightPerModel
}

// fits reports whether a request may take a slot now; s.mu is held.
func (s *Shedder) fits(model string, p Priority) bool {
	if s.cfg.MaxInFlight > 0 && s.inFlight >= s.cfg.MaxInFlight {
		return false
	}
	if p == Batch && s.batchMax > 0 && s.batch >= s.batchMax {
		return false
	}
	if m := s.modelMax(model); m > 0 && s.models[model] >= m {
		return false
	}
	return true
}

func (s *Shedder) take(model string, p Priority) {
	s.inFlight++
	s.models[model]++
	if p == Batch {
		s.batch++
	}
}

// Acquire takes a slot for a request to model, waiting up to QueueTimeout when none is free and
// the queue has room. release must be called once when the request is done. The error is
// ErrOverloaded, ErrQueueTimeout or ctx's.
func (s *Shedder) Acquire(ctx context.Context, model string, p Priority) (release func(), err error) {
	if !s.Bounded() {
		return func() {}, nil
	}
	s.mu.Lock()
	if s.nWaiting == 0 && s.fits(model, p) {
		s.take(model, p)
		s.mu.Unlock()
		return s.releaser(model, p), nil
	}
	// Join the queue and let grant decide: it serves older and higher-priority waiters first,
	// but one whose model is at its bound does not hold up the others.
	w := &waiter{model: model, priority: p, ready: make(chan struct{})}
	s.waiting[p] = append(s.waiting[p], w)
	s.nWaiting++
	s.grant()
	if w.granted {
		s.mu.Unlock()
		return s.releaser(model, p), nil
	}
	if s.nWaiting > s.cfg.MaxQueue {
		s.remove(w)
		s.mu.Unlock()
		return nil, ErrOverloaded
	}
	s.mu.Unlock()

	t := time.NewTimer(s.cfg.QueueTimeout)
	defer t.Stop()
	select {
	case <-w.ready:
		return s.releaser(model, p), nil
	case <-t.C:
		err = ErrQueueTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	if w.granted { // handed a slot just as the wait ended: give it back
		s.mu.Unlock()
		s.releaser(model, p)()
		return nil, err
	}
	s.remove(w)
	s.mu.Unlock()
	return nil, err
}

func (s *Shedder) remove(w *waiter) {
	q := s.waiting[w.priority]
	for i, x := range q {
		if x == w {
			s.waiting[w.priority] = append(q[:i:i], q[i+1:]...)
			s.nWaiting--
			return
		}
	}
}

func (s *Shedder) releaser(model string, p Priority) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.inFlight--
			if s.models[model]--; s.models[model] == 0 {
				delete(s.models, model)
			}
			if p == Batch {
				s.batch--
			}
			s.grant()
			s.mu.Unlock()
		})
	}
}

// grant hands free slots to waiters, online ones first, oldest first; a waiter whose model is
// at its bound does not block others behind it. s.mu is held.
func (s *Shedder) grant() {
	for p := Online; p <= Batch; p++ {
		for i := 0; i < len(s.waiting[p]); {
			w := s.waiting[p][i]
			if !s.fits(w.model, p) {
				if s.cfg.MaxInFlight > 0 && s.inFlight >= s.cfg.MaxInFlight {
					return // nothing else fits either
				}
				i++
				continue
			}
			s.waiting[p] = append(s.waiting[p][:i:i], s.waiting[p][i+1:]...)
			s.nWaiting--
			s.take(w.model, p)
			w.granted = true
			close(w.ready)
		}
		if len(s.waiting[Online]) > 0 {
			return // batch waits while online requests wait
		}
	}
}

// RetryAfter is the delay suggested to a client refused by the shedder.
func (s *Shedder) RetryAfter() time.Duration {
	return max(s.cfg.QueueTimeout, time.Second)
}

// ShedderStats is a snapshot of a shedder's load.
type ShedderStats struct {
	InFlight, Batch, Waiting int
}

// Stats returns the current load, for metrics and the admin endpoint.
func (s *Shedder) Stats() ShedderStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ShedderStats{InFlight: s.inFlight, Batch: s.batch, Waiting: s.nWaiting}
}
