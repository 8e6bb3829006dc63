package openai

import (
	"context"
	"errors"
	"time"
)

// This file is what the OpenAI proxy shares with the other pools of upstreams configured by the
// same Endpoint entries (adapters/kserveproxy serves the kserve ones): config resolution, health
// check pacing and the routing pick, so every pool behaves the same way.

// Resolve validates one endpoint and returns it the way pools use it: check_interval and
// check_timeout defaulted, header values with ${ENV} expanded, and for the HTTP types
// health_check_url and model_url defaulted and made absolute. A kserve endpoint keeps
// health_check_url empty unless one is configured (its pool then checks health over gRPC), and
// an absolute URL when one is. Problems are *FieldError values, joined.
func Resolve(ep Endpoint) (Endpoint, error) {
	r, errs := resolve(ep.Name, ep)
	if err := errors.Join(errs...); err != nil {
		return Endpoint{}, err
	}
	out := r.Endpoint
	out.Headers = make(map[string]string, len(r.headers))
	for _, kv := range r.headers {
		out.Headers[kv[0]] = kv[1]
	}
	if r.health != nil {
		out.HealthCheckURL = r.health.String()
	}
	if r.models != nil {
		out.ModelURL = r.models.String()
	}
	return out, nil
}

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
// failed on the endpoint) brings the next probe forward to half the backoff's next step, so a
// dead upstream is re-checked soon but not hammered by every failing request. discoverDue tells
// probe that discoveryInterval has passed since the last healthy probe that discovered; probe
// reports whether the endpoint is healthy.
func HealthLoop(ctx context.Context, interval, discoveryInterval time.Duration, kick <-chan struct{},
	probe func(ctx context.Context, discoverDue bool) (healthy bool)) {
	failures := 0
	lastDiscovery := time.Now()
	for {
		t := time.NewTimer(Backoff(interval, failures))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-kick:
			t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-time.After(Backoff(interval, failures+1) / 2):
			}
		}
		due := time.Since(lastDiscovery) >= discoveryInterval
		if probe(ctx, due) {
			failures = 0
			if due {
				lastDiscovery = time.Now()
			}
		} else {
			failures++
		}
	}
}

// Pick chooses among n candidates sorted by priority, highest first: the highest tier that has a
// usable candidate, and in it the one with the least load. Ties go to the first in an order
// rotated by rotate, so equal endpoints share the work. It returns -1 when none is usable.
func Pick(n int, priority func(i int) int, usable func(i int) bool, load func(i int) int64, rotate uint32) int {
	for i := 0; i < n; {
		j := i
		for j < n && priority(j) == priority(i) {
			j++
		}
		best, bestN := -1, int64(0)
		size := j - i
		for k := range size {
			c := i + (k+int(rotate%uint32(size)))%size
			if !usable(c) {
				continue
			}
			if l := load(c); best < 0 || l < bestN {
				best, bestN = c, l
			}
		}
		if best >= 0 {
			return best
		}
		i = j
	}
	return -1
}
