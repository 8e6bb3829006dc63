package memrelease

import (
	"context"
	"runtime"
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
