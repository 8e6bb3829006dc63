package upstream

import (
	"context"
	"time"
)

// Backoff is the wait before the next health check after n consecutive failures: the interval
// times 1, 2, 4, then 8, never above 60 s unless the configured interval itself is longer.
func Backoff(interval time.Duration, n int) time.Duration {
	if n <= 0 {
		return interval
	}
	d := interval << min(n-1, 3)
	return max(min(d, 60*time.Second), interval)
}

// HealthLoop paces one endpoint's health checks until ctx ends: probe runs every interval while
// the endpoint is healthy and backs off (Backoff) while it is not. A value on kick (a request
// failed on the endpoint: State.Kicks) brings the next probe forward to half the backoff's next
// step, so a dead upstream is re-checked soon but not hammered by every failing request.
// discoverDue tells probe that discoveryInterval has passed since the last healthy probe that
// discovered; probe reports whether the endpoint is healthy.
func HealthLoop(ctx context.Context, interval, discoveryInterval time.Duration, kick <-chan struct{},
	probe func(ctx context.Context, discoverDue bool) (healthy bool)) {
	healthLoop(ctx, realClock{}, interval, discoveryInterval, kick, probe)
}

// clock is the time HealthLoop reads and waits on; tests replace it.
type clock interface {
	now() time.Time
	// timer fires once after d on the channel; stop stops it.
	timer(d time.Duration) (c <-chan time.Time, stop func() bool)
}

type realClock struct{}

func (realClock) now() time.Time { return time.Now() }

func (realClock) timer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func healthLoop(ctx context.Context, clk clock, interval, discoveryInterval time.Duration, kick <-chan struct{},
	probe func(ctx context.Context, discoverDue bool) bool) {
	failures := 0
	lastDiscovery := clk.now()
	for {
		c, stop := clk.timer(Backoff(interval, failures))
		select {
		case <-ctx.Done():
			stop()
			return
		case <-c:
		case <-kick:
			stop()
			c, stop = clk.timer(Backoff(interval, failures+1) / 2)
			select {
			case <-ctx.Done():
				stop()
				return
			case <-c:
			}
		}
		due := clk.now().Sub(lastDiscovery) >= discoveryInterval
		if probe(ctx, due) {
			failures = 0
			if due {
				lastDiscovery = clk.now()
			}
		} else {
			failures++
		}
	}
}
