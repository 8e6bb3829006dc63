// Package responsestatetest is the contract every responsestate.Store passes: a record comes
// back as it was put (CreatedAt to the millisecond, which is what Redis keeps; empty values and
// lists may come back nil), to its owner only (another owner's Get and Delete are ErrNotFound,
// and that Delete leaves it), until it is deleted, replaced or its TTL from CreatedAt passes; a
// record over the store's bound on one record is refused whole; all of it seen alike by every
// replica of a shared store and safe from many goroutines. responsestate.Memory and
// responsestate.Redis run it in their package's tests; a new implementation runs it from its
// own:
//
//	func TestContract(t *testing.T) {
//		responsestatetest.Run(t, func(t *testing.T, opts responsestatetest.Options) func() responsestate.Store {
//			srv := startServer(t) // fresh, empty state for each case
//			return func() responsestate.Store {
//				return mystore.New(srv.Client(t), mystore.Options{TTL: opts.TTL, MaxRecordBytes: opts.MaxRecordBytes})
//			}
//		})
//	}
//
// Each case is a subtest named after the behaviour it checks (RoundTrip, Owners, ...), on
// stores of its own from the Factory; the cases run one after another.
package responsestatetest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/store/responsestate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Options are what a case needs of the stores it is given; a zero field is the store's default.
type Options struct {
	// TTL is how long a record is kept after its CreatedAt; the Expiry case sets 200 ms and
	// expects records gone within 5 s.
	TTL time.Duration
	// MaxRecordBytes bounds one record; the TooLarge case sets 4096 and puts records of about
	// 1 KB (which must fit, with whatever the store adds) and 8 KB (which must not).
	MaxRecordBytes int
}

// Factory returns a function that makes replicas of one store holding no record yet: each call
// returns a store over the same data (for an in-process store, the same one each time; for a
// shared one, a new store with its own client, as another gateway replica has), and over no
// other Factory call's data. Anything to release when the test ends is released through
// t.Cleanup.
type Factory func(t *testing.T, opts Options) (replica func() responsestate.Store)

// Run runs every case of the contract against stores from f, one subtest per case.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			replica := f(t, c.opts)
			require.NotNil(t, replica, "the factory returned no replica function")
			c.run(t, replica)
		})
	}
}

var cases = []struct {
	name string
	opts Options
	run  func(t *testing.T, replica func() responsestate.Store)
}{
	{name: "RoundTrip", run: roundTrip},
	{name: "Owners", run: owners},
	{name: "EmptyOwner", run: emptyOwner},
	{name: "NotFound", run: notFound},
	{name: "Delete", run: deleteTwice},
	{name: "Replace", run: replace},
	{name: "Invalid", run: invalid},
	{name: "TooLarge", opts: Options{MaxRecordBytes: 4096}, run: tooLarge},
	{name: "Expiry", opts: Options{TTL: 200 * time.Millisecond}, run: expiry},
	{name: "Replicas", run: replicas},
	{name: "Concurrent", run: concurrent},
}

func roundTrip(t *testing.T, replica func() responsestate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in := newRecord("key-a")
	// Bytes encoding/json would change: whitespace, and <, > and & that it escapes.
	in.Input = append(in.Input, json.RawMessage("{ \"text\": \"a <b> & c\" }\n"), json.RawMessage(`"é\u00e9"`))
	in.Context = []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`), json.RawMessage(`[]`)}
	require.NoError(t, a.Put(ctx, in))

	got, err := b.Get(ctx, "key-a", in.ID)
	require.NoError(t, err, "another replica reads it")
	assertSame(t, in, got)
	got, err = a.Get(ctx, "key-a", in.ID)
	require.NoError(t, err)
	assertSame(t, in, got)
}

func owners(t *testing.T, replica func() responsestate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in := newRecord("key-a")
	put(t, a, in)

	_, err := b.Get(ctx, "key-b", in.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "another owner's Get")
	_, err = b.Get(ctx, "key-", in.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "an owner that is a prefix of the owner")
	_, err = b.Get(ctx, "key-aa", in.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "an owner the owner is a prefix of")
	assert.ErrorIs(t, b.Delete(ctx, "key-b", in.ID), responsestate.ErrNotFound, "another owner's Delete")
	assert.ErrorIs(t, b.Delete(ctx, "", in.ID), responsestate.ErrNotFound, "no owner's Delete")
	assert.ErrorIs(t, a.Delete(ctx, "key-aa", in.ID), responsestate.ErrNotFound)

	got, err := a.Get(ctx, "key-a", in.ID)
	require.NoError(t, err, "another owner's Delete leaves it")
	assertSame(t, in, got)
	require.NoError(t, b.Delete(ctx, "key-a", in.ID), "its owner deletes it")
	_, err = a.Get(ctx, "key-a", in.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound)
}

// With API keys off every response's owner is "": it is an owner like another.
func emptyOwner(t *testing.T, replica func() responsestate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	none := newRecord("")
	keyed := newRecord("k")
	put(t, a, none)
	put(t, a, keyed)

	got, err := b.Get(ctx, "", none.ID)
	require.NoError(t, err)
	assertSame(t, none, got)
	_, err = b.Get(ctx, "k", none.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "a keyed caller does not see an unowned response")
	_, err = b.Get(ctx, "", keyed.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "an unkeyed caller does not see a keyed response")
	assert.ErrorIs(t, b.Delete(ctx, "", keyed.ID), responsestate.ErrNotFound)
	_, err = a.Get(ctx, "k", keyed.ID)
	require.NoError(t, err)
	require.NoError(t, b.Delete(ctx, "", none.ID))
	_, err = a.Get(ctx, "", none.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound)
}

func notFound(t *testing.T, replica func() responsestate.Store) {
	a := replica()
	ctx := context.Background()
	put(t, a, newRecord("o")) // not empty
	for _, id := range []string{newID(), "", "resp_", "*", "resp_?*", strings.Repeat("x", 1000)} {
		_, err := a.Get(ctx, "o", id)
		assert.ErrorIs(t, err, responsestate.ErrNotFound, "get %q", id)
		assert.ErrorIs(t, a.Delete(ctx, "o", id), responsestate.ErrNotFound, "delete %q", id)
	}
}

func deleteTwice(t *testing.T, replica func() responsestate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in, other := newRecord("o"), newRecord("o")
	put(t, a, in)
	put(t, a, other)
	require.NoError(t, a.Delete(ctx, "o", in.ID))
	_, err := a.Get(ctx, "o", in.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound)
	_, err = b.Get(ctx, "o", in.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "gone for every replica")
	assert.ErrorIs(t, b.Delete(ctx, "o", in.ID), responsestate.ErrNotFound, "a second Delete")
	assert.ErrorIs(t, a.Delete(ctx, "o", in.ID), responsestate.ErrNotFound)
	got, err := b.Get(ctx, "o", other.ID)
	require.NoError(t, err, "the others stay")
	assertSame(t, other, got)
}

func replace(t *testing.T, replica func() responsestate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in := newRecord("o")
	put(t, a, in)
	next := newRecord("o")
	next.ID = in.ID
	next.Model = "other-model"
	next.Response = json.RawMessage(`{"id":"` + in.ID + `","status":"completed","output":[]}`)
	next.Input = next.Input[:1]
	next.Context = nil
	put(t, b, next)
	got, err := a.Get(ctx, "o", in.ID)
	require.NoError(t, err)
	assertSame(t, next, got)

	// Smaller, then larger again: nothing of the old one shows through.
	put(t, a, in)
	got, err = b.Get(ctx, "o", in.ID)
	require.NoError(t, err)
	assertSame(t, in, got)
}

func invalid(t *testing.T, replica func() responsestate.Store) {
	a := replica()
	ctx := context.Background()
	for name, r := range map[string]*responsestate.Record{"nil": nil, "no id": {Owner: "o", CreatedAt: time.Now()}} {
		err := a.Put(ctx, r)
		require.Error(t, err, name)
		assert.NotErrorIs(t, err, responsestate.ErrNotFound, name)
	}
	_, err := a.Get(ctx, "o", "")
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "nothing was stored under no id")
}

// A record over the bound is refused whole: nothing stored, and the record it would have
// replaced stays.
func tooLarge(t *testing.T, replica func() responsestate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	small := sized("o", 1024)
	put(t, a, small)
	large := sized("o", 8192)
	require.ErrorIs(t, a.Put(ctx, large), responsestate.ErrTooLarge)
	_, err := b.Get(ctx, "o", large.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "not stored")

	large.ID = small.ID
	require.ErrorIs(t, b.Put(ctx, large), responsestate.ErrTooLarge)
	got, err := a.Get(ctx, "o", small.ID)
	require.NoError(t, err, "a refused Put leaves the record it would have replaced")
	assertSame(t, small, got)
}

// A record goes once its TTL has passed since its CreatedAt (not since its Put).
func expiry(t *testing.T, replica func() responsestate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	fresh := newRecord("o")
	put(t, a, fresh)
	got, err := b.Get(ctx, "o", fresh.ID)
	require.NoError(t, err, "kept until the TTL passes")
	assertSame(t, fresh, got)

	old := newRecord("o")
	old.CreatedAt = time.Now().Add(-time.Hour)
	require.NoError(t, a.Put(ctx, old), "an expired record is no error")
	_, err = b.Get(ctx, "o", old.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "expired when put: not kept")

	// An expired Put replaces the record with nothing.
	gone := newRecord("o")
	put(t, a, gone)
	again := newRecord("o")
	again.ID, again.CreatedAt = gone.ID, old.CreatedAt
	require.NoError(t, b.Put(ctx, again))
	_, err = a.Get(ctx, "o", gone.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound, "replaced by an expired record")

	require.Eventually(t, func() bool {
		_, err := b.Get(ctx, "o", fresh.ID)
		return errors.Is(err, responsestate.ErrNotFound)
	}, 5*time.Second, 10*time.Millisecond, "gone after its TTL")
	_, err = a.Get(ctx, "o", fresh.ID)
	assert.ErrorIs(t, err, responsestate.ErrNotFound)
	assert.ErrorIs(t, a.Delete(ctx, "o", fresh.ID), responsestate.ErrNotFound)
}

// What one replica puts and deletes, every other sees at once.
func replicas(t *testing.T, replica func() responsestate.Store) {
	stores := []responsestate.Store{replica(), replica(), replica()}
	ctx := context.Background()
	var recs []*responsestate.Record
	for i, s := range stores {
		r := newRecord(fmt.Sprintf("o%d", i%2))
		put(t, s, r)
		recs = append(recs, r)
	}
	for _, s := range stores {
		for _, r := range recs {
			got, err := s.Get(ctx, r.Owner, r.ID)
			require.NoError(t, err)
			assertSame(t, r, got)
		}
	}
	require.NoError(t, stores[2].Delete(ctx, recs[0].Owner, recs[0].ID))
	for _, s := range stores {
		_, err := s.Get(ctx, recs[0].Owner, recs[0].ID)
		assert.ErrorIs(t, err, responsestate.ErrNotFound)
		assert.ErrorIs(t, s.Delete(ctx, recs[0].Owner, recs[0].ID), responsestate.ErrNotFound)
	}
}

// Many goroutines, each with its replica, put, read, replace and delete records of their own
// while reading one they share; run with -race.
func concurrent(t *testing.T, replica func() responsestate.Store) {
	ctx := context.Background()
	shared := newRecord("o")
	put(t, replica(), shared)
	const workers, rounds = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		s := replica()
		wg.Go(func() {
			owner := fmt.Sprintf("w%d", w)
			for i := range rounds {
				r := newRecord(owner)
				if !assert.NoError(t, s.Put(ctx, r)) {
					return
				}
				got, err := s.Get(ctx, owner, r.ID)
				if assert.NoError(t, err) {
					assertSame(t, r, got)
				}
				got, err = s.Get(ctx, "o", shared.ID)
				if assert.NoError(t, err) {
					assertSame(t, shared, got)
				}
				_, err = s.Get(ctx, "o", r.ID)
				assert.ErrorIs(t, err, responsestate.ErrNotFound)
				if i%2 == 0 {
					assert.NoError(t, s.Delete(ctx, owner, r.ID))
					_, err = s.Get(ctx, owner, r.ID)
					assert.ErrorIs(t, err, responsestate.ErrNotFound)
				} else {
					next := newRecord(owner)
					next.ID = r.ID
					assert.NoError(t, s.Put(ctx, next))
				}
			}
		})
	}
	wg.Wait()
}

// newID is a fresh response id.
func newID() string { return "resp_" + rand.Text() }

// newRecord is a small record of owner's, made now.
func newRecord(owner string) *responsestate.Record {
	id := newID()
	return &responsestate.Record{
		ID:        id,
		Owner:     owner,
		Model:     "llama-3.1-8b",
		CreatedAt: time.Now(),
		Response:  json.RawMessage(`{"id":"` + id + `","object":"response","status":"completed","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello."}]}]}`),
		Input: []json.RawMessage{
			json.RawMessage(`{"type":"message","role":"user","content":"Say hello."}`),
			json.RawMessage(`{"type":"message","role":"user","content":[{"type":"input_text","text":"Briefly."}]}`),
		},
		Context: []json.RawMessage{
			json.RawMessage(`{"type":"message","role":"user","content":"Hi."}`),
			json.RawMessage(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi!"}]}`),
		},
	}
}

// sized is a record of owner's whose Size is about n bytes, most of it in one input item.
func sized(owner string, n int) *responsestate.Record {
	r := newRecord(owner)
	pad := max(n-r.Size(), 0)
	r.Input = append(r.Input, json.RawMessage(`"`+strings.Repeat("x", max(pad-2, 0))+`"`))
	return r
}

func put(t *testing.T, s responsestate.Store, r *responsestate.Record) {
	t.Helper()
	require.NoError(t, s.Put(context.Background(), r))
}

// assertSame checks that got is want: every field equal, CreatedAt to the millisecond.
func assertSame(t *testing.T, want, got *responsestate.Record) {
	t.Helper()
	if !assert.NotNil(t, got) {
		return
	}
	assert.Equal(t, want.CreatedAt.UnixMilli(), got.CreatedAt.UnixMilli(), "CreatedAt, to the millisecond")
	w, g := *want, *got
	w.CreatedAt, g.CreatedAt = time.Time{}, time.Time{}
	assert.Equal(t, w, g)
}
