package breaker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/stretchr/testify/require"
)

// FuzzLocalFSM drives the in-process state machine with arbitrary sequences of Allow, outcomes
// and clock steps, and checks its rules after every step against what the sequence implies.
func FuzzLocalFSM(f *testing.F) {
	// Op bytes: %8 picks Allow (0, 1), an outcome (2-5, Success..Ignored, of the ticket op/8
	// picks), a clock step (6: op/8 * 50 ms; 166 is 1 s), a State check (7).
	f.Add([]byte{0, 3, 0, 3, 0, 3, 0, 166, 7, 0, 0, 0, 2, 2, 7, 0})
	f.Add([]byte{0, 3, 0, 3, 0, 2, 0, 3, 0, 3, 7, 0, 3})
	f.Add([]byte{0, 2, 0, 3, 0, 4, 0, 5, 0, 3, 0, 3, 0, 3, 166, 0, 0, 3, 166, 0, 0, 2, 2, 7})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 3, 11, 19, 166, 0, 0, 0, 5, 0, 4, 126, 0, 0, 7, 2, 10})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := Settings{
			// Only the consecutive rule, so that the model below knows exactly when it trips
			// (the error rate is the contract tests' business).
			ConsecutiveFailures: 3, ErrorRate: -1,
			OpenTimeout: time.Second, HalfOpenProbes: 2, SuccessesToClose: 2,
			Cooldown: 500 * time.Millisecond, MaxCooldown: 2 * time.Second,
		}
		clk := newFakeClock()
		var changes []string
		l := NewLocal(Options{Settings: s, Now: clk.Now, OnStateChange: func(_ string, from, to State) {
			changes = append(changes, from.String()+">"+to.String())
		}})
		ctx := context.Background()
		e := l.endpoint("up")
		var out []Ticket
		run := 0 // consecutive failures reported in the current closed period
		lastGen := e.sg.Load() >> 2
		for i, op := range ops {
			sg := e.sg.Load()
			st, gen := State(sg&3), sg>>2
			if gen != lastGen {
				run, lastGen = 0, gen
			}
			now := l.now()
			cooling := e.cool.Load() > now
			e.mu.Lock()
			until := e.until
			e.mu.Unlock()
			step := fmt.Sprintf("step %d (op %d) in %s", i, op, st)

			switch op % 8 {
			case 0, 1:
				tk, err := l.Allow(ctx, "up")
				switch {
				case cooling:
					require.ErrorIs(t, err, ErrOpen, step)
				case st == Closed:
					require.NoError(t, err, step)
					require.False(t, tk.Probe(), step)
				case st == Open && now < until:
					require.ErrorIs(t, err, ErrOpen, step)
				case st == Open:
					require.NoError(t, err, "%s: the first Allow after the open timeout is a probe", step)
					require.True(t, tk.Probe(), step)
				}
				if err != nil {
					var oe *OpenError
					require.True(t, errors.As(err, &oe), step)
					require.Positive(t, oe.RetryAfter, step)
					continue
				}
				out = append(out, tk)
			case 2, 3, 4, 5:
				if len(out) == 0 {
					continue
				}
				k := int(op/8) % len(out)
				tk := out[k]
				out = append(out[:k], out[k+1:]...)
				o := Outcome(op%8 - 2)
				current := !tk.probe && tk.gen == gen && st == Closed
				tk.Done(o)
				if current {
					switch o {
					case Success:
						run = 0
					case Failure:
						run++
					}
					want := Closed
					if run >= s.ConsecutiveFailures {
						want = Open
					}
					require.Equal(t, want, State(e.sg.Load()&3), "%s: after %d consecutive failures", step, run)
				}
			case 6:
				clk.Add(time.Duration(op/8) * 50 * time.Millisecond)
			case 7:
				want := st
				if st == Open && now >= until {
					want = HalfOpen
				}
				require.Equal(t, want, l.State("up"), step)
			}
			e.mu.Lock()
			if State(e.sg.Load()&3) == HalfOpen {
				require.LessOrEqual(t, e.probes, s.HalfOpenProbes, step)
				require.Less(t, e.succ, s.SuccessesToClose, step)
			}
			e.mu.Unlock()
		}
		for _, c := range changes {
			require.Contains(t, []string{"closed>open", "open>half-open", "half-open>closed", "half-open>open"}, c)
		}
	})
}

func FuzzParseChange(f *testing.F) {
	for _, s := range []string{
		"1795387683568 1 300 0 up", "0 0 0 0 a b c", "12 2 0 5000 vllm-a", "", "1 3 0 0 x", "-1 0 0 0 x",
		"1 0 0 0", "1 0 0 0 ", "99999999999999999999 0 0 0 x", "1 0 99999999999 0 x", " 1 0 0 0 x", "1  0 0 0 x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		c, err := parseChange(msg)
		if err != nil {
			return
		}
		require.LessOrEqual(t, c.r.state, HalfOpen)
		require.NotEmpty(t, c.endpoint)
		require.LessOrEqual(t, c.r.dlMs, maxLeft)
		require.LessOrEqual(t, c.r.coolMs, maxLeft)
		again, err := parseChange(fmt.Sprintf("%d %d %d %d %s", c.r.gen, c.r.state, c.r.dlMs, c.r.coolMs, c.endpoint))
		require.NoError(t, err)
		require.Equal(t, c, again)
	})
}

func TestParseChange(t *testing.T) {
	c, err := parseChange("1795387683568 1 300 0 my endpoint")
	require.NoError(t, err)
	require.Equal(t, change{endpoint: "my endpoint", r: reply{state: Open, gen: 1795387683568, dlMs: 300}}, c)
	for _, bad := range []string{"", "1 0 0 0", "1 0 0 0 ", "1 3 0 0 x", "1 -1 0 0 x", "x 0 0 0 e", "1 0 0 1e3 e"} {
		_, err := parseChange(bad)
		require.Error(t, err, bad)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, b Breaker) {
		tk, err := b.Allow(ctx, "up")
		require.NoError(t, err)
		tk.Done(Success)
		allocs := testing.AllocsPerRun(1000, func() {
			tk, err := b.Allow(ctx, "up")
			if err != nil {
				t.Fatal(err)
			}
			tk.Done(Success)
		})
		require.Zero(t, allocs)
	}
	t.Run("local", func(t *testing.T) { check(t, NewLocal(Options{})) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		check(t, newRedisBreaker(t, srv, RedisOptions{FlushInterval: time.Hour, SyncInterval: time.Hour}))
	})
}
