package memrelease

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var sink []byte

// TestReleaseAfterBurst: no release while the process allocates nothing, one once a burst of
// allocation is followed by an idle interval, and none while allocation goes on.
func TestReleaseAfterBurst(t *testing.T) {
	var releases atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const interval = 100 * time.Millisecond
	go Run(ctx, Options{Interval: interval, IdleBytes: 4 << 20, BusyBytes: 32 << 20, Release: func() { releases.Add(1) }})

	time.Sleep(6 * interval)
	if n := releases.Load(); n != 0 {
		t.Fatalf("%d releases before any load", n)
	}
	// Steady allocation: never idle, so no release however much is allocated.
	for end := time.Now().Add(10 * interval); time.Now().Before(end); {
		sink = make([]byte, 64<<10)
	}
	if n := releases.Load(); n != 0 {
		t.Fatalf("%d releases while allocating", n)
	}
	// Then idle: one release, and no second one while idle goes on.
	sink = nil
	deadline := time.Now().Add(5 * time.Second)
	for releases.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(interval)
	}
	if n := releases.Load(); n != 1 {
		t.Fatalf("%d releases once idle after a burst, want 1", n)
	}
	time.Sleep(6 * interval)
	if n := releases.Load(); n != 1 {
		t.Fatalf("%d releases while idle, want still 1", n)
	}
	runtime.KeepAlive(sink)
}

// TestReleaseAgainWhenGoroutinesEnd: a release made while a burst's connections were still
// open (their goroutines parked, allocating nothing) is made again once they have ended, since
// what they held is free only then; and only once.
func TestReleaseAgainWhenGoroutinesEnd(t *testing.T) {
	var releases atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const interval = 100 * time.Millisecond
	hold := make(chan struct{})
	var ended sync.WaitGroup
	for range 400 {
		ended.Go(func() { <-hold })
	}
	go Run(ctx, Options{Interval: interval, IdleBytes: 4 << 20, BusyBytes: 32 << 20, Release: func() { releases.Add(1) }})
	for end := time.Now().Add(5 * interval); time.Now().Before(end); {
		sink = make([]byte, 64<<10)
	}
	sink = nil
	waitFor := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for releases.Load() < n && time.Now().Before(deadline) {
			time.Sleep(interval)
		}
		if got := releases.Load(); got != n {
			t.Fatalf("%d releases, want %d", got, n)
		}
	}
	waitFor(1) // idle after the burst, the 400 goroutines still parked
	time.Sleep(4 * interval)
	if n := releases.Load(); n != 1 {
		t.Fatalf("%d releases while nothing changed, want 1", n)
	}
	close(hold)
	ended.Wait()
	waitFor(2) // they ended: what they held is free now
	time.Sleep(4 * interval)
	if n := releases.Load(); n != 2 {
		t.Fatalf("%d releases, want still 2", n)
	}
}
