package registry

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// After Redis restarts empty, a watcher resubscribes and resyncs: what was registered before is
// removed, what is registered after is added, though none of it was ever published to it.
func TestRedisResyncAfterRestart(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newRedisReplica(t, srv), newRedisReplica(t, srv)
	ctx := context.Background()
	w := watch(t, b)
	require.Eventually(t, w.synced, wait, 5*time.Millisecond)
	old, err := a.Register(ctx, chat("old", "http://127.0.0.1:1"), time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.has(Added, old.ID) }, wait, 5*time.Millisecond)

	srv.Restart()
	var fresh Lease
	require.Eventually(t, func() bool {
		fresh, err = a.Register(ctx, chat("fresh", "http://127.0.0.1:2"), time.Minute)
		return err == nil
	}, wait, 20*time.Millisecond, "the client reconnects")
	require.Eventually(t, func() bool { return w.has(Removed, old.ID) && w.has(Added, fresh.ID) }, wait, 5*time.Millisecond,
		"events: %v", w.all())
	assert.Equal(t, []string{fresh.ID}, keys(w.live()))

	// And the subscription works again for later changes. (A write may still meet a pooled
	// connection that died with the old server: it fails with EOF and is not retried by the
	// client, as no non-idempotent script is; the caller retries.)
	var later Lease
	require.Eventually(t, func() bool {
		later, err = a.Register(ctx, chat("later", "http://127.0.0.1:3"), time.Minute)
		return err == nil
	}, wait, 20*time.Millisecond)
	require.Eventually(t, func() bool { return w.has(Added, later.ID) }, wait, 5*time.Millisecond)
}

// Changes made while a watcher's subscription is down reach it through the resync.
func TestRedisResyncAfterLostSubscription(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newRedisReplica(t, srv), newRedisReplica(t, srv)
	admin := srv.NewClient(t)
	ctx := context.Background()
	w := watch(t, b)
	require.Eventually(t, w.synced, wait, 5*time.Millisecond)
	gone, err := a.Register(ctx, chat("gone", "http://127.0.0.1:1"), time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.has(Added, gone.ID) }, wait, 5*time.Millisecond)

	// Kill every subscribed connection (the watcher's), then change things at once.
	killed, err := admin.Do(ctx, admin.B().ClientKill().TypePubsub().Build()).AsInt64()
	require.NoError(t, err)
	require.Positive(t, killed)
	require.NoError(t, a.Deregister(ctx, gone.ID))
	added, err := a.Register(ctx, chat("added", "http://127.0.0.1:2"), time.Minute)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return w.has(Removed, gone.ID) && w.has(Added, added.ID) }, wait, 5*time.Millisecond,
		"events: %v", w.all())
	assert.Equal(t, []string{added.ID}, keys(w.live()))
}

// Whatever else is published on the channel or written to the keys is not trusted: malformed
// messages are ignored, a gap in the counter triggers a resync, undecodable backends are left out.
func TestRedisUntrustedData(t *testing.T) {
	srv := redistest.Start(t)
	a, b := newRedisReplica(t, srv), newRedisReplica(t, srv)
	admin := srv.NewClient(t)
	ctx := context.Background()
	w := watch(t, b)
	require.Eventually(t, w.synced, wait, 5*time.Millisecond)
	publish := func(msg string) {
		require.NoError(t, admin.Do(ctx, admin.B().Publish().Channel(a.channel).Message(msg).Build()).Error())
	}
	for _, m := range []string{"", "+", "?1:x:", "+0:" + newLeaseID() + ":", "+1:short:", "-1:" + newLeaseID() + ":payload",
		"+99999999999999999999:" + newLeaseID() + ":"} {
		publish(m)
	}
	// A well-formed message with a far-ahead counter is a gap: the watcher resyncs from the data,
	// where this lease is not.
	bogus := newLeaseID()
	publish(encodeChange(change{op: '+', seq: 1 << 40, leaseID: bogus, payload: string(mustEncode(t, chat("bogus", "http://h")))}))
	real, err := a.Register(ctx, chat("real", "http://127.0.0.1:1"), time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.has(Added, real.ID) }, wait, 5*time.Millisecond)
	assert.False(t, w.has(Added, bogus))
	assert.Equal(t, []string{real.ID}, keys(w.live()))

	// Garbage written under a live lease is left out of listings and snapshots.
	junk := newLeaseID()
	require.NoError(t, admin.Do(ctx, admin.B().Zadd().Key(a.keys[0]).ScoreMember().ScoreMember(float64(time.Now().Add(time.Hour).UnixMilli()), junk).Build()).Error())
	require.NoError(t, admin.Do(ctx, admin.B().Hset().Key(a.keys[1]).FieldValue().FieldValue(junk, "\xff\xff not a backend").Build()).Error())
	assert.Equal(t, []string{real.ID}, keys(listed(t, a)))
	w2 := watch(t, a)
	require.Eventually(t, w2.synced, wait, 5*time.Millisecond)
	assert.Equal(t, []string{real.ID}, keys(w2.live()))
}

// Every key carries the same hash tag (one Cluster slot), and leases expire by Redis's clock.
func TestRedisLayout(t *testing.T) {
	srv := redistest.Start(t)
	s := NewRedisStore(srv.NewClient(t), RedisOptions{Prefix: "gw1", Logger: quiet()})
	t.Cleanup(s.Close)
	admin := srv.NewClient(t)
	ctx := context.Background()
	for _, k := range append(s.keys, s.channel) {
		assert.True(t, strings.HasPrefix(k, "gw1:{registry}:"), k)
	}
	l, err := s.Register(ctx, chat("m", "http://h"), 30*time.Second)
	require.NoError(t, err)
	all, err := admin.Do(ctx, admin.B().Keys().Pattern("*").Build()).AsStrSlice()
	require.NoError(t, err)
	assert.ElementsMatch(t, s.keys, all)

	tm, err := admin.Do(ctx, admin.B().Time().Build()).AsStrSlice()
	require.NoError(t, err)
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	serverNow := time.UnixMicro(sec*1e6 + usec)
	score, err := admin.Do(ctx, admin.B().Zscore().Key(s.keys[0]).Member(l.ID).Build()).AsFloat64()
	require.NoError(t, err)
	assert.Equal(t, l.Expires.UnixMilli(), int64(score))
	assert.WithinDuration(t, serverNow.Add(30*time.Second), time.UnixMilli(int64(score)), 5*time.Second)

	// Another prefix is another registry.
	other := NewRedisStore(srv.NewClient(t), RedisOptions{Prefix: "gw2", Logger: quiet()})
	t.Cleanup(other.Close)
	assert.Empty(t, listed(t, other))
}

func mustEncode(t *testing.T, b *registryv1.Backend) []byte {
	t.Helper()
	p, err := encodeBackend(b)
	require.NoError(t, err)
	return p
}

// With Redis hanging (or gone), RegistryService calls answer UNAVAILABLE with a retry hint within
// StoreTimeout instead of waiting for Redis; the caller's own deadline stays its own.
func TestServiceStoreTimeout(t *testing.T) {
	srv := redistest.Start(t)
	px := redistest.StartProxy(t, srv.Addr)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{px.Addr}, DisableCache: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	store := NewRedisStore(c, RedisOptions{Logger: quiet()})
	t.Cleanup(store.Close)
	svc := NewService(store, ServiceOptions{Logger: quiet(), StoreTimeout: 200 * time.Millisecond})
	ctx := context.Background()
	_, err = svc.ListBackends(ctx, &registryv1.ListBackendsRequest{})
	require.NoError(t, err)

	px.Freeze()
	for name, call := range map[string]func() error{
		"Register": func() error {
			_, err := svc.Register(ctx, &registryv1.RegisterRequest{Backend: chat("m", "http://127.0.0.1:1")})
			return err
		},
		"Heartbeat": func() error {
			_, err := svc.Heartbeat(ctx, &registryv1.HeartbeatRequest{LeaseId: "0123456789abcdef0123456789abcdef"})
			return err
		},
		"ListBackends": func() error { _, err := svc.ListBackends(ctx, &registryv1.ListBackendsRequest{}); return err },
	} {
		start := time.Now()
		err := call()
		assert.Less(t, time.Since(start), 5*time.Second, "%s waits for its timeout, not for Redis", name)
		assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%s: %v", name, err)
		var ce *connect.Error
		if assert.ErrorAs(t, err, &ce) {
			assert.Equal(t, "1", ce.Meta().Get("Retry-After"), name)
		}
	}
	// A caller whose own deadline has passed hears DEADLINE_EXCEEDED, not the store's
	// unavailability. (Its deadline is already past: a store that fails fast, as rueidis may on
	// a connection it gave up on, would otherwise race a short one.)
	late, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, err = svc.ListBackends(late, &registryv1.ListBackendsRequest{})
	assert.Equal(t, connect.CodeDeadlineExceeded, connect.CodeOf(err), "the caller's own deadline")
	px.Thaw()
	require.Eventually(t, func() bool {
		_, err := svc.ListBackends(ctx, &registryv1.ListBackendsRequest{})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
}
