package batchstate

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

	"github.com/infergate/infergate/adapters/batch/files"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stores runs the contract against both implementations. replica returns another store over the
// same data: the same Memory, or a Redis store with its own client on the same redis-server (as
// another gateway replica would have).
func stores(t *testing.T, contract func(t *testing.T, replica func() Store)) {
	storesWithTTL(t, 0, contract)
}

// storesWithTTL is stores with the TTL of terminal batches (0: the default).
func storesWithTTL(t *testing.T, ttl time.Duration, contract func(t *testing.T, replica func() Store)) {
	t.Run("memory", func(t *testing.T) {
		s := NewMemory(MemoryOptions{TTL: ttl})
		contract(t, func() Store { return s })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		contract(t, func() Store { return NewRedis(srv.NewClient(t), RedisOptions{Prefix: "test", TTL: ttl}) })
	})
}

func newBatch(status Status) *Batch {
	return &Batch{
		ID:               files.NewID("batch_"),
		Endpoint:         "/v1/chat/completions",
		InputFileID:      files.NewID("file-"),
		CompletionWindow: "24h",
		Status:           status,
		CreatedAt:        1700000000,
	}
}

func create(t *testing.T, s Store, status Status) *Batch {
	t.Helper()
	b := newBatch(status)
	require.NoError(t, s.Create(context.Background(), b))
	return b
}

func setStatus(t *testing.T, s Store, id string, status Status) {
	t.Helper()
	_, err := s.Update(context.Background(), id, func(b *Batch) error {
		b.Status = status
		return nil
	})
	require.NoError(t, err)
}

func ids(bs []*Batch) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.ID
	}
	return out
}

func TestCreateGet(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		param, line := "messages", 3
		in := newBatch(Validating)
		in.Model = "llama"
		in.Metadata = map[string]string{"k": "v"}
		in.Errors = []ErrorEntry{{Code: "invalid", Message: "bad line", Param: &param, Line: &line}}
		in.Counts = Counts{Total: 10, Completed: 5, Failed: 4, Skipped: 3}
		require.NoError(t, a.Create(ctx, in))

		got, err := b.Get(ctx, in.ID)
		require.NoError(t, err, "another replica reads it")
		want := *in
		want.Counts = Counts{Total: 10} // only Record moves the others
		assert.Equal(t, &want, got)

		again := newBatch(InProgress)
		again.ID = in.ID
		assert.ErrorIs(t, b.Create(ctx, again), ErrExists)
		got, err = a.Get(ctx, in.ID)
		require.NoError(t, err)
		assert.Equal(t, Validating, got.Status, "a refused Create changes nothing")

		for _, id := range []string{files.NewID("batch_"), "", "../x", "a{b}", "a b", strings.Repeat("x", 129)} {
			_, err := a.Get(ctx, id)
			assert.ErrorIs(t, err, ErrNotFound, "get %q", id)
		}

		for _, bad := range []*Batch{nil, {ID: "", Status: Validating}, {ID: "x}y", Status: Validating},
			{ID: strings.Repeat("x", 129), Status: Validating}, {ID: "ok", Status: "weird"}, {ID: "ok"}} {
			err := a.Create(ctx, bad)
			require.Error(t, err, "create %+v", bad)
			assert.NotErrorIs(t, err, ErrExists)
		}
		_, err = a.Get(ctx, "ok")
		assert.ErrorIs(t, err, ErrNotFound, "a rejected batch is not stored")
	})
}

func TestList(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
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
			made = append(made, create(t, s, Validating).ID)
		}
		newest := func(i int) string { return made[len(made)-1-i] }

		// Counts are filled in.
		setStatus(t, a, newest(1), InProgress)
		_, err = a.Record(ctx, newest(1), []Result{{CustomID: "x", Kind: Output, Line: []byte("{}")}})
		require.NoError(t, err)

		page, more, err := b.List(ctx, "", 3)
		require.NoError(t, err)
		assert.Equal(t, []string{newest(0), newest(1), newest(2)}, ids(page))
		assert.True(t, more)
		assert.Equal(t, int64(1), page[1].Counts.Completed)
		assert.Equal(t, InProgress, page[1].Status)
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
	})
}

func TestUpdate(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		in := create(t, a, Validating)

		got, err := b.Update(ctx, in.ID, func(x *Batch) error {
			assert.Equal(t, Validating, x.Status, "fn sees the stored state")
			x.Status = InProgress
			x.InProgressAt = 1700000100
			x.Metadata = map[string]string{"n": "1"}
			x.Counts = Counts{Total: 3, Completed: 99, Failed: 99, Skipped: 99}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, InProgress, got.Status)
		assert.Equal(t, Counts{Total: 3}, got.Counts, "Update sets Total, never the others")
		stored, err := a.Get(ctx, in.ID)
		require.NoError(t, err)
		assert.Equal(t, got, stored, "Update returns what it stored")

		boom := errors.New("boom")
		_, err = a.Update(ctx, in.ID, func(x *Batch) error {
			x.Status = Failed
			return boom
		})
		assert.ErrorIs(t, err, boom)
		_, err = a.Update(ctx, in.ID, func(x *Batch) error {
			x.Status = Failed
			return ErrUnchanged
		})
		require.NoError(t, err, "ErrUnchanged is no error")
		_, err = a.Update(ctx, in.ID, func(x *Batch) error {
			x.ID = "other"
			return nil
		})
		require.Error(t, err, "the id cannot change")
		_, err = a.Update(ctx, in.ID, func(x *Batch) error {
			x.Status = "weird"
			return nil
		})
		require.Error(t, err, "an unknown status is refused")

		_, err = a.Record(ctx, in.ID, []Result{{CustomID: "l1", Kind: Error, Line: []byte("{}")}})
		require.NoError(t, err)
		cur, err := a.Update(ctx, in.ID, func(x *Batch) error {
			x.Metadata["n"] = "2" // changed, then given up
			return ErrUnchanged
		})
		require.NoError(t, err)
		assert.Equal(t, "1", cur.Metadata["n"], "ErrUnchanged returns the stored batch, not fn's edits")
		assert.Equal(t, Counts{Total: 3, Failed: 1}, cur.Counts, "with its current counts")
		stored, err = b.Get(ctx, in.ID)
		require.NoError(t, err)
		assert.Equal(t, cur, stored, "none of the refused updates stored anything")

		got, err = b.Update(ctx, in.ID, func(x *Batch) error {
			x.Counts.Failed = 0 // ignored
			x.OutputFileID = "file-x"
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, Counts{Total: 3, Failed: 1}, got.Counts)
		assert.Equal(t, "file-x", got.OutputFileID)

		calls := 0
		_, err = a.Update(ctx, files.NewID("batch_"), func(*Batch) error { calls++; return nil })
		assert.ErrorIs(t, err, ErrNotFound)
		_, err = a.Update(ctx, "../x", func(*Batch) error { calls++; return nil })
		assert.ErrorIs(t, err, ErrNotFound)
		assert.Zero(t, calls, "fn never runs without a batch")
	})
}

// Concurrent Updates from several replicas never lose one: each increment lands exactly once.
func TestUpdateContention(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		reps := []Store{replica(), replica()}
		ctx := context.Background()
		in := create(t, reps[0], InProgress)
		const workers, each = 16, 20
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := range workers {
			s := reps[w%len(reps)]
			wg.Go(func() {
				for range each {
					_, err := s.Update(ctx, in.ID, func(b *Batch) error {
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
	})
}

func results(prefix string, from, to int, kind ResultKind) []Result {
	var out []Result
	for i := from; i < to; i++ {
		out = append(out, Result{CustomID: fmt.Sprintf("%s%d", prefix, i), Kind: kind, Line: fmt.Appendf(nil, `{"i":%d}`, i)})
	}
	return out
}

// collect returns every result, by custom id, failing on a custom id seen twice.
func collect(t *testing.T, s Store, id string) map[string]Result {
	t.Helper()
	out := map[string]Result{}
	require.NoError(t, s.Results(context.Background(), id, func(r Result) error {
		if _, dup := out[r.CustomID]; dup {
			t.Errorf("result %q seen twice", r.CustomID)
		}
		r.Line = append([]byte(nil), r.Line...)
		out[r.CustomID] = r
		return nil
	}))
	return out
}

func TestRecordIdempotent(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		in := create(t, a, InProgress)

		c, err := a.Record(ctx, in.ID, []Result{
			{CustomID: "a", Kind: Output, Line: []byte(`{"a":1}`)},
			{CustomID: "b", Kind: Error, Line: []byte(`{"b":1}`)},
			{CustomID: "c", Kind: Skipped},
			{CustomID: "a", Kind: Error, Line: []byte(`{"a":2}`)}, // the same line twice in one chunk
		})
		require.NoError(t, err)
		assert.Equal(t, Counts{Completed: 1, Failed: 1, Skipped: 1}, c)

		c, err = b.Record(ctx, in.ID, []Result{
			{CustomID: "a", Kind: Error, Line: []byte(`{"a":3}`)}, // redelivered: ignored
			{CustomID: "d", Kind: Output, Line: []byte(`{"d":1}`)},
		})
		require.NoError(t, err)
		assert.Equal(t, Counts{Completed: 2, Failed: 1, Skipped: 1}, c)

		got := collect(t, b, in.ID)
		assert.Equal(t, map[string]Result{
			"a": {CustomID: "a", Kind: Output, Line: []byte(`{"a":1}`)},
			"b": {CustomID: "b", Kind: Error, Line: []byte(`{"b":1}`)},
			"c": {CustomID: "c", Kind: Skipped},
			"d": {CustomID: "d", Kind: Output, Line: []byte(`{"d":1}`)},
		}, got, "the first result of a line is kept")
		stored, err := a.Get(ctx, in.ID)
		require.NoError(t, err)
		assert.Equal(t, c, stored.Counts)

		_, err = a.Record(ctx, files.NewID("batch_"), results("x", 0, 1, Output))
		assert.ErrorIs(t, err, ErrNotFound)
		_, err = a.Record(ctx, in.ID, []Result{{CustomID: "e", Kind: Output}, {CustomID: "f", Kind: 0}})
		require.Error(t, err, "an unknown kind is refused")
		_, err = a.Record(ctx, in.ID, []Result{{CustomID: "e", Kind: Output}, {CustomID: "f", Kind: Skipped + 1}})
		require.Error(t, err, "an unknown kind is refused")
		done, err := a.Recorded(ctx, in.ID, []string{"e"})
		require.NoError(t, err)
		assert.Equal(t, []bool{false}, done, "a refused chunk records none of its lines")
	})
}

// Results are recorded exactly while the status accepts them.
func TestRecordFollowsStatus(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		in := create(t, a, Validating)
		var want Counts
		for i, st := range []Status{Validating, InProgress, Cancelling, Finalizing, Completed, Failed, Expired, Cancelled, InProgress} {
			setStatus(t, b, in.ID, st)
			p := fmt.Sprintf("%d-%s-", i, st)
			c, err := a.Record(ctx, in.ID, results(p, 0, 2, Output))
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
	})
}

// Workers record overlapping chunks concurrently (redeliveries): every line counts once.
func TestRecordConcurrent(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		reps := []Store{replica(), replica()}
		ctx := context.Background()
		in := create(t, reps[0], InProgress)
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
					kind := Output
					if from%(2*chunk) != 0 {
						kind = Error
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
			case Output:
				out++
			case Error:
				bad++
			}
		}
		assert.Equal(t, int64(len(all)), got.Counts.Completed+got.Counts.Failed, "one count per stored line")
		assert.Equal(t, Counts{Completed: out, Failed: bad}, got.Counts)
		assert.Equal(t, int64(lines), got.Counts.Completed+got.Counts.Failed, "the windows cover every line")
	})
}

func TestRecorded(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a := replica()
		ctx := context.Background()
		in := create(t, a, InProgress)
		_, err := a.Record(ctx, in.ID, results("l", 0, 3, Output))
		require.NoError(t, err)
		done, err := replica().Recorded(ctx, in.ID, []string{"l2", "zz", "l0", "l0", "l3"})
		require.NoError(t, err)
		assert.Equal(t, []bool{true, false, true, true, false}, done)
		done, err = a.Recorded(ctx, in.ID, nil)
		require.NoError(t, err)
		assert.Empty(t, done)
		_, err = a.Recorded(ctx, files.NewID("batch_"), []string{"l0"})
		assert.ErrorIs(t, err, ErrNotFound)
	})
}

func TestResults(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		in := create(t, a, InProgress)
		const n, chunk = 10000, 500
		pad := strings.Repeat("x", 1000)
		for from := 0; from < n; from += chunk {
			var rs []Result
			for i := from; i < from+chunk; i++ {
				rs = append(rs, Result{CustomID: "req-" + strconv.Itoa(i), Kind: ResultKind(1 + i%3), Line: fmt.Appendf(nil, `{"i":%d,"pad":"%s"}`, i, pad)})
			}
			_, err := a.Record(ctx, in.ID, rs)
			require.NoError(t, err)
		}
		seen := make([]int, n)
		var bad int
		require.NoError(t, b.Results(ctx, in.ID, func(r Result) error {
			i, err := strconv.Atoi(strings.TrimPrefix(r.CustomID, "req-"))
			if err != nil || i < 0 || i >= n {
				bad++
				return nil
			}
			seen[i]++
			if r.Kind != ResultKind(1+i%3) || string(r.Line) != fmt.Sprintf(`{"i":%d,"pad":"%s"}`, i, pad) {
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
		err := a.Results(ctx, in.ID, func(Result) error { calls++; return stop })
		assert.ErrorIs(t, err, stop, "fn's error ends the iteration and is returned")
		assert.Equal(t, 1, calls)

		err = a.Results(ctx, files.NewID("batch_"), func(Result) error { return nil })
		assert.ErrorIs(t, err, ErrNotFound)
	})
}

func TestDropResults(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		in := create(t, a, InProgress)
		keep := create(t, a, InProgress)
		_, err := a.Record(ctx, in.ID, results("l", 0, 5, Output))
		require.NoError(t, err)
		_, err = a.Record(ctx, keep.ID, results("l", 0, 2, Error))
		require.NoError(t, err)
		setStatus(t, a, in.ID, Completed)

		require.NoError(t, b.DropResults(ctx, in.ID))
		assert.Empty(t, collect(t, a, in.ID))
		done, err := a.Recorded(ctx, in.ID, []string{"l0"})
		require.NoError(t, err)
		assert.Equal(t, []bool{false}, done)
		got, err := a.Get(ctx, in.ID)
		require.NoError(t, err)
		assert.Equal(t, Counts{Completed: 5}, got.Counts, "counts stay")
		assert.Len(t, collect(t, a, keep.ID), 2, "other batches keep theirs")
		require.NoError(t, b.DropResults(ctx, in.ID), "dropping twice is fine")

		assert.ErrorIs(t, a.DropResults(ctx, files.NewID("batch_")), ErrNotFound)
	})
}

func TestActive(t *testing.T) {
	stores(t, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		got, err := a.Active(ctx)
		require.NoError(t, err)
		assert.Empty(t, got)

		v := create(t, a, Validating)
		p := create(t, b, InProgress)
		create(t, a, Failed) // created terminal (failed validation at once)
		c := create(t, b, Cancelling)
		f := create(t, a, Finalizing)
		got, err = b.Active(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{v.ID, p.ID, c.ID, f.ID}, got)

		setStatus(t, a, c.ID, Cancelled)
		setStatus(t, b, f.ID, Completed)
		setStatus(t, a, v.ID, InProgress)
		got, err = b.Active(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{v.ID, p.ID}, got)

		setStatus(t, b, p.ID, Expired)
		setStatus(t, a, v.ID, Failed)
		got, err = a.Active(ctx)
		require.NoError(t, err)
		assert.Empty(t, got)
	})
}

// A terminal batch and its results are gone once the TTL has passed since it became terminal;
// batches still running are kept however long they run.
func TestTerminalExpiry(t *testing.T) {
	const ttl = 200 * time.Millisecond
	storesWithTTL(t, ttl, func(t *testing.T, replica func() Store) {
		a, b := replica(), replica()
		ctx := context.Background()
		done := create(t, a, InProgress)
		_, err := a.Record(ctx, done.ID, results("l", 0, 3, Output))
		require.NoError(t, err)
		running := create(t, a, InProgress)
		_, err = a.Record(ctx, running.ID, results("l", 0, 2, Error))
		require.NoError(t, err)
		failed := create(t, b, Failed) // created terminal: its TTL starts at once
		back := create(t, a, Finalizing)
		setStatus(t, a, done.ID, Completed)
		setStatus(t, b, back.ID, Completed)
		setStatus(t, a, back.ID, Finalizing) // no longer terminal: no longer expiring

		got, err := b.Get(ctx, done.ID)
		require.NoError(t, err, "kept until the TTL passes")
		assert.Equal(t, Counts{Completed: 3}, got.Counts)
		assert.Len(t, collect(t, b, done.ID), 3)

		require.Eventually(t, func() bool {
			_, err1 := b.Get(ctx, done.ID)
			_, err2 := b.Get(ctx, failed.ID)
			return errors.Is(err1, ErrNotFound) && errors.Is(err2, ErrNotFound)
		}, 5*time.Second, 10*time.Millisecond)
		assert.ErrorIs(t, b.Results(ctx, done.ID, func(Result) error { return nil }), ErrNotFound, "the results went with it")
		_, err = b.Recorded(ctx, done.ID, []string{"l0"})
		assert.ErrorIs(t, err, ErrNotFound)
		_, err = b.Record(ctx, done.ID, results("m", 0, 1, Output))
		assert.ErrorIs(t, err, ErrNotFound)
		_, err = b.Update(ctx, done.ID, func(*Batch) error { return nil })
		assert.ErrorIs(t, err, ErrNotFound)
		assert.ErrorIs(t, b.DropResults(ctx, done.ID), ErrNotFound)

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
	})
}
