// Package batchstatetest is the contract every batchstate.Store passes: batches created once,
// listed newest first, updated atomically (never losing a concurrent update), results recorded
// at most once per line while the status accepts them, iterated, dropped, the active batches
// tracked, and terminal batches expiring after their TTL; all of it seen alike by every replica
// of a shared store. batchstate.Memory and batchstate.Redis run it in their package's tests; a
// new implementation runs it from its own:
//
//	func TestContract(t *testing.T) {
//		batchstatetest.Run(t, func(t *testing.T, ttl time.Duration) func() batchstate.Store {
//			srv := startServer(t) // fresh, empty state for each case
//			return func() batchstate.Store { return mystore.New(srv.Client(t), mystore.Options{TTL: ttl}) }
//		})
//	}
//
// Each case is a subtest named after the behaviour it checks (CreateGet, List, Update, ...), on
// stores of its own from the Factory; the cases run one after another.
package batchstatetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/files"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Factory returns a function that makes replicas of one store holding no batch yet: each call
// returns a store over the same data (for an in-process store, the same one each time; for a
// shared one, a new store with its own client, as another gateway replica has), and over no
// other Factory call's data. ttl is how long a terminal batch and its results are kept (0: the
// store's default); the TerminalExpiry case sets 200 ms and expects them gone within 5 s. Anything
// to release when the test ends is released through t.Cleanup.
type Factory func(t *testing.T, ttl time.Duration) (replica func() batchstate.Store)

// Run runs every case of the contract against stores from f, one subtest per case.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			replica := f(t, c.ttl)
			require.NotNil(t, replica, "the factory returned no replica function")
			c.run(t, replica)
		})
	}
}

var cases = []struct {
	name string
	ttl  time.Duration // of terminal batches; 0: the store's default
	run  func(t *testing.T, replica func() batchstate.Store)
}{
	{name: "CreateGet", run: createGet},
	{name: "List", run: list},
	{name: "Update", run: update},
	{name: "UpdateContention", run: updateContention},
	{name: "RecordIdempotent", run: recordIdempotent},
	{name: "RecordFollowsStatus", run: recordFollowsStatus},
	{name: "RecordConcurrent", run: recordConcurrent},
	{name: "Recorded", run: recorded},
	{name: "Results", run: allResults},
	{name: "DropResults", run: dropResults},
	{name: "Active", run: active},
	{name: "TerminalExpiry", ttl: 200 * time.Millisecond, run: terminalExpiry},
}

func createGet(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	param, line := "messages", 3
	in := newBatch(batchstate.Validating)
	in.Model = "llama"
	in.Metadata = map[string]string{"k": "v"}
	in.Errors = []batchstate.ErrorEntry{{Code: "invalid", Message: "bad line", Param: &param, Line: &line}}
	in.Counts = batchstate.Counts{Total: 10, Completed: 5, Failed: 4, Skipped: 3}
	require.NoError(t, a.Create(ctx, in))

	got, err := b.Get(ctx, in.ID)
	require.NoError(t, err, "another replica reads it")
	want := *in
	want.Counts = batchstate.Counts{Total: 10} // only Record moves the others
	assert.Equal(t, &want, got)

	again := newBatch(batchstate.InProgress)
	again.ID = in.ID
	assert.ErrorIs(t, b.Create(ctx, again), batchstate.ErrExists)
	got, err = a.Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Equal(t, batchstate.Validating, got.Status, "a refused Create changes nothing")

	for _, id := range []string{files.NewID("batch_"), "", "../x", "a{b}", "a b", strings.Repeat("x", 129)} {
		_, err := a.Get(ctx, id)
		assert.ErrorIs(t, err, batchstate.ErrNotFound, "get %q", id)
	}

	for _, bad := range []*batchstate.Batch{nil, {ID: "", Status: batchstate.Validating}, {ID: "x}y", Status: batchstate.Validating},
		{ID: strings.Repeat("x", 129), Status: batchstate.Validating}, {ID: "ok", Status: "weird"}, {ID: "ok"}} {
		err := a.Create(ctx, bad)
		require.Error(t, err, "create %+v", bad)
		assert.NotErrorIs(t, err, batchstate.ErrExists)
	}
	_, err = a.Get(ctx, "ok")
	assert.ErrorIs(t, err, batchstate.ErrNotFound, "a rejected batch is not stored")
}

func list(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	got, more, err := a.List(ctx, "", 10)
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.False(t, more)

	var made []string // oldest first
	for i := range 7 {
		s := a
		if i%2 == 1 {
			s = b
		}
		made = append(made, create(t, s, batchstate.Validating).ID)
	}
	newest := func(i int) string { return made[len(made)-1-i] }

	// Counts are filled in.
	setStatus(t, a, newest(1), batchstate.InProgress)
	_, err = a.Record(ctx, newest(1), []batchstate.Result{{CustomID: "x", Kind: batchstate.Output, Line: []byte("{}")}})
	require.NoError(t, err)

	page, more, err := b.List(ctx, "", 3)
	require.NoError(t, err)
	assert.Equal(t, []string{newest(0), newest(1), newest(2)}, ids(page))
	assert.True(t, more)
	assert.Equal(t, int64(1), page[1].Counts.Completed)
	assert.Equal(t, batchstate.InProgress, page[1].Status)
	assert.Equal(t, "/v1/chat/completions", page[0].Endpoint)

	page, more, err = a.List(ctx, page[2].ID, 3)
	require.NoError(t, err)
	assert.Equal(t, []string{newest(3), newest(4), newest(5)}, ids(page))
	assert.True(t, more)

	page, more, err = a.List(ctx, page[2].ID, 3)
	require.NoError(t, err)
	assert.Equal(t, []string{newest(6)}, ids(page))
	assert.False(t, more)

	page, more, err = a.List(ctx, newest(4), 2)
	require.NoError(t, err)
	assert.Equal(t, []string{newest(5), newest(6)}, ids(page), "exactly the last two")
	assert.False(t, more, "nothing after the last")

	page, more, err = a.List(ctx, "", 100)
	require.NoError(t, err)
	assert.Len(t, page, 7)
	assert.False(t, more)

	page, more, err = a.List(ctx, "", 0)
	require.NoError(t, err)
	assert.Empty(t, page)
	assert.True(t, more, "limit 0: nothing listed, but some follow")

	page, more, err = a.List(ctx, made[0], 5)
	require.NoError(t, err)
	assert.Empty(t, page, "nothing is older than the oldest")
	assert.False(t, more)

	// A cursor that names no batch still places the page: after an id between two others.
	between := newest(2)[:len(newest(2))-1] + "~" // sorts after newest(2), before newest(1)
	page, _, err = a.List(ctx, between, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{newest(2)}, ids(page))
}

func update(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in := create(t, a, batchstate.Validating)

	got, err := b.Update(ctx, in.ID, func(x *batchstate.Batch) error {
		assert.Equal(t, batchstate.Validating, x.Status, "fn sees the stored state")
		x.Status = batchstate.InProgress
		x.InProgressAt = 1700000100
		x.Metadata = map[string]string{"n": "1"}
		x.Counts = batchstate.Counts{Total: 3, Completed: 99, Failed: 99, Skipped: 99}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, batchstate.InProgress, got.Status)
	assert.Equal(t, batchstate.Counts{Total: 3}, got.Counts, "Update sets Total, never the others")
	stored, err := a.Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Equal(t, got, stored, "Update returns what it stored")

	boom := errors.New("boom")
	_, err = a.Update(ctx, in.ID, func(x *batchstate.Batch) error {
		x.Status = batchstate.Failed
		return boom
	})
	assert.ErrorIs(t, err, boom)
	_, err = a.Update(ctx, in.ID, func(x *batchstate.Batch) error {
		x.Status = batchstate.Failed
		return batchstate.ErrUnchanged
	})
	require.NoError(t, err, "ErrUnchanged is no error")
	_, err = a.Update(ctx, in.ID, func(x *batchstate.Batch) error {
		x.ID = "other"
		return nil
	})
	require.Error(t, err, "the id cannot change")
	_, err = a.Update(ctx, in.ID, func(x *batchstate.Batch) error {
		x.Status = "weird"
		return nil
	})
	require.Error(t, err, "an unknown status is refused")

	_, err = a.Record(ctx, in.ID, []batchstate.Result{{CustomID: "l1", Kind: batchstate.Error, Line: []byte("{}")}})
	require.NoError(t, err)
	cur, err := a.Update(ctx, in.ID, func(x *batchstate.Batch) error {
		x.Metadata["n"] = "2" // changed, then given up
		return batchstate.ErrUnchanged
	})
	require.NoError(t, err)
	assert.Equal(t, "1", cur.Metadata["n"], "ErrUnchanged returns the stored batch, not fn's edits")
	assert.Equal(t, batchstate.Counts{Total: 3, Failed: 1}, cur.Counts, "with its current counts")
	stored, err = b.Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Equal(t, cur, stored, "none of the refused updates stored anything")

	got, err = b.Update(ctx, in.ID, func(x *batchstate.Batch) error {
		x.Counts.Failed = 0 // ignored
		x.OutputFileID = "file-x"
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, batchstate.Counts{Total: 3, Failed: 1}, got.Counts)
	assert.Equal(t, "file-x", got.OutputFileID)

	calls := 0
	_, err = a.Update(ctx, files.NewID("batch_"), func(*batchstate.Batch) error { calls++; return nil })
	assert.ErrorIs(t, err, batchstate.ErrNotFound)
	_, err = a.Update(ctx, "../x", func(*batchstate.Batch) error { calls++; return nil })
	assert.ErrorIs(t, err, batchstate.ErrNotFound)
	assert.Zero(t, calls, "fn never runs without a batch")
}

// Concurrent Updates from several replicas never lose one: each increment lands exactly once.
func updateContention(t *testing.T, replica func() batchstate.Store) {
	reps := []batchstate.Store{replica(), replica()}
	ctx := context.Background()
	in := create(t, reps[0], batchstate.InProgress)
	const workers, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		s := reps[w%len(reps)]
		wg.Go(func() {
			for range each {
				_, err := s.Update(ctx, in.ID, func(b *batchstate.Batch) error {
					n, _ := strconv.Atoi(b.Metadata["n"])
					runtime.Gosched() // as if fn took a while: others get to write meanwhile
					if b.Metadata == nil {
						b.Metadata = map[string]string{}
					}
					b.Metadata["n"] = strconv.Itoa(n + 1)
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := reps[1].Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(workers*each), got.Metadata["n"])
}

func recordIdempotent(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in := create(t, a, batchstate.InProgress)

	c, err := a.Record(ctx, in.ID, []batchstate.Result{
		{CustomID: "a", Kind: batchstate.Output, Line: []byte(`{"a":1}`)},
		{CustomID: "b", Kind: batchstate.Error, Line: []byte(`{"b":1}`)},
		{CustomID: "c", Kind: batchstate.Skipped},
		{CustomID: "a", Kind: batchstate.Error, Line: []byte(`{"a":2}`)}, // the same line twice in one chunk
	})
	require.NoError(t, err)
	assert.Equal(t, batchstate.Counts{Completed: 1, Failed: 1, Skipped: 1}, c)

	c, err = b.Record(ctx, in.ID, []batchstate.Result{
		{CustomID: "a", Kind: batchstate.Error, Line: []byte(`{"a":3}`)}, // redelivered: ignored
		{CustomID: "d", Kind: batchstate.Output, Line: []byte(`{"d":1}`)},
	})
	require.NoError(t, err)
	assert.Equal(t, batchstate.Counts{Completed: 2, Failed: 1, Skipped: 1}, c)

	got := collect(t, b, in.ID)
	assert.Equal(t, map[string]batchstate.Result{
		"a": {CustomID: "a", Kind: batchstate.Output, Line: []byte(`{"a":1}`)},
		"b": {CustomID: "b", Kind: batchstate.Error, Line: []byte(`{"b":1}`)},
		"c": {CustomID: "c", Kind: batchstate.Skipped},
		"d": {CustomID: "d", Kind: batchstate.Output, Line: []byte(`{"d":1}`)},
	}, got, "the first result of a line is kept")
	stored, err := a.Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Equal(t, c, stored.Counts)

	_, err = a.Record(ctx, files.NewID("batch_"), results("x", 0, 1, batchstate.Output))
	assert.ErrorIs(t, err, batchstate.ErrNotFound)
	_, err = a.Record(ctx, in.ID, []batchstate.Result{{CustomID: "e", Kind: batchstate.Output}, {CustomID: "f", Kind: 0}})
	require.Error(t, err, "an unknown kind is refused")
	_, err = a.Record(ctx, in.ID, []batchstate.Result{{CustomID: "e", Kind: batchstate.Output}, {CustomID: "f", Kind: batchstate.Skipped + 1}})
	require.Error(t, err, "an unknown kind is refused")
	done, err := a.Recorded(ctx, in.ID, []string{"e"})
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, done, "a refused chunk records none of its lines")
}

// Results are recorded exactly while the status accepts them.
func recordFollowsStatus(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in := create(t, a, batchstate.Validating)
	var want batchstate.Counts
	for i, st := range []batchstate.Status{batchstate.Validating, batchstate.InProgress, batchstate.Cancelling, batchstate.Finalizing, batchstate.Completed, batchstate.Failed, batchstate.Expired, batchstate.Cancelled, batchstate.InProgress} {
		setStatus(t, b, in.ID, st)
		p := fmt.Sprintf("%d-%s-", i, st)
		c, err := a.Record(ctx, in.ID, results(p, 0, 2, batchstate.Output))
		require.NoError(t, err, "status %s", st)
		if st.Accepting() {
			want.Completed += 2
		}
		assert.Equal(t, want, c, "status %s (step %d)", st, i)
		done, err := b.Recorded(ctx, in.ID, []string{p + "0", p + "1"})
		require.NoError(t, err)
		assert.Equal(t, []bool{st.Accepting(), st.Accepting()}, done, "status %s", st)
	}
	assert.Equal(t, int64(8), want.Completed, "three accepting statuses before the terminal ones, one after")
}

// Workers record overlapping chunks concurrently (redeliveries): every line counts once.
func recordConcurrent(t *testing.T, replica func() batchstate.Store) {
	reps := []batchstate.Store{replica(), replica()}
	ctx := context.Background()
	in := create(t, reps[0], batchstate.InProgress)
	const workers, lines, chunk = 12, 1200, 150
	var wg sync.WaitGroup
	for w := range workers {
		s := reps[w%len(reps)]
		wg.Go(func() {
			// Each worker records a window of 4 chunks starting at its own offset, so every
			// line is sent by several workers at about the same time.
			start := (w * chunk / 2) % lines
			for k := range 4 {
				from := (start + k*chunk) % lines
				kind := batchstate.Output
				if from%(2*chunk) != 0 {
					kind = batchstate.Error
				}
				batch := results("l", from, min(from+chunk, lines), kind)
				c, err := s.Record(ctx, in.ID, batch)
				if !assert.NoError(t, err) {
					return
				}
				assert.LessOrEqual(t, c.Completed+c.Failed, int64(lines))
			}
		})
	}
	wg.Wait()
	got, err := reps[1].Get(ctx, in.ID)
	require.NoError(t, err)
	all := collect(t, reps[0], in.ID)
	var out, bad int64
	for _, r := range all {
		switch r.Kind {
		case batchstate.Output:
			out++
		case batchstate.Error:
			bad++
		}
	}
	assert.Equal(t, int64(len(all)), got.Counts.Completed+got.Counts.Failed, "one count per stored line")
	assert.Equal(t, batchstate.Counts{Completed: out, Failed: bad}, got.Counts)
	assert.Equal(t, int64(lines), got.Counts.Completed+got.Counts.Failed, "the windows cover every line")
}

func recorded(t *testing.T, replica func() batchstate.Store) {
	a := replica()
	ctx := context.Background()
	in := create(t, a, batchstate.InProgress)
	_, err := a.Record(ctx, in.ID, results("l", 0, 3, batchstate.Output))
	require.NoError(t, err)
	done, err := replica().Recorded(ctx, in.ID, []string{"l2", "zz", "l0", "l0", "l3"})
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false, true, true, false}, done)
	done, err = a.Recorded(ctx, in.ID, nil)
	require.NoError(t, err)
	assert.Empty(t, done)
	_, err = a.Recorded(ctx, files.NewID("batch_"), []string{"l0"})
	assert.ErrorIs(t, err, batchstate.ErrNotFound)
}

func allResults(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in := create(t, a, batchstate.InProgress)
	const n, chunk = 10000, 500
	pad := strings.Repeat("x", 1000)
	for from := 0; from < n; from += chunk {
		var rs []batchstate.Result
		for i := from; i < from+chunk; i++ {
			rs = append(rs, batchstate.Result{CustomID: "req-" + strconv.Itoa(i), Kind: batchstate.ResultKind(1 + i%3), Line: fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, pad)})
		}
		_, err := a.Record(ctx, in.ID, rs)
		require.NoError(t, err)
	}
	seen := make([]int, n)
	var bad int
	require.NoError(t, b.Results(ctx, in.ID, func(r batchstate.Result) error {
		i, err := strconv.Atoi(strings.TrimPrefix(r.CustomID, "req-"))
		if err != nil || i < 0 || i >= n {
			bad++
			return nil
		}
		seen[i]++
		if r.Kind != batchstate.ResultKind(1+i%3) || string(r.Line) != fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, pad) {
			bad++
		}
		return nil
	}))
	assert.Zero(t, bad, "results with a wrong id, kind or line")
	for i, k := range seen {
		if k != 1 {
			t.Errorf("result %d seen %d times", i, k)
			break
		}
	}

	stop := errors.New("stop")
	calls := 0
	err := a.Results(ctx, in.ID, func(batchstate.Result) error { calls++; return stop })
	assert.ErrorIs(t, err, stop, "fn's error ends the iteration and is returned")
	assert.Equal(t, 1, calls)

	err = a.Results(ctx, files.NewID("batch_"), func(batchstate.Result) error { return nil })
	assert.ErrorIs(t, err, batchstate.ErrNotFound)
}

func dropResults(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	in := create(t, a, batchstate.InProgress)
	keep := create(t, a, batchstate.InProgress)
	_, err := a.Record(ctx, in.ID, results("l", 0, 5, batchstate.Output))
	require.NoError(t, err)
	_, err = a.Record(ctx, keep.ID, results("l", 0, 2, batchstate.Error))
	require.NoError(t, err)
	setStatus(t, a, in.ID, batchstate.Completed)

	require.NoError(t, b.DropResults(ctx, in.ID))
	assert.Empty(t, collect(t, a, in.ID))
	done, err := a.Recorded(ctx, in.ID, []string{"l0"})
	require.NoError(t, err)
	assert.Equal(t, []bool{false}, done)
	got, err := a.Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Equal(t, batchstate.Counts{Completed: 5}, got.Counts, "counts stay")
	assert.Len(t, collect(t, a, keep.ID), 2, "other batches keep theirs")
	require.NoError(t, b.DropResults(ctx, in.ID), "dropping twice is fine")

	assert.ErrorIs(t, a.DropResults(ctx, files.NewID("batch_")), batchstate.ErrNotFound)
}

func active(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	got, err := a.Active(ctx)
	require.NoError(t, err)
	assert.Empty(t, got)

	v := create(t, a, batchstate.Validating)
	p := create(t, b, batchstate.InProgress)
	create(t, a, batchstate.Failed) // created terminal (failed validation at once)
	c := create(t, b, batchstate.Cancelling)
	f := create(t, a, batchstate.Finalizing)
	got, err = b.Active(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{v.ID, p.ID, c.ID, f.ID}, got)

	setStatus(t, a, c.ID, batchstate.Cancelled)
	setStatus(t, b, f.ID, batchstate.Completed)
	setStatus(t, a, v.ID, batchstate.InProgress)
	got, err = b.Active(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{v.ID, p.ID}, got)

	setStatus(t, b, p.ID, batchstate.Expired)
	setStatus(t, a, v.ID, batchstate.Failed)
	got, err = a.Active(ctx)
	require.NoError(t, err)
	assert.Empty(t, got)
}

// A terminal batch and its results are gone once the TTL has passed since it became terminal;
// batches still running are kept however long they run.
func terminalExpiry(t *testing.T, replica func() batchstate.Store) {
	a, b := replica(), replica()
	ctx := context.Background()
	done := create(t, a, batchstate.InProgress)
	_, err := a.Record(ctx, done.ID, results("l", 0, 3, batchstate.Output))
	require.NoError(t, err)
	running := create(t, a, batchstate.InProgress)
	_, err = a.Record(ctx, running.ID, results("l", 0, 2, batchstate.Error))
	require.NoError(t, err)
	failed := create(t, b, batchstate.Failed) // created terminal: its TTL starts at once
	back := create(t, a, batchstate.Finalizing)
	setStatus(t, a, done.ID, batchstate.Completed)
	setStatus(t, b, back.ID, batchstate.Completed)
	setStatus(t, a, back.ID, batchstate.Finalizing) // no longer terminal: no longer expiring

	got, err := b.Get(ctx, done.ID)
	require.NoError(t, err, "kept until the TTL passes")
	assert.Equal(t, batchstate.Counts{Completed: 3}, got.Counts)
	assert.Len(t, collect(t, b, done.ID), 3)

	require.Eventually(t, func() bool {
		_, err1 := b.Get(ctx, done.ID)
		_, err2 := b.Get(ctx, failed.ID)
		return errors.Is(err1, batchstate.ErrNotFound) && errors.Is(err2, batchstate.ErrNotFound)
	}, 5*time.Second, 10*time.Millisecond)
	assert.ErrorIs(t, b.Results(ctx, done.ID, func(batchstate.Result) error { return nil }), batchstate.ErrNotFound, "the results went with it")
	_, err = b.Recorded(ctx, done.ID, []string{"l0"})
	assert.ErrorIs(t, err, batchstate.ErrNotFound)
	_, err = b.Record(ctx, done.ID, results("m", 0, 1, batchstate.Output))
	assert.ErrorIs(t, err, batchstate.ErrNotFound)
	_, err = b.Update(ctx, done.ID, func(*batchstate.Batch) error { return nil })
	assert.ErrorIs(t, err, batchstate.ErrNotFound)
	assert.ErrorIs(t, b.DropResults(ctx, done.ID), batchstate.ErrNotFound)

	page, more, err := a.List(ctx, "", 10)
	require.NoError(t, err)
	assert.Equal(t, []string{back.ID, running.ID}, ids(page), "expired batches are not listed")
	assert.False(t, more)
	page, more, err = a.List(ctx, "", 1)
	require.NoError(t, err)
	assert.Equal(t, []string{back.ID}, ids(page))
	assert.True(t, more, "an expired batch is no more, but a live one is")
	active, err := a.Active(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{running.ID, back.ID}, active)
	assert.Len(t, collect(t, a, running.ID), 2, "a running batch keeps its results")
}

func newBatch(status batchstate.Status) *batchstate.Batch {
	return &batchstate.Batch{
		ID:               files.NewID("batch_"),
		Endpoint:         "/v1/chat/completions",
		InputFileID:      files.NewID("file-"),
		CompletionWindow: "24h",
		Status:           status,
		CreatedAt:        1700000000,
	}
}

func create(t *testing.T, s batchstate.Store, status batchstate.Status) *batchstate.Batch {
	t.Helper()
	b := newBatch(status)
	require.NoError(t, s.Create(context.Background(), b))
	return b
}

func setStatus(t *testing.T, s batchstate.Store, id string, status batchstate.Status) {
	t.Helper()
	_, err := s.Update(context.Background(), id, func(b *batchstate.Batch) error {
		b.Status = status
		return nil
	})
	require.NoError(t, err)
}

func ids(bs []*batchstate.Batch) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.ID
	}
	return out
}

func results(prefix string, from, to int, kind batchstate.ResultKind) []batchstate.Result {
	var out []batchstate.Result
	for i := from; i < to; i++ {
		out = append(out, batchstate.Result{CustomID: fmt.Sprintf("%s%d", prefix, i), Kind: kind, Line: fmt.Appendf(nil, `{"i":%d}`, i)})
	}
	return out
}

// collect returns every result, by custom id, failing on a custom id seen twice.
func collect(t *testing.T, s batchstate.Store, id string) map[string]batchstate.Result {
	t.Helper()
	out := map[string]batchstate.Result{}
	require.NoError(t, s.Results(context.Background(), id, func(r batchstate.Result) error {
		if _, dup := out[r.CustomID]; dup {
			t.Errorf("result %q seen twice", r.CustomID)
		}
		r.Line = append([]byte(nil), r.Line...)
		out[r.CustomID] = r
		return nil
	}))
	return out
}
