package responsestate_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/responsestate"
	"github.com/infergate/infergate/store/responsestate/responsestatetest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRedisContract runs responsestatetest's suite against Redis: each replica a store with its
// own client on the same redis-server, as another gateway replica would have.
func TestRedisContract(t *testing.T) {
	responsestatetest.Run(t, func(t *testing.T, opts responsestatetest.Options) func() responsestate.Store {
		srv := redistest.Start(t)
		return func() responsestate.Store {
			return responsestate.NewRedis(srv.NewClient(t), responsestate.RedisOptions{
				Prefix: "test", TTL: opts.TTL, MaxRecordBytes: opts.MaxRecordBytes})
		}
	})
}

func newRedis(t *testing.T, opts responsestate.RedisOptions) (*responsestate.Redis, rueidis.Client) {
	srv := redistest.Start(t)
	c := srv.NewClient(t)
	return responsestate.NewRedis(c, opts), c
}

// One key per response, <prefix>:responses:<id>, expiring at CreatedAt plus the TTL.
func TestRedisKeyAndTTL(t *testing.T) {
	s, c := newRedis(t, responsestate.RedisOptions{Prefix: "p", TTL: time.Hour})
	ctx := context.Background()
	r := record("resp_1", time.Now().Add(-10*time.Minute), 500)
	require.NoError(t, s.Put(ctx, r))
	keys, err := c.Do(ctx, c.B().Keys().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	assert.Equal(t, []string{"p:responses:resp_1"}, keys)
	ms, err := c.Do(ctx, c.B().Pttl().Key("p:responses:resp_1").Build()).AsInt64()
	require.NoError(t, err)
	left := time.Duration(ms) * time.Millisecond
	assert.Greater(t, left, 49*time.Minute, "the TTL counts from CreatedAt")
	assert.LessOrEqual(t, left, 50*time.Minute)

	d := responsestate.NewRedis(c, responsestate.RedisOptions{})
	require.NoError(t, d.Put(ctx, record("resp_2", time.Now(), 500)))
	ms, err = c.Do(ctx, c.B().Pttl().Key("infergate:responses:resp_2").Build()).AsInt64()
	require.NoError(t, err)
	assert.Greater(t, time.Duration(ms)*time.Millisecond, responsestate.DefaultTTL-time.Minute, "the defaults")
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

// A previous_response_id lookup is one round trip; so are a Put and (its script loaded) a Delete.
func TestRedisOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := &countingClient{Client: srv.NewClient(t)}
	s := responsestate.NewRedis(c, responsestate.RedisOptions{})
	ctx := context.Background()
	require.ErrorIs(t, s.Delete(ctx, "o", "resp_warm"), responsestate.ErrNotFound) // loads the script
	trips := func(f func()) int64 {
		before := c.trips.Load()
		f()
		return c.trips.Load() - before
	}
	r := record("resp_1", time.Now(), 2000)
	assert.Equal(t, int64(1), trips(func() { require.NoError(t, s.Put(ctx, r)) }), "put")
	assert.Equal(t, int64(1), trips(func() {
		_, err := s.Get(ctx, "o", r.ID)
		require.NoError(t, err)
	}), "get")
	assert.Equal(t, int64(1), trips(func() { require.NoError(t, s.Delete(ctx, "o", r.ID)) }), "delete")
}

// A value that is not a record's encoding is an error, for its owner or anyone (never a panic,
// and never taken for an absent response), and Delete by another owner leaves it.
func TestRedisCorruptValue(t *testing.T) {
	s, c := newRedis(t, responsestate.RedisOptions{Prefix: "p"})
	ctx := context.Background()
	good := record("resp_good", time.Now(), 500)
	require.NoError(t, s.Put(ctx, good))
	stored, err := c.Do(ctx, c.B().Get().Key("p:responses:resp_good").Build()).ToString()
	require.NoError(t, err)
	for name, v := range map[string]string{
		"empty":         "",
		"json":          `{"id":"resp_x","owner":"o"}`,
		"truncated":     stored[:len(stored)-10],
		"trailing":      stored + "x",
		"version":       strings.Replace(stored, "1:o1", "1:o9", 1),
		"owner past":    "99:o",
		"another id's":  stored,
		"huge count":    stored[:len(stored)-2] + "\xff\xff\xff\xff\x0f\x00", // input items
		"leading zero":  "01:o" + stored[3:],
		"not a decimal": "x:o" + stored[3:],
	} {
		id := "resp_x"
		if name == "another id's" {
			id = "resp_other"
		}
		require.NoError(t, c.Do(ctx, c.B().Set().Key("p:responses:"+id).Value(v).Build()).Error())
		for _, owner := range []string{"o", "x"} {
			_, err := s.Get(ctx, owner, id)
			require.Error(t, err, "%s, owner %s", name, owner)
			assert.NotErrorIs(t, err, responsestate.ErrNotFound, "%s, owner %s", name, owner)
			assert.Contains(t, err.Error(), "corrupt", name)
		}
		assert.ErrorIs(t, s.Delete(ctx, "x", id), responsestate.ErrNotFound, name)
	}
}

// With Redis killed or hung, each method fails with an error that is not ErrNotFound (the
// caller answers 503, not 404) within the store's Timeout; once Redis answers again, so does
// the store.
func TestRedisUnreachable(t *testing.T) {
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
			s := responsestate.NewRedis(c, responsestate.RedisOptions{Timeout: 300 * time.Millisecond})
			ctx := context.Background() // no deadline of the caller's
			r := record("resp_1", time.Now(), 500)
			require.NoError(t, s.Put(ctx, r))
			if mode == "hung" {
				px.Freeze()
			} else {
				srv.Kill()
			}
			calls := map[string]func() error{
				"Put":    func() error { return s.Put(ctx, record("resp_2", time.Now(), 500)) },
				"Get":    func() error { _, err := s.Get(ctx, "o", r.ID); return err },
				"Delete": func() error { return s.Delete(ctx, "o", r.ID) },
			}
			for name, call := range calls {
				done := make(chan error, 1)
				go func() { done <- call() }()
				select {
				case err := <-done:
					require.Error(t, err, name)
					assert.NotErrorIs(t, err, responsestate.ErrNotFound, name)
					assert.NotErrorIs(t, err, responsestate.ErrTooLarge, name)
				case <-time.After(10 * time.Second):
					t.Fatalf("%s still waits for Redis after 10 s", name)
				}
			}
			if mode == "hung" {
				px.Thaw()
				_, err := s.Get(ctx, "o", r.ID)
				require.NoError(t, err)
			} else {
				srv.Restart()
				_, err := s.Get(ctx, "o", r.ID)
				require.ErrorIs(t, err, responsestate.ErrNotFound, "the new server starts empty")
			}
		})
	}
}

// MaxRecordBytes bounds what Redis stores: the encoding, a little more than Size.
func TestRedisMaxRecordBytesIsTheEncoding(t *testing.T) {
	s, _ := newRedis(t, responsestate.RedisOptions{MaxRecordBytes: 1000})
	ctx := context.Background()
	r := record("resp_1", time.Now(), 1000)
	require.ErrorIs(t, s.Put(ctx, r), responsestate.ErrTooLarge, "Size 1000 plus the encoding's bytes")
	r = record("resp_1", time.Now(), 960)
	for range 20 {
		r.Input = append(r.Input, json.RawMessage(`1`))
	}
	require.ErrorIs(t, s.Put(ctx, r), responsestate.ErrTooLarge, "Size 980 plus a byte of length an item and 16 more")
	require.NoError(t, s.Put(ctx, record("resp_1", time.Now(), 980)), "Size 980 plus 16")
}
