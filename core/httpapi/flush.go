package httpapi

import (
	"errors"
	"net/http"
)

// EventSender writes a stream's events to a client, each write flushed at once, and remembers
// the client's first failure: once a write or flush failed, it writes nothing more and returns
// that error. The surfaces that translate a stream (Anthropic's Messages, OpenAI's Responses)
// send through one. The zero EventSender is ready: pass it the same writer at every call. It is
// for one goroutine.
type EventSender struct {
	flush func() error // w's, found on first use: NewResponseController allocates per call
	err   error
}

// Send writes p to w (nothing when p is empty) and flushes it; a writer that cannot flush is
// written to all the same.
func (s *EventSender) Send(w http.ResponseWriter, p []byte) error {
	if s.err != nil || len(p) == 0 {
		return s.err
	}
	if _, s.err = w.Write(p); s.err != nil {
		return s.err
	}
	if s.flush == nil {
		s.flush = http.NewResponseController(w).Flush
	}
	if err := s.flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.err = err
	}
	return s.err
}

// Err is the client's first failure, nil while there was none.
func (s *EventSender) Err() error { return s.err }
