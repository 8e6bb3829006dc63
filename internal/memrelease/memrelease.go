// Package memrelease hands back to the operating system the memory a burst of load left
// behind, once the process goes idle.
//
// Go's runtime keeps a burst's heap until the next garbage collection, and an idle process
// allocates too little to trigger one: only the runtime's forced collection every two minutes
// comes, and after it the background scavenger returns free pages a little at a time. A gateway
// that served 3,000 concurrent streams kept 191 MiB resident (idle: 30 MiB) for minutes after
// they ended. Setting GOGC or GOMEMLIMIT lower would cost every request under load; this costs
// two collections and a scavenge (debug.FreeOSMemory) per burst, paid when nothing else runs.
//
// Idleness is read from the runtime's own counters (runtime/metrics), so the request path pays
// nothing: the process is idle when it allocated less than IdleBytes in the last Interval. A
// release is worth making once BusyBytes were allocated since the last one, or once
// DropGoroutines fewer goroutines run than just after it (32): connections and streams that were
// still open then (a burst's clients closing their connections takes a while on a loaded
// machine) have ended, and what they held is free now; the release waits until their number
// has stopped falling, so that one drop makes one release.
package memrelease

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Options configures Run; zero values take the defaults.
type Options struct {
	// Interval between looks at the allocation counter; default 5 s.
	Interval time.Duration
	// IdleBytes: allocating less than this in an Interval is idle; default 1 MiB (an idle
	// gateway's health checks and discovery allocate tens of KiB).
	IdleBytes uint64
	// BusyBytes: what must have been allocated since the last release (or the start) for another
	// to be worth its collection; default 64 MiB.
	BusyBytes uint64
	// DropGoroutines: this many fewer goroutines than just after the last release makes another
	// worth it; default 32 (a release at idle costs a millisecond or so: better one too many
	// than a burst's memory kept because the last release came while part of it was live).
	DropGoroutines int
	// Release returns memory to the OS; default release.
	Release func()
	// Logger, when set, logs each release at debug level.
	Logger *slog.Logger
}

// release collects twice and returns the free memory to the OS. One collection is not enough:
// what sits in a sync.Pool (the proxy's copy buffers, one per stream at the burst's peak) only
// moves to the pool's victim cache in the first, and is freed in the second.
func release() {
	runtime.GC()
	debug.FreeOSMemory()
}

// Run watches the process until ctx ends, releasing memory once after each burst of
// allocation that is followed by an idle Interval.
func Run(ctx context.Context, opts Options) {
	if opts.Interval <= 0 {
		opts.Interval = 5 * time.Second
	}
	if opts.IdleBytes == 0 {
		opts.IdleBytes = 1 << 20
	}
	if opts.BusyBytes == 0 {
		opts.BusyBytes = 64 << 20
	}
	if opts.DropGoroutines <= 0 {
		opts.DropGoroutines = 32
	}
	if opts.Release == nil {
		opts.Release = release
	}
	sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/sched/goroutines:goroutines"}}
	read := func() (allocated uint64, goroutines int) {
		metrics.Read(sample)
		if sample[0].Value.Kind() == metrics.KindUint64 {
			allocated = sample[0].Value.Uint64()
		}
		if sample[1].Value.Kind() == metrics.KindUint64 {
			goroutines = int(sample[1].Value.Uint64())
		}
		return allocated, goroutines
	}
	last, _ := read()
	since, after := last, 0 // at the last release: the counter, and the goroutines just after (0: none yet)
	prev := 0               // the goroutines at the last tick
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now, g := read()
		idle := now-last < opts.IdleBytes
		// Goroutines that have ended free what they held once they are gone: while their number
		// is still falling (a burst's connections closing over several ticks), the release waits
		// for it to settle, so that one release follows one drop.
		settled := prev-g < opts.DropGoroutines/4
		prev = g
		worth := now-since >= opts.BusyBytes || after > 0 && after-g >= opts.DropGoroutines && settled
		if idle && worth {
			start := time.Now()
			opts.Release()
			if opts.Logger != nil {
				opts.Logger.Debug("returned idle memory to the OS", "allocated_since_last_MiB", (now-since)>>20,
					"goroutines", g, "took", time.Since(start))
			}
			now, after = read()
			since = now
		}
		last = now
	}
}
