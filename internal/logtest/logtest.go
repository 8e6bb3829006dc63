// Package logtest captures what a component logs, for tests that assert on its log lines: a Sink
// that a slog handler writes to from any goroutine, read back as text or as one JSON record per
// line, and a Clock moved by hand for components that take one.
package logtest

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Sink collects log output; it is safe for concurrent writes.
type Sink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *Sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// String is everything written so far.
func (s *Sink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// JSON returns a logger writing JSON records, Debug and up, to s.
func (s *Sink) JSON() *slog.Logger {
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Records decodes every line written as one JSON record, in order.
func (s *Sink) Records(tb testing.TB) []map[string]any {
	tb.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(s.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			tb.Fatalf("logtest: a line that is not a JSON record: %v: %s", err, l)
		}
		out = append(out, m)
	}
	return out
}

// Clock is a fake clock moved by hand; the zero value starts at the zero time.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
