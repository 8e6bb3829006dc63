package batchstate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newRedis(t *testing.T, opts RedisOptions) (*Redis, rueidis.Client) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	return NewRedis(c, opts), c
}

func allKeys(t *testing.T, c rueidis.Client) []string {
	t.Helper()
	keys, err := c.Do(context.Background(), c.B().Keys().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	slices.Sort(keys)
	return keys
}

// Every key of a batch carries its id as hash tag, so each script touches one Cluster slot; the
// indexes share another.
func TestRedisKeyLayout(t *testing.T) {
	s, c := newRedis(t, RedisOptions{Prefix: "p"})
	ctx := context.Background()
	b := create(t, s, InProgress)
	_, err := s.Record(ctx, b.ID, results("l", 0, 1, Output))
	require.NoError(t, err)
	done := create(t, s, Completed)
	assert.Equal(t, []string{
		"p:batch:{" + b.ID + "}",
		"p:batch:{" + b.ID + "}:results",
		"p:batch:{" + done.ID + "}",
		"p:{batches}:active",
		"p:{batches}:expiry",
		"p:{batches}:index",
	}, allKeys(t, c))
}

func pttl(t *testing.T, c rueidis.Client, key string) time.Duration {
	t.Helper()
	ms, err := c.Do(context.Background(), c.B().Pttl().Key(key).Build()).AsInt64()
	require.NoError(t, err)
	return time.Duration(ms) * time.Millisecond
}

// A terminal batch's keys get the TTL once, when it becomes terminal; others have none.
func TestRedisTerminalTTL(t *testing.T) {
	s, c := newRedis(t, RedisOptions{Prefix: "p", TTL: time.Hour})
	ctx := context.Background()
	b := create(t, s, InProgress)
	_, err := s.Record(ctx, b.ID, results("l", 0, 3, Output))
	require.NoError(t, err)
	keys := s.keys(b.ID)
	assert.Equal(t, -time.Millisecond, pttl(t, c, keys[0]), "no TTL while running")
	assert.Equal(t, -time.Millisecond, pttl(t, c, keys[1]))

	setStatus(t, s, b.ID, Finalizing)
	assert.Equal(t, -time.Millisecond, pttl(t, c, keys[0]), "finalizing is not terminal")

	isActive := func() bool {
		n, err := c.Do(ctx, c.B().Sismember().Key(s.index[1]).Member(b.ID).Build()).AsInt64()
		require.NoError(t, err)
		return n == 1
	}
	assert.True(t, isActive(), "in the active set while not terminal")
	setStatus(t, s, b.ID, Completed)
	assert.False(t, isActive(), "out of the active set once terminal")
	first := pttl(t, c, keys[0])
	assert.Greater(t, first, 59*time.Minute)
	assert.LessOrEqual(t, first, time.Hour)
	assert.Greater(t, pttl(t, c, keys[1]), 59*time.Minute, "the results expire with the batch")

	time.Sleep(20 * time.Millisecond)
	_, err = s.Update(ctx, b.ID, func(x *Batch) error { x.OutputFileID = "file-1"; return nil })
	require.NoError(t, err)
	assert.Less(t, pttl(t, c, keys[0]), first, "a later update does not extend the TTL")

	created := create(t, s, Failed)
	assert.Greater(t, pttl(t, c, s.keys(created.ID)[0]), 59*time.Minute, "created terminal: TTL at once")
}

// Once a terminal batch's TTL passes it is gone: not listed, not active, its index entries
// removed.
func TestRedisExpiry(t *testing.T) {
	s, c := newRedis(t, RedisOptions{Prefix: "p", TTL: 100 * time.Millisecond})
	ctx := context.Background()
	old := create(t, s, InProgress)
	_, err := s.Record(ctx, old.ID, results("l", 0, 3, Output))
	require.NoError(t, err)
	live := create(t, s, InProgress)
	setStatus(t, s, old.ID, Cancelled)

	require.Eventually(t, func() bool {
		_, err := s.Get(ctx, old.ID)
		return err != nil
	}, 5*time.Second, 10*time.Millisecond)
	_, err = s.Get(ctx, old.ID)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorIs(t, s.Results(ctx, old.ID, func(Result) error { return nil }), ErrNotFound)
	assert.NotContains(t, allKeys(t, c), s.keys(old.ID)[1], "the results expired too")

	// Nothing removed the id from the index yet: List skips it (and removes it).
	in, err := c.Do(ctx, c.B().Zscore().Key(s.index[0]).Member(old.ID).Build()).AsFloat64()
	require.NoError(t, err, "still indexed")
	assert.Zero(t, in)
	page, more, err := s.List(ctx, "", 1)
	require.NoError(t, err)
	assert.Equal(t, []string{live.ID}, ids(page))
	assert.False(t, more, "the expired batch does not count as more")
	err = c.Do(ctx, c.B().Zscore().Key(s.index[0]).Member(old.ID).Build()).Error()
	assert.True(t, rueidis.IsRedisNil(err), "List removed the stale id: %v", err)

	// The next change sweeps the expiry index too.
	create(t, s, Validating)
	n, err := c.Do(ctx, c.B().Zcard().Key(s.index[2]).Build()).AsInt64()
	require.NoError(t, err)
	assert.Zero(t, n)

	// An expired id that List never reached is swept by the next change.
	gone := create(t, s, Expired)
	time.Sleep(150 * time.Millisecond)
	create(t, s, Validating)
	err = c.Do(ctx, c.B().Zscore().Key(s.index[0]).Member(gone.ID).Build()).Error()
	assert.True(t, rueidis.IsRedisNil(err), "swept from the index: %v", err)
}

// Active drops ids that an index update left behind: terminal or gone.
func TestRedisActiveHeals(t *testing.T) {
	s, c := newRedis(t, RedisOptions{Prefix: "p"})
	ctx := context.Background()
	run := create(t, s, InProgress)
	done := create(t, s, Completed)
	// As if an older update's index script came after the one that made it terminal, and a
	// batch vanished without its index entry.
	require.NoError(t, c.Do(ctx, c.B().Sadd().Key(s.index[1]).Member(done.ID, "batch_gone").Build()).Error())
	got, err := s.Active(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{run.ID}, got)
	members, err := c.Do(ctx, c.B().Smembers().Key(s.index[1]).Build()).AsStrSlice()
	require.NoError(t, err)
	assert.Equal(t, []string{run.ID}, members, "the stale ids are removed")
}

// commandCalls returns the calls of each command since the stats were reset, without the
// INFO and CONFIG that read and reset them.
func commandCalls(t *testing.T, c rueidis.Client) map[string]int {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	out := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		out[name] = n
	}
	return out
}

// countingClient counts the round trips made through it.
type countingClient struct {
	rueidis.Client
	trips atomic.Int64
}

func (c *countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.trips.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *countingClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.trips.Add(1)
	return c.Client.DoMulti(ctx, cmds...)
}

// Record is one script call, one round trip, however many results it carries.
func TestRedisRecordOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := &countingClient{Client: srv.NewClient(t)}
	s := NewRedis(c, RedisOptions{Prefix: "p"})
	ctx := context.Background()
	b := create(t, s, InProgress)
	_, err := s.Record(ctx, b.ID, results("warm", 0, 1, Output)) // loads the script
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, c.B().ConfigResetstat().Build()).Error())
	before := c.trips.Load()
	counts, err := s.Record(ctx, b.ID, results("l", 0, 300, Error))
	require.NoError(t, err)
	assert.Equal(t, int64(300), counts.Failed)
	assert.Equal(t, int64(1), c.trips.Load()-before, "round trips")
	assert.Equal(t, 1, commandCalls(t, c)["evalsha"], "one script call")
}

// Results pages through the hash: with small pages, still every result exactly once.
func TestRedisResultsPages(t *testing.T) {
	s, c := newRedis(t, RedisOptions{Prefix: "p"})
	s.scanCount = 10
	ctx := context.Background()
	b := create(t, s, InProgress)
	_, err := s.Record(ctx, b.ID, results("l", 0, 1000, Output))
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, c.B().ConfigResetstat().Build()).Error())
	assert.Len(t, collect(t, s, b.ID), 1000)
	assert.Greater(t, commandCalls(t, c)["hscan"], 50, "read in pages")
}

// A batch of OpenAI's size with large lines: recorded in chunks, read back in pages. Set
// INFERGATE_BATCH_LARGE=1 to run it (about 100 MB through Redis).
func TestRedisLargeBatch(t *testing.T) {
	if os.Getenv("INFERGATE_BATCH_LARGE") != "1" {
		t.Skip("set INFERGATE_BATCH_LARGE=1 to record and read 100,000 lines of 1 KB")
	}
	s, _ := newRedis(t, RedisOptions{Prefix: "p"})
	ctx := context.Background()
	b := create(t, s, InProgress)
	const n, chunk = 100000, 300
	pad := strings.Repeat("x", 1000)
	for from := 0; from < n; from += chunk {
		rs := make([]Result, 0, chunk)
		for i := from; i < min(from+chunk, n); i++ {
			rs = append(rs, Result{CustomID: fmt.Sprintf("request-%d", i), Kind: Output, Line: []byte(pad)})
		}
		_, err := s.Record(ctx, b.ID, rs)
		require.NoError(t, err)
	}
	seen := 0
	require.NoError(t, s.Results(ctx, b.ID, func(r Result) error {
		if len(r.Line) == len(pad) {
			seen++
		}
		return nil
	}))
	assert.Equal(t, n, seen)
	got, err := s.Get(ctx, b.ID)
	require.NoError(t, err)
	assert.Equal(t, int64(n), got.Counts.Completed)
}

// Every call to Redis has a deadline (RedisOptions.Timeout) even when the caller's context has
// none: with Redis killed or hung, each method fails with ErrUnavailable within it, rather than
// waiting for Redis (a read retries until Redis is back); once Redis answers again, so does the
// store.
func TestRedisCallsHaveDeadlines(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for timeouts against a stopped Redis")
	}
	for _, mode := range []string{"killed", "hung"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			px := redistest.StartProxy(t, srv.Addr)
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{px.Addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			s := NewRedis(c, RedisOptions{Prefix: "p", Timeout: 300 * time.Millisecond})
			b := create(t, s, InProgress)
			if mode == "hung" {
				px.Freeze()
			} else {
				srv.Kill()
			}
			ctx := context.Background() // no deadline of the caller's
			calls := map[string]func() error{
				"Create": func() error { return s.Create(ctx, newBatch(Validating)) },
				"Get":    func() error { _, err := s.Get(ctx, b.ID); return err },
				"List":   func() error { _, _, err := s.List(ctx, "", 10); return err },
				"Update": func() error {
					_, err := s.Update(ctx, b.ID, func(b *Batch) error { b.Dispatched = true; return nil })
					return err
				},
				"Record":      func() error { _, err := s.Record(ctx, b.ID, results("l", 0, 1, Output)); return err },
				"Recorded":    func() error { _, err := s.Recorded(ctx, b.ID, []string{"l0"}); return err },
				"Results":     func() error { return s.Results(ctx, b.ID, func(Result) error { return nil }) },
				"DropResults": func() error { return s.DropResults(ctx, b.ID) },
				"Active":      func() error { _, err := s.Active(ctx); return err },
			}
			for name, call := range calls {
				done := make(chan error, 1)
				go func() { done <- call() }()
				select {
				case err := <-done:
					require.ErrorIs(t, err, ErrUnavailable, name)
				case <-time.After(10 * time.Second):
					t.Fatalf("%s still waits for Redis after 10 s", name)
				}
			}
			if mode == "hung" {
				px.Thaw()
				_, err := s.Get(ctx, b.ID)
				require.NoError(t, err)
			} else {
				srv.Restart()
				_, err := s.Get(ctx, b.ID)
				require.ErrorIs(t, err, ErrNotFound, "the new server starts empty")
			}
		})
	}
}

// A Create that times out while Redis is busy still runs once Redis is free: its caller was told
// 503, so the batch it stored is removed in the background, not left unindexed and without an
// expiry for ever.
func TestRedisCreateTimeoutLeavesNoBatch(t *testing.T) {
	s, c := newRedis(t, RedisOptions{Prefix: "p", Timeout: 200 * time.Millisecond})
	ctx := context.Background()
	create(t, s, Validating) // the scripts are loaded
	busy := make(chan error, 1)
	go func() {
		// Redis runs one script at a time: this one holds every other command for a second.
		busy <- c.Do(ctx, c.B().Eval().Script(`local s = redis.call('TIME')[1]
while redis.call('TIME')[1] - s < 2 do end
return 1`).Numkeys(0).Build()).Error()
	}()
	time.Sleep(100 * time.Millisecond)
	b := newBatch(Validating)
	err := s.Create(ctx, b)
	require.ErrorIs(t, err, ErrUnavailable)
	require.NoError(t, <-busy)
	require.Eventually(t, func() bool {
		_, err := s.Get(ctx, b.ID)
		return errors.Is(err, ErrNotFound)
	}, 20*time.Second, 50*time.Millisecond, "the batch a refused Create stored is removed")
	ids, err := s.Active(ctx)
	require.NoError(t, err)
	assert.NotContains(t, ids, b.ID)
}

// goneAtIndex is a client whose Redis goes away at the index step, once armed: the first
// command on the indexes, and every command after it, fails as a call that timed out does,
// until back.
type goneAtIndex struct {
	rueidis.Client
	index       string // a key of the indexes
	armed, gone atomic.Bool
}

func (c *goneAtIndex) fails(cmd rueidis.Completed) bool {
	if c.armed.Load() && slices.Contains(cmd.Commands(), c.index) {
		c.gone.Store(true)
	}
	return c.gone.Load()
}

func (c *goneAtIndex) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if c.fails(cmd) {
		return rueidis.NewErrorResult(context.DeadlineExceeded)
	}
	return c.Client.Do(ctx, cmd)
}

func (c *goneAtIndex) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	out := make([]rueidis.RedisResult, len(cmds))
	for _, cmd := range cmds {
		if c.fails(cmd) {
			for j := range out {
				out[j] = rueidis.NewErrorResult(context.DeadlineExceeded)
			}
			return out
		}
	}
	return c.Client.DoMulti(ctx, cmds...)
}

func (c *goneAtIndex) back() {
	c.armed.Store(false)
	c.gone.Store(false)
}

// A Create whose index step fails (Redis went away between the create script and the index
// script) has stored a batch that no index holds: nothing lists it or runs it, and the
// background removal may not reach Redis before it gives up. The batch carries a provisional
// expiry from the create script on, so it goes by itself; once indexed the expiry is the
// batch's normal one (none while it runs, TTL once terminal). Before, such a batch stayed
// without an expiry for ever when Redis was away for longer than the removal's half minute.
func TestRedisCreateUnindexedExpires(t *testing.T) {
	srv := redistest.Start(t)
	raw := srv.NewClient(t)
	c := &goneAtIndex{Client: raw, index: "p:{batches}:index"}
	s := NewRedis(c, RedisOptions{Prefix: "p", TTL: time.Hour, Timeout: time.Second})
	ctx := context.Background()
	provisional := func(id string) bool {
		n, err := raw.Do(ctx, raw.B().Hexists().Key(s.keys(id)[0]).Field("prov").Build()).AsInt64()
		require.NoError(t, err)
		return n == 1
	}

	running := create(t, s, Validating)
	assert.Equal(t, -time.Millisecond, pttl(t, raw, s.keys(running.ID)[0]), "indexed and running: no expiry")
	assert.False(t, provisional(running.ID))
	done := create(t, s, Failed)
	assert.Greater(t, pttl(t, raw, s.keys(done.ID)[0]), 59*time.Minute, "created terminal: the TTL")
	assert.False(t, provisional(done.ID))
	setStatus(t, s, running.ID, Completed)
	assert.Greater(t, pttl(t, raw, s.keys(running.ID)[0]), 59*time.Minute, "terminal: the TTL")

	c.armed.Store(true)
	b := newBatch(Validating)
	require.ErrorIs(t, s.Create(ctx, b), ErrUnavailable)
	require.True(t, c.gone.Load(), "the create script ran, the index script failed")
	left := pttl(t, raw, s.keys(b.ID)[0])
	assert.Positive(t, left, "stored, not indexed: it expires")
	assert.LessOrEqual(t, left, provisionalTTL)
	err := raw.Do(ctx, raw.B().Zscore().Key(s.index[0]).Member(b.ID).Build()).Error()
	assert.True(t, rueidis.IsRedisNil(err), "not indexed: %v", err)

	c.back() // the background removal, retrying, removes it sooner
	require.Eventually(t, func() bool {
		_, err := s.Get(ctx, b.ID)
		return errors.Is(err, ErrNotFound)
	}, 10*time.Second, 50*time.Millisecond)
}

// The provisional expiry is the create's alone: an update before the create settles keeps it
// while the batch runs (the creator may yet be told it failed) and replaces it with the TTL once
// the batch is terminal; settling clears it, unless an update already did.
func TestRedisProvisionalExpiry(t *testing.T) {
	s, c := newRedis(t, RedisOptions{Prefix: "p", TTL: time.Hour})
	ctx := context.Background()
	stored := func(status Status) *Batch { // the create script alone
		b := newBatch(status)
		data, err := encodeBatch(b)
		require.NoError(t, err)
		require.NoError(t, s.exec(ctx, luaCreate, s.keys(b.ID), []string{string(data), string(status),
			flag(status.Accepting()), "0", flag(status.Terminal()), s.ttl, s.prov}).Error())
		return b
	}
	a := stored(Validating)
	key := s.keys(a.ID)[0]
	first := pttl(t, c, key)
	assert.Positive(t, first)
	assert.LessOrEqual(t, first, provisionalTTL)
	setStatus(t, s, a.ID, InProgress)
	assert.Positive(t, pttl(t, c, key), "still provisional while running")
	require.NoError(t, s.settle(ctx, a.ID))
	assert.Equal(t, -time.Millisecond, pttl(t, c, key), "settled: no expiry while running")

	b := stored(Validating)
	setStatus(t, s, b.ID, Cancelled)
	assert.Greater(t, pttl(t, c, s.keys(b.ID)[0]), 59*time.Minute, "terminal: the TTL, not the provisional expiry")
	require.NoError(t, s.settle(ctx, b.ID))
	assert.Greater(t, pttl(t, c, s.keys(b.ID)[0]), 59*time.Minute, "settling keeps the TTL")

	gone := newBatch(Validating)
	require.ErrorIs(t, s.settle(ctx, gone.ID), ErrUnavailable, "expired before it settled: the create failed")
}
