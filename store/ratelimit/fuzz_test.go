package ratelimit

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
)

// op is one step of a generated sequence: move the clock by dt, then take or adjust by n.
type op struct {
	dt     time.Duration
	adjust bool
	n      float64
}

// reader turns fuzz bytes into values, mostly ordinary ones, sometimes any bit pattern (NaN,
// infinities, negatives, subnormals, the largest doubles).
type reader struct{ b []byte }

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) u64() uint64 {
	var buf [8]byte
	n := copy(buf[:], r.b)
	r.b = r.b[n:]
	return binary.LittleEndian.Uint64(buf[:])
}

func (r *reader) float() float64 {
	switch s := r.byte(); {
	case s < 100:
		return float64(s % 50)
	case s < 200:
		return float64(s) / 8
	case s < 250:
		return math.Float64frombits(r.u64())
	default:
		return []float64{0, 1e300, math.MaxFloat64, 5e-324, -1, math.NaN(), math.Inf(1)}[s-250]
	}
}

func (r *reader) duration() time.Duration {
	switch s := r.byte(); {
	case s < 120:
		return time.Duration(s) * time.Millisecond
	case s < 180:
		return -time.Duration(s-120) * time.Millisecond
	case s < 250:
		return time.Duration(r.u64())
	default:
		return 0
	}
}

func decode(data []byte) (Limit, []op) {
	r := &reader{b: data}
	l := Limit{Rate: r.float(), Burst: r.float()}
	var ops []op
	for len(r.b) > 0 && len(ops) < 200 {
		c := r.byte()
		o := op{dt: r.duration(), adjust: c&1 == 1, n: r.float()}
		if o.adjust && c&2 == 2 {
			o.n = -o.n // refunds
		}
		ops = append(ops, o)
	}
	return l, ops
}

func fuzzSeeds(f *testing.F) {
	for _, s := range [][]byte{
		{10, 20, 0, 5, 1, 0, 5, 3, 0, 5, 3, 1, 0, 200, 1},
		{1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 130, 1, 0, 100, 0},
		{251, 251, 0, 0, 251, 0, 249, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0},
		{253, 252, 0, 0, 252, 1, 0, 251, 3, 0, 251, 0, 10, 0},
		{200, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 50, 0, 0, 1, 0, 180, 5},
		{254, 1, 0, 0, 1}, {1, 255, 0, 0, 1}, {1, 1, 0, 0, 255},
	} {
		f.Add(s)
	}
}

// FuzzLocal runs generated sequences through a Local limiter on a clock that jumps both ways
// and checks what a caller relies on: valid inputs decide without error, tokens stay in
// [0, Burst], never NaN or infinite, durations are never negative, and when the clock did not
// move, a decision changes the tokens by exactly what it spent.
func FuzzLocal(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		l, ops := decode(data)
		clock := newFakeClock()
		lim := NewLocal(LocalOptions{Now: clock.Now})
		ctx := context.Background()
		if l.validate() != nil {
			_, err := lim.Allow(ctx, "k", l, 1)
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		// prev is the tokens the last decision left, at the clock reading prevAt (what Local
		// reads); a bucket never used is full at any reading.
		prev, prevAt := l.Burst, math.NaN()
		for i, o := range ops {
			clock.Advance(o.dt)
			now := lim.now()
			moved := now - prevAt // NaN first: compare then only checks the range
			if o.adjust {
				err := lim.Adjust(ctx, "k", l, o.n)
				if !finite(o.n) {
					require.ErrorIs(t, err, ErrInvalid)
					continue
				}
				require.NoError(t, err)
				d, err := lim.Allow(ctx, "k", l, 0)
				require.NoError(t, err)
				checkDecision(t, l, 0, d)
				compare(t, moved, clamp(prev-o.n, l.Burst), d.Remaining, "op %d: adjust %v of %v", i, o.n, prev)
				prev, prevAt = d.Remaining, now
				continue
			}
			d, err := lim.Allow(ctx, "k", l, o.n)
			if !finite(o.n) || o.n < 0 {
				require.ErrorIs(t, err, ErrInvalid)
				continue
			}
			require.NoError(t, err)
			checkDecision(t, l, o.n, d)
			want := prev
			if d.Allowed {
				want -= o.n
			}
			compare(t, moved, want, d.Remaining, "op %d: cost %v of %v", i, o.n, prev)
			if moved == 0 {
				require.Equal(t, o.n <= prev, d.Allowed, "op %d: cost %v of %v", i, o.n, prev)
			}
			prev, prevAt = d.Remaining, now
		}
	})
}

// compare checks tokens after a decision against want, the same decision applied to the tokens
// the previous one left, moved µs earlier: equal when the clock did not move, no fewer when it moved forwards (refill
// only adds), no more when it moved backwards (nothing refills, and an earlier reading may have
// seen more refilled than the bucket stored). Rounding is monotonic, so these hold exactly.
func compare(t *testing.T, moved float64, want, got float64, msg string, args ...any) {
	t.Helper()
	switch {
	case moved == 0:
		require.Equal(t, want, got, append([]any{msg}, args...)...)
	case moved > 0:
		require.GreaterOrEqual(t, got, want, append([]any{msg + " (clock forwards)"}, args...)...)
	case moved < 0:
		require.LessOrEqual(t, got, want, append([]any{msg + " (clock backwards)"}, args...)...)
	}
}

func checkDecision(t *testing.T, l Limit, cost float64, d Decision) {
	t.Helper()
	require.False(t, math.IsNaN(d.Remaining) || math.IsInf(d.Remaining, 0), "remaining %v", d.Remaining)
	require.GreaterOrEqual(t, d.Remaining, 0.0)
	require.LessOrEqual(t, d.Remaining, l.Burst)
	require.GreaterOrEqual(t, d.RetryAfter, time.Duration(0))
	require.GreaterOrEqual(t, d.ResetAfter, time.Duration(0))
	require.Equal(t, cost > l.Burst, d.TooLarge)
	if d.TooLarge || d.Allowed {
		require.Zero(t, d.RetryAfter)
	} else {
		require.Positive(t, d.RetryAfter)
	}
	if d.Allowed {
		require.LessOrEqual(t, cost, l.Burst)
	}
}

// luaTestScript replaces Redis TIME with ARGV[5], so that the script's arithmetic runs on the
// clock readings the test chooses (jumps included). The rest of the script is luaBucket as is.
var luaTestScript = rueidis.NewLuaScript("local now = tonumber(ARGV[5])\n" + luaBucket)

// parity runs ops through a Local limiter and through the Lua script on redis-server with the
// same clock readings, and requires the same decisions, bit for bit, and the same stored state.
func parity(t *testing.T, client rueidis.Client, key string, l Limit, ops []op) {
	ctx := context.Background()
	clock := newFakeClock()
	lim := NewLocal(LocalOptions{Now: clock.Now})
	redisKey := "parity:{" + key + "}"
	format := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	lastStored := ""
	for i, o := range ops {
		clock.Advance(o.dt)
		if o.adjust && !finite(o.n) || !o.adjust && (!finite(o.n) || o.n < 0) {
			continue // refused by validation before reaching either
		}
		now := lim.now()
		what := fmt.Sprintf("op %d %+v at %v with %+v", i, o, now, l)
		operation, tokens, allowed := opTake, 0.0, false
		if o.adjust {
			operation = opAdjust
			require.NoError(t, lim.Adjust(ctx, key, l, o.n))
		} else {
			d, err := lim.Allow(ctx, key, l, o.n)
			require.NoError(t, err)
			tokens, allowed = d.Remaining, d.Allowed
		}
		res := luaTestScript.Exec(ctx, client, []string{redisKey}, []string{format(l.Rate), format(l.Burst), format(o.n), operation, format(now)})
		luaTokens, luaAllowed, err := parseReply(res)
		require.NoError(t, err, what)
		if !o.adjust {
			require.Equal(t, allowed, luaAllowed, what)
			require.Equal(t, math.Float64bits(tokens), math.Float64bits(luaTokens), "%s: go %v lua %v", what, tokens, luaTokens)
		}

		// The stored states match: both absent (full), or the same tokens and time.
		s := lim.shard(key)
		s.mu.Lock()
		e, ok := s.buckets[key]
		s.mu.Unlock()
		v, err := client.Do(ctx, client.B().Get().Key(redisKey).Build()).ToString()
		if rueidis.IsRedisNil(err) {
			require.False(t, ok, "%s: stored in Local, not in Redis", what)
			continue
		}
		require.NoError(t, err)
		pttl, err := client.Do(ctx, client.B().Pttl().Key(redisKey).Build()).AsInt64()
		require.NoError(t, err)
		if v != lastStored {
			require.Positive(t, pttl, "%s: a stored bucket expires", what)
		}
		lastStored = v
		// Keep the key until the script next sets its expiry: Redis expires it on the real
		// clock, which does not move with the test's.
		require.NoError(t, client.Do(ctx, client.B().Persist().Key(redisKey).Build()).Error())
		if !ok {
			// Local's sweep dropped a bucket that is full by now: Redis's must read full.
			var b bucket
			_, err := fmt.Sscan(v, &b.tokens, &b.ts)
			require.NoError(t, err, "%s: stored %q", what, v)
			require.Equal(t, l.Burst, level(b, now, l), "%s: dropped by Local, in Redis %q", what, v)
			continue
		}
		require.Equal(t, strconv.FormatFloat(e.tokens, 'g', 17, 64)+" "+strconv.FormatFloat(e.ts, 'g', 17, 64), normalizeG(v), what)
		if pttl > 0 {
			require.LessOrEqual(t, float64(pttl), ttlMillis(e.tokens, l), what)
		}
	}
}

// normalizeG rewrites the numbers of a value Lua wrote with C's %.17g as Go writes them, so
// that only numeric differences show.
func normalizeG(v string) string {
	f := strings.Fields(v)
	for i, s := range f {
		x, err := strconv.ParseFloat(s, 64)
		if err == nil {
			f[i] = strconv.FormatFloat(x, 'g', 17, 64)
		}
	}
	return strings.Join(f, " ")
}

// FuzzLuaMatchesLocal checks that the Redis script and the Go arithmetic agree on any sequence.
func FuzzLuaMatchesLocal(f *testing.F) {
	fuzzSeeds(f)
	srv := redistest.Start(f)
	client := srv.NewClient(f)
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		l, ops := decode(data)
		if l.validate() != nil {
			return
		}
		n++
		parity(t, client, "f"+strconv.Itoa(n), l, ops)
	})
}

// TestLuaMatchesLocal runs many random sequences of ordinary values, plus extremes.
func TestLuaMatchesLocal(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.NewClient(t)
	rng := rand.New(rand.NewPCG(1, 2))
	sequences := 200
	if testing.Short() {
		sequences = 20
	}
	pick := func(xs ...float64) float64 { return xs[rng.IntN(len(xs))] }
	for s := range sequences {
		l := Limit{Rate: pick(0.001, 0.3, 1, 7, 1000, 1e9, 1e300), Burst: pick(0.5, 1, 3, 10, 1e4, 1e15, 1e300)}
		ops := make([]op, 50)
		for i := range ops {
			ops[i] = op{
				dt:     time.Duration(rng.Int64N(int64(2*time.Second))) - time.Second/2,
				adjust: rng.IntN(4) == 0,
				n:      pick(0, 0.25, 1, 2, 3.5, 100, 1e20, l.Burst, l.Burst/3) * pick(1, 1, -1),
			}
			if rng.IntN(20) == 0 {
				ops[i].dt = time.Duration(rng.Uint64())
			}
		}
		parity(t, client, "r"+strconv.Itoa(s), l, ops)
	}
}
