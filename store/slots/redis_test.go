package slots_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/slots"
	"github.com/redis/rueidis"
)

// TestRedisDeadHolderSlotsReturn: the slots of a process that died without giving them back
// return to the others when its lease ends, not before.
func TestRedisDeadHolderSlotsReturn(t *testing.T) {
	srv := redistest.Start(t)
	const lease = 600 * time.Millisecond
	l := slots.Limits{Default: 2}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	dead := slots.NewRedis(c, l, slots.RedisOptions{Lease: lease})
	for range 2 {
		if _, err := dead.Acquire(t.Context(), "llama"); err != nil {
			t.Fatal(err)
		}
	}
	// It dies: its connection goes first, so it cannot give the slots back at Close.
	c.Close()
	dead.Close()
	died := time.Now()

	alive := newRedis(t, srv.Addr, l, slots.RedisOptions{Lease: lease})
	ctx, cancel := context.WithTimeout(t.Context(), lease/3)
	defer cancel()
	if _, err := alive.Acquire(ctx, "llama"); err == nil {
		t.Fatal("a slot of the dead holder was granted before its lease ended")
	}
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	for range 2 {
		if _, err := alive.Acquire(ctx, "llama"); err != nil {
			t.Fatalf("the dead holder's slots did not return: %v", err)
		}
	}
	if since := time.Since(died); since < lease/2 {
		t.Fatalf("slots returned %v after the holder died, lease %v", since, lease)
	}
}

// TestRedisCloseGivesSlotsBack: a holder that stops cleanly frees its slots at once.
func TestRedisCloseGivesSlotsBack(t *testing.T) {
	srv := redistest.Start(t)
	l := slots.Limits{Default: 1}
	first := newRedis(t, srv.Addr, l, slots.RedisOptions{Lease: time.Hour})
	release, err := first.Acquire(t.Context(), "llama")
	if err != nil {
		t.Fatal(err)
	}
	release()
	first.Close()
	second := newRedis(t, srv.Addr, l, slots.RedisOptions{Lease: time.Hour})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := second.Acquire(ctx, "llama"); err != nil {
		t.Fatalf("the slot of a closed holder did not come back: %v", err)
	}
}

// TestRedisFairShare: a holder that came first and keeps every slot busy gives half of them up
// to a second hungry holder, and the two never exceed the limit together.
func TestRedisFairShare(t *testing.T) {
	srv := redistest.Start(t)
	const limit = 8
	l := slots.Limits{Default: limit}
	a := newRedis(t, srv.Addr, l, slots.RedisOptions{})
	b := newRedis(t, srv.Addr, l, slots.RedisOptions{})
	var total, ga, gb gauge
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	load := func(s *slots.Redis, g *gauge) {
		for range 2 * limit {
			wg.Go(func() {
				for ctx.Err() == nil {
					release, err := s.Acquire(ctx, "llama")
					if err != nil {
						return
					}
					g.in()
					total.in()
					time.Sleep(3 * time.Millisecond)
					total.out()
					g.out()
					release()
				}
			})
		}
	}
	load(a, &ga)
	deadline := time.Now().Add(5 * time.Second)
	for ga.peak.Load() < limit && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p := ga.peak.Load(); p != limit {
		t.Fatalf("the only holder reached %d in flight, want the limit %d", p, limit)
	}
	load(b, &gb)
	for gb.peak.Load() < limit/2 && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if p := gb.peak.Load(); p < limit/2 {
		t.Fatalf("the second holder reached %d in flight, want its share %d", p, limit/2)
	}
	if p := total.peak.Load(); p > limit {
		t.Fatalf("%d in flight across both holders, limit %d", p, limit)
	}
}

// TestRedisOutage: while Redis is down a waiting request waits (nothing is granted without it);
// when Redis is back the request runs.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedis(t, srv.Addr, slots.Limits{Default: 2}, slots.RedisOptions{})
	srv.Kill()
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		release, err := s.Acquire(ctx, "llama")
		if err == nil {
			release()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Acquire returned while Redis was down: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	srv.Restart()
	if err := <-got; err != nil {
		t.Fatalf("Acquire after Redis came back: %v", err)
	}
}
