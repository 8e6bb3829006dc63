package slots_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/slots"
	"github.com/redis/rueidis"
)

// impl builds n semaphores that share their slots: n processes for Redis; for Local, whose
// slots are this process's, the same one n times.
type impl struct {
	name string
	new  func(t *testing.T, l slots.Limits, n int) []slots.Semaphore
}

func impls() []impl {
	return []impl{
		{"local", func(t *testing.T, l slots.Limits, n int) []slots.Semaphore {
			s := slots.NewLocal(l)
			out := make([]slots.Semaphore, n)
			for i := range out {
				out[i] = s
			}
			return out
		}},
		{"redis", func(t *testing.T, l slots.Limits, n int) []slots.Semaphore {
			srv := redistest.Start(t)
			out := make([]slots.Semaphore, n)
			for i := range out {
				out[i] = newRedis(t, srv.Addr, l, slots.RedisOptions{})
			}
			return out
		}},
	}
}

func newRedis(t *testing.T, addr string, l slots.Limits, o slots.RedisOptions) *slots.Redis {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	s := slots.NewRedis(c, l, o)
	t.Cleanup(func() { s.Close(); c.Close() })
	return s
}

// gauge tracks requests in flight and the most seen at once.
type gauge struct{ now, peak atomic.Int64 }

func (g *gauge) in() {
	n := g.now.Add(1)
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
}

func (g *gauge) out() { g.now.Add(-1) }

// TestBoundAcrossHolders: many requests through three holders never have more than the limit
// in flight together, and do reach it (the bound does not starve the upstream).
func TestBoundAcrossHolders(t *testing.T) {
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			const limit = 5
			sems := im.new(t, slots.Limits{Default: limit}, 3)
			var g gauge
			var done atomic.Int64
			var wg sync.WaitGroup
			for i := range 30 {
				s := sems[i%len(sems)]
				wg.Go(func() {
					for range 15 {
						release, err := s.Acquire(t.Context(), "llama")
						if err != nil {
							t.Error(err)
							return
						}
						g.in()
						time.Sleep(2 * time.Millisecond)
						g.out()
						release()
						done.Add(1)
					}
				})
			}
			wg.Wait()
			if done.Load() != 30*15 {
				t.Fatalf("%d requests done, want %d", done.Load(), 30*15)
			}
			if p := g.peak.Load(); p != limit {
				t.Fatalf("peak in flight %d, want exactly the limit %d", p, limit)
			}
		})
	}
}

// TestAcquireHonoursContext: a full key makes Acquire wait until ctx ends; the slot freed later
// goes to the next caller.
func TestAcquireHonoursContext(t *testing.T) {
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			sems := im.new(t, slots.Limits{Default: 1}, 2)
			release, err := sems[0].Acquire(t.Context(), "llama")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
			defer cancel()
			if _, err := sems[1].Acquire(ctx, "llama"); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire on a full key: %v, want the context's deadline", err)
			}
			release()
			release() // twice is once
			ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			r2, err := sems[1].Acquire(ctx, "llama")
			if err != nil {
				t.Fatalf("Acquire after the release: %v", err)
			}
			r2()
		})
	}
}

// TestLimitsByKey: a key's own limit applies to it alone.
func TestLimitsByKey(t *testing.T) {
	for _, im := range impls() {
		t.Run(im.name, func(t *testing.T) {
			sems := im.new(t, slots.Limits{Default: 1, ByKey: map[string]int{"big": 3}}, 2)
			for i := range 3 {
				if _, err := sems[i%2].Acquire(t.Context(), "big"); err != nil {
					t.Fatalf("slot %d of big: %v", i, err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
			defer cancel()
			if _, err := sems[0].Acquire(ctx, "big"); err == nil {
				t.Fatal("a fourth slot of big was granted, limit 3")
			}
			if _, err := sems[1].Acquire(t.Context(), "small"); err != nil {
				t.Fatalf("small, with big full: %v", err)
			}
			ctx, cancel = context.WithTimeout(t.Context(), 150*time.Millisecond)
			defer cancel()
			if _, err := sems[0].Acquire(ctx, "small"); err == nil {
				t.Fatal("a second slot of small was granted, default limit 1")
			}
		})
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := (slots.Limits{Default: 4, ByKey: map[string]int{"a": 0}}).Validate(); err == nil {
		t.Fatal("a zero limit for a key passed")
	}
	if err := (slots.Limits{Default: -1}).Validate(); err == nil {
		t.Fatal("a negative default passed")
	}
	if err := (slots.Limits{ByKey: map[string]int{"a": 2}}).Validate(); err != nil {
		t.Fatal(err)
	}
	if n := (slots.Limits{}).Of("x"); n != 1 {
		t.Fatalf("no limit gives %d slots, want 1", n)
	}
}
