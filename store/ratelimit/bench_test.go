package ratelimit

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/redis/rueidis"
)

// luaPlain is the plain token bucket script of reference/deps.md §3 (HMGET, HSET, PEXPIRE),
// measured at ~100,000 decisions/s with 64 callers there.
var luaPlain = rueidis.NewLuaScript(`
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME'); local now = tonumber(t[1])*1000 + math.floor(tonumber(t[2])/1000)
local d = redis.call('HMGET', KEYS[1], 'tk', 'ts')
local tokens, ts = tonumber(d[1]), tonumber(d[2])
if tokens == nil then tokens = burst; ts = now end
local elapsed = now - ts; if elapsed < 0 then elapsed = 0 end
tokens = math.min(burst, tokens + elapsed * rate / 1000)
local allowed = 0
if tokens >= cost then tokens = tokens - cost; allowed = 1 end
redis.call('HSET', KEYS[1], 'tk', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {allowed, math.floor(tokens)}`)

// concurrently runs b.N calls of f spread over c goroutines and reports calls per second.
func concurrently(b *testing.B, c int, unit string, f func(i int) error) {
	var next atomic.Int64
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				if err := f(i); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
}

// p50 runs f b.N times in a row and returns the median duration in µs.
func p50(b *testing.B, f func(i int) error) float64 {
	lat := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if err := f(i); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(start)
	}
	b.StopTimer()
	return median(lat)
}

// median sorts lat and returns its middle value in µs.
func median(lat []time.Duration) float64 {
	slices.Sort(lat)
	return float64(lat[len(lat)/2]) / 1e3
}

// luaFloor does only the Redis commands any token bucket on Redis TIME needs (TIME, GET, SET
// with an expiry), with no arithmetic: the least a decision can cost.
var luaFloor = rueidis.NewLuaScript(`local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], '999999 1700000000000000', 'PX', 5000)
return {1, '999999'}`)

// BenchmarkRedisLimiter measures Redis decisions against a plain PING on the same client
// (infergate vs baseline), with 64 concurrent callers (decisions/s, auto-pipelined) and with one
// (median latency). c=1/infergate also interleaves its decisions with PINGs, plain script calls
// and calls of luaFloor, in a random order each round, and reports the ratios of the medians to PING's (x-ping,
// script-x-ping, floor-x-ping), all measured under the same load. baseline-script is the
// plain token bucket script of reference/deps.md §3, for the cost of this one's extras. Limits are large so most
// decisions are admissions, which write.
func BenchmarkRedisLimiter(b *testing.B) {
	srv := redistest.Start(b)
	client := srv.NewClient(b)
	m := NewMetrics()
	// Production settings (50 ms timeout, fail-open): a fallback decision would be measured
	// as a Redis one, so the benchmark fails if there was any.
	lim, err := NewRedis(client, RedisOptions{Metrics: m, Logger: quiet()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if n := value(b, m.failed) + value(b, m.timeout); n > 0 {
			b.Errorf("%v Redis calls failed or timed out: those decisions were local", n)
		}
	})
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	l := Limit{Rate: 1e6, Burst: 1e6}
	allow := func(i int) error {
		_, err := lim.Allow(ctx, keys[i%len(keys)], l, 1)
		return err
	}
	ping := func(int) error { return client.Do(ctx, client.B().Ping().Build()).Error() }
	plain := func(i int) error {
		return luaPlain.Exec(ctx, client, []string{"plain:{" + keys[i%len(keys)] + "}"}, []string{"1000000", "1000000", "1"}).Error()
	}
	floor := func(i int) error {
		return luaFloor.Exec(ctx, client, []string{"floor:{" + keys[i%len(keys)] + "}"}, []string{"1000000", "1000000", "1", "t"}).Error()
	}

	b.Run("c=64", func(b *testing.B) {
		b.Run("infergate", func(b *testing.B) { concurrently(b, 64, "decisions/s", allow) })
		b.Run("baseline", func(b *testing.B) { concurrently(b, 64, "pings/s", ping) })
		b.Run("baseline-script", func(b *testing.B) { concurrently(b, 64, "decisions/s", plain) })
	})
	b.Run("c=1", func(b *testing.B) {
		b.Run("infergate", func(b *testing.B) {
			calls := []func(int) error{allow, ping, plain, floor}
			lat := make([][]time.Duration, len(calls))
			for j := range lat {
				lat[j] = make([]time.Duration, b.N)
			}
			// Each round makes the four calls in a new random order: in a fixed order a call
			// that follows another Redis call meets a Redis (and a client) that was just busy,
			// and one that follows the benchmark's own bookkeeping does not, which biased the
			// ratios by up to 0.1x.
			order := []int{0, 1, 2, 3}
			b.ResetTimer()
			for i := range b.N {
				rand.Shuffle(len(order), func(x, y int) { order[x], order[y] = order[y], order[x] })
				for _, j := range order {
					t0 := time.Now()
					if err := calls[j](i); err != nil {
						b.Fatal(err)
					}
					lat[j][i] = time.Since(t0)
				}
			}
			b.StopTimer()
			allowUS, pingUS, plainUS, floorUS := median(lat[0]), median(lat[1]), median(lat[2]), median(lat[3])
			b.ReportMetric(allowUS, "p50-us")
			b.ReportMetric(pingUS, "ping-p50-us")
			b.ReportMetric(allowUS/pingUS, "x-ping")
			b.ReportMetric(plainUS/pingUS, "script-x-ping")
			b.ReportMetric(floorUS/pingUS, "floor-x-ping")
		})
		b.Run("baseline", func(b *testing.B) { b.ReportMetric(p50(b, ping), "p50-us") })
		b.Run("baseline-script", func(b *testing.B) { b.ReportMetric(p50(b, plain), "p50-us") })
	})
}

// BenchmarkLocalLimiter measures in-process decisions (ns/op), against a baseline of one
// mutex-protected map update.
func BenchmarkLocalLimiter(b *testing.B) {
	ctx := context.Background()
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	l := Limit{Rate: 1e6, Burst: 1e6}
	b.Run("serial", func(b *testing.B) {
		b.Run("infergate", func(b *testing.B) {
			lim := NewLocal(LocalOptions{})
			b.ReportAllocs()
			for i := range b.N {
				if _, err := lim.Allow(ctx, keys[i%len(keys)], l, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("baseline", func(b *testing.B) {
			var mu sync.Mutex
			counts := map[string]float64{}
			b.ReportAllocs()
			for i := range b.N {
				mu.Lock()
				counts[keys[i%len(keys)]]++
				mu.Unlock()
			}
		})
	})
	b.Run("parallel", func(b *testing.B) {
		b.Run("infergate", func(b *testing.B) {
			lim := NewLocal(LocalOptions{})
			b.ReportAllocs()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(n.Add(1)) * 7919
				for pb.Next() {
					i++
					if _, err := lim.Allow(ctx, keys[i%len(keys)], l, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("baseline", func(b *testing.B) {
			var mu sync.Mutex
			counts := map[string]float64{}
			b.ReportAllocs()
			var n atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(n.Add(1)) * 7919
				for pb.Next() {
					i++
					mu.Lock()
					counts[keys[i%len(keys)]]++
					mu.Unlock()
				}
			})
		})
	})
}

// A Redis limiter that is down decides locally at about the Local limiter's cost.
func BenchmarkRedisLimiterDown(b *testing.B) {
	srv := redistest.Start(b)
	lim := newRedis(b, srv, RedisOptions{Timeout: 50 * time.Millisecond, RetryInterval: time.Hour})
	srv.Kill()
	ctx := context.Background()
	l := Limit{Rate: 1e6, Burst: 1e6}
	if _, err := lim.Allow(ctx, "k", l, 1); err != nil { // marks Redis down
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := lim.Allow(ctx, "k", l, 1); err != nil {
			b.Fatal(err)
		}
	}
}
