// Package sessionstest is the contract every sessions.Store passes: owners see only their own
// sessions, the turn lock is exclusive and a lease, a commit writes only while its lock holds,
// sessions expire, and a second store sharing the first's state (another replica) continues its
// conversations. sessions.Memory and sessions.Redis run it in their package's tests; a new
// implementation runs it from its own:
//
//	func TestContract(t *testing.T) {
//		sessionstest.Run(t, func(t *testing.T) sessionstest.Harness {
//			clk := newFakeClock()
//			s := mystore.New(clk.Now)
//			return sessionstest.Harness{Store: s, Peer: s, Now: clk.Now, Advance: clk.Add}
//		})
//	}
package sessionstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/stage/sessions"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Harness is a store under the contract, fresh for each case.
type Harness struct {
	Store sessions.Store
	// Peer shares Store's state as another replica's store does (a second client of the same
	// Redis); Store itself for an in-process store.
	Peer sessions.Store
	// Now is the clock the stores measure expiry and leases by.
	Now func() time.Time
	// Advance lets d pass on that clock, for the sessions' expiries and the locks' leases: a fake
	// clock moves at once; for Redis, whose clock cannot move, the harness brings every key's
	// expiry d closer and moves the clock Now reads (the one the store turns Expires into TTLs
	// with).
	Advance func(d time.Duration)
}

// Factory builds a fresh Harness; anything to release is released through t.Cleanup.
type Factory func(t *testing.T) Harness

// The cases' leases and TTLs. A harness on a real clock should move the store's expiries
// (a Redis harness can shorten every key's PTTL) rather than sleep through them.
const (
	Lease = 10 * time.Second
	TTL   = time.Minute
)

// Run runs every case of the contract against stores from f, one subtest per case.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := f(t)
			require.NotNil(t, h.Store)
			require.NotNil(t, h.Peer)
			require.NotNil(t, h.Now)
			require.NotNil(t, h.Advance)
			c.run(t, &h)
		})
	}
}

var cases = []struct {
	name string
	run  func(t *testing.T, h *Harness)
}{
	{"CreateGet", createGet},
	{"OwnersAreIsolated", ownersAreIsolated},
	{"UnknownIDs", unknownIDs},
	{"LockIsExclusive", lockIsExclusive},
	{"CommitStoresAndReleases", commitStoresAndReleases},
	{"LeaseExpires", leaseExpires},
	{"RenewExtendsLease", renewExtendsLease},
	{"SessionsExpire", sessionsExpire},
	{"CommitRefreshesExpiry", commitRefreshesExpiry},
	{"Delete", deleteSession},
	{"PeerContinuesConversation", peerContinuesConversation},
	{"ConcurrentTurnsAreSerialized", concurrentTurns},
}

// newSession stores a fresh session of owner.
func newSession(t *testing.T, h *Harness, owner string) *sessions.Session {
	t.Helper()
	now := h.Now()
	s := &sessions.Session{ID: sessions.NewID(), Owner: owner, Model: "m", Created: now, Expires: now.Add(TTL), TTL: TTL}
	require.NoError(t, h.Store.Create(context.Background(), s))
	return s
}

func msg(role, content string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"role": role, "content": content})
	return b
}

func contents(s *sessions.Session) []string {
	var out []string
	for _, m := range s.Messages {
		var v struct{ Content string }
		_ = json.Unmarshal(m, &v)
		out = append(out, v.Content)
	}
	return out
}

// commit stores msgs as the session's messages, under its lock.
func commit(t *testing.T, st sessions.Store, h *Harness, owner, id string, endpoint string, msgs ...json.RawMessage) {
	t.Helper()
	ctx := context.Background()
	s, token, err := st.Lock(ctx, owner, id, Lease)
	require.NoError(t, err)
	s.Messages, s.Endpoint, s.Expires = append(s.Messages, msgs...), endpoint, h.Now().Add(s.TTL)
	require.NoError(t, st.Commit(ctx, id, token, s))
}

func createGet(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "alice")
	got, err := h.Store.Get(ctx, "alice", s.ID)
	require.NoError(t, err)
	assert.Equal(t, s.ID, got.ID)
	assert.Equal(t, "alice", got.Owner)
	assert.Equal(t, "m", got.Model)
	assert.Equal(t, s.Created.UnixMilli(), got.Created.UnixMilli())
	assert.Equal(t, s.Expires.UnixMilli(), got.Expires.UnixMilli())
	assert.Equal(t, TTL, got.TTL)
	assert.Empty(t, got.Messages)
	assert.Empty(t, got.Endpoint)

	commit(t, h.Store, h, "alice", s.ID, "e1", msg("user", "hi"), msg("assistant", "hello"))
	got, err = h.Peer.Get(ctx, "alice", s.ID)
	require.NoError(t, err)
	assert.Equal(t, []string{"hi", "hello"}, contents(got))
	assert.Equal(t, "e1", got.Endpoint)
	// What a caller does with its copy is not the store's.
	got.Messages[0] = msg("user", "changed")
	again, err := h.Store.Get(ctx, "alice", s.ID)
	require.NoError(t, err)
	assert.Equal(t, []string{"hi", "hello"}, contents(again))
}

func ownersAreIsolated(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "alice")
	anon := newSession(t, h, "") // API keys off: the empty owner is an owner like any other
	for _, other := range []string{"bob", "", "alice "} {
		_, err := h.Store.Get(ctx, other, s.ID)
		assert.ErrorIs(t, err, sessions.ErrNotFound, "owner %q", other)
		_, _, err = h.Peer.Lock(ctx, other, s.ID, Lease)
		assert.ErrorIs(t, err, sessions.ErrNotFound, "owner %q", other)
		_, err = h.Store.Delete(ctx, other, s.ID)
		assert.ErrorIs(t, err, sessions.ErrNotFound, "owner %q", other)
	}
	_, err := h.Store.Get(ctx, "alice", anon.ID)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
	_, err = h.Store.Get(ctx, "", anon.ID)
	assert.NoError(t, err)
	// Still there, and not locked by the refused attempts.
	_, token, err := h.Store.Lock(ctx, "alice", s.ID, Lease)
	require.NoError(t, err)
	require.NoError(t, h.Store.Unlock(ctx, s.ID, token))
}

func unknownIDs(t *testing.T, h *Harness) {
	ctx := context.Background()
	id := sessions.NewID()
	_, err := h.Store.Get(ctx, "", id)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
	_, _, err = h.Store.Lock(ctx, "", id, Lease)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
	_, err = h.Store.Delete(ctx, "", id)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
	err = h.Store.Renew(ctx, id, "token", Lease)
	assert.True(t, errors.Is(err, sessions.ErrLockLost) || errors.Is(err, sessions.ErrNotFound), "%v", err)
	err = h.Store.Commit(ctx, id, "token", &sessions.Session{ID: id, Model: "m", TTL: TTL, Expires: h.Now().Add(TTL)})
	assert.True(t, errors.Is(err, sessions.ErrLockLost) || errors.Is(err, sessions.ErrNotFound), "%v", err)
	_, err = h.Store.Get(ctx, "", id)
	assert.ErrorIs(t, err, sessions.ErrNotFound, "a failed commit creates nothing")
	assert.NoError(t, h.Store.Unlock(ctx, id, "token"))
}

func lockIsExclusive(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	_, token, err := h.Store.Lock(ctx, "a", s.ID, Lease)
	require.NoError(t, err)
	require.NotEmpty(t, token)
	_, _, err = h.Store.Lock(ctx, "a", s.ID, Lease)
	assert.ErrorIs(t, err, sessions.ErrBusy)
	_, _, err = h.Peer.Lock(ctx, "a", s.ID, Lease)
	assert.ErrorIs(t, err, sessions.ErrBusy, "the lock is shared with the peer")
	require.NoError(t, h.Peer.Unlock(ctx, s.ID, "not the token"))
	_, _, err = h.Store.Lock(ctx, "a", s.ID, Lease)
	assert.ErrorIs(t, err, sessions.ErrBusy, "only the token releases the lock")
	require.NoError(t, h.Peer.Unlock(ctx, s.ID, token))
	_, token2, err := h.Store.Lock(ctx, "a", s.ID, Lease)
	require.NoError(t, err)
	assert.NotEqual(t, token, token2)
}

func commitStoresAndReleases(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	got, token, err := h.Store.Lock(ctx, "a", s.ID, Lease)
	require.NoError(t, err)
	got.Messages, got.Endpoint = []json.RawMessage{msg("user", "1"), msg("assistant", "2")}, "e1"
	require.NoError(t, h.Store.Commit(ctx, s.ID, token, got))
	// Released: the next turn may go, and the old token is spent.
	got2, token2, err := h.Peer.Lock(ctx, "a", s.ID, Lease)
	require.NoError(t, err)
	assert.Equal(t, []string{"1", "2"}, contents(got2))
	assert.Equal(t, "e1", got2.Endpoint)
	stale := *got
	stale.Messages = []json.RawMessage{msg("user", "stale")}
	assert.ErrorIs(t, h.Store.Commit(ctx, s.ID, token, &stale), sessions.ErrLockLost)
	require.NoError(t, h.Peer.Unlock(ctx, s.ID, token2))
	now, err := h.Store.Get(ctx, "a", s.ID)
	require.NoError(t, err)
	assert.Equal(t, []string{"1", "2"}, contents(now), "a commit without the lock writes nothing")
}

func leaseExpires(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	got, token, err := h.Store.Lock(ctx, "a", s.ID, Lease)
	require.NoError(t, err)
	h.Advance(Lease + Lease/4)
	later, token2, err := h.Peer.Lock(ctx, "a", s.ID, Lease)
	require.NoError(t, err, "a lease that ran out frees the session (its holder died)")
	assert.ErrorIs(t, h.Store.Renew(ctx, s.ID, token, Lease), sessions.ErrLockLost)
	got.Messages = []json.RawMessage{msg("user", "late")}
	got.Expires = h.Now().Add(TTL)
	assert.ErrorIs(t, h.Store.Commit(ctx, s.ID, token, got), sessions.ErrLockLost)
	later.Messages = []json.RawMessage{msg("user", "on time")}
	later.Expires = h.Now().Add(TTL)
	require.NoError(t, h.Peer.Commit(ctx, s.ID, token2, later))
	now, err := h.Store.Get(ctx, "a", s.ID)
	require.NoError(t, err)
	assert.Equal(t, []string{"on time"}, contents(now))
}

func renewExtendsLease(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	_, token, err := h.Store.Lock(ctx, "a", s.ID, Lease)
	require.NoError(t, err)
	h.Advance(Lease * 2 / 3)
	require.NoError(t, h.Store.Renew(ctx, s.ID, token, Lease))
	h.Advance(Lease * 2 / 3)
	_, _, err = h.Peer.Lock(ctx, "a", s.ID, Lease)
	assert.ErrorIs(t, err, sessions.ErrBusy, "renewed: still held past the first lease")
	assert.ErrorIs(t, h.Store.Renew(ctx, s.ID, "not the token", Lease), sessions.ErrLockLost)
}

func sessionsExpire(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	h.Advance(TTL + TTL/4)
	_, err := h.Store.Get(ctx, "a", s.ID)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
	_, _, err = h.Peer.Lock(ctx, "a", s.ID, Lease)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
	_, err = h.Store.Delete(ctx, "a", s.ID)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
}

func commitRefreshesExpiry(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	h.Advance(TTL * 2 / 3)
	commit(t, h.Store, h, "a", s.ID, "", msg("user", "1"))
	h.Advance(TTL * 2 / 3)
	got, err := h.Peer.Get(ctx, "a", s.ID)
	require.NoError(t, err, "the turn pushed the expiry a TTL on")
	assert.Equal(t, []string{"1"}, contents(got))
	assert.True(t, got.Expires.After(s.Expires), "Expires moved on: %v, was %v", got.Expires, s.Expires)
}

func deleteSession(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	model, err := h.Store.Delete(ctx, "a", s.ID)
	require.NoError(t, err)
	assert.Equal(t, "m", model)
	_, err = h.Peer.Get(ctx, "a", s.ID)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
	_, err = h.Peer.Delete(ctx, "a", s.ID)
	assert.ErrorIs(t, err, sessions.ErrNotFound)

	// Deleted during a turn: the turn's commit does not bring it back.
	s = newSession(t, h, "a")
	got, token, err := h.Store.Lock(ctx, "a", s.ID, Lease)
	require.NoError(t, err)
	_, err = h.Peer.Delete(ctx, "a", s.ID)
	require.NoError(t, err)
	got.Messages = []json.RawMessage{msg("user", "1")}
	err = h.Store.Commit(ctx, s.ID, token, got)
	assert.True(t, errors.Is(err, sessions.ErrLockLost) || errors.Is(err, sessions.ErrNotFound), "%v", err)
	_, err = h.Store.Get(ctx, "a", s.ID)
	assert.ErrorIs(t, err, sessions.ErrNotFound)
}

func peerContinuesConversation(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	commit(t, h.Store, h, "a", s.ID, "e1", msg("user", "q1"), msg("assistant", "a1"))
	commit(t, h.Peer, h, "a", s.ID, "e2", msg("user", "q2"), msg("assistant", "a2"))
	commit(t, h.Store, h, "a", s.ID, "e1", msg("user", "q3"), msg("assistant", "a3"))
	got, err := h.Peer.Get(ctx, "a", s.ID)
	require.NoError(t, err)
	assert.Equal(t, []string{"q1", "a1", "q2", "a2", "q3", "a3"}, contents(got))
	assert.Equal(t, "e1", got.Endpoint)
}

// concurrentTurns runs turns from many goroutines on both stores, each retrying while the
// session is busy: every turn is stored once, whole, none lost.
func concurrentTurns(t *testing.T, h *Harness) {
	ctx := context.Background()
	s := newSession(t, h, "a")
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		st := h.Store
		if i%2 == 1 {
			st = h.Peer
		}
		wg.Go(func() {
			for {
				got, token, err := st.Lock(ctx, "a", s.ID, 10*time.Second)
				if errors.Is(err, sessions.ErrBusy) {
					time.Sleep(time.Millisecond)
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				got.Messages = append(got.Messages, msg("user", fmt.Sprint("q", i)), msg("assistant", fmt.Sprint("a", i)))
				got.Expires = h.Now().Add(TTL * 100)
				assert.NoError(t, st.Commit(ctx, s.ID, token, got))
				return
			}
		})
	}
	wg.Wait()
	got, err := h.Store.Get(ctx, "a", s.ID)
	require.NoError(t, err)
	c := contents(got)
	require.Len(t, c, 2*n, "every turn stored")
	seen := map[string]bool{}
	for i := 0; i < len(c); i += 2 {
		require.Equal(t, "q", c[i][:1])
		assert.Equal(t, "a"+c[i][1:], c[i+1], "a turn's two messages stay together")
		assert.False(t, seen[c[i]], "turn %s stored twice", c[i])
		seen[c[i]] = true
	}
}
