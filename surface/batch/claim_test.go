package batch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/files"
	"github.com/stretchr/testify/require"
)

// replicas are two services (replica ids A and B) sharing one state store and one file store,
// and a batch in progress whose every line has a result.
func replicas(t *testing.T, lines int) (a, b *Service, st batchstate.Store, fs files.Store, batch *batchstate.Batch) {
	t.Helper()
	st = batchstate.NewMemory()
	fs, err := files.NewDir(t.TempDir())
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(id string) *Service {
		s, err := New(Options{Files: fs, State: st, Bus: bus.NewGoChannel(log), Logger: log, ID: id, ClaimTTL: 150 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(s.Close)
		return s
	}
	ctx := context.Background()
	batch = &batchstate.Batch{ID: files.NewID("batch_"), Endpoint: "/v1/chat/completions", InputFileID: "file-x",
		CompletionWindow: "24h", Status: batchstate.Validating, CreatedAt: time.Now().Unix()}
	require.NoError(t, st.Create(ctx, batch))
	_, err = st.Update(ctx, batch.ID, func(b *batchstate.Batch) error {
		b.Status, b.Counts.Total, b.Dispatched = batchstate.InProgress, int64(lines), true
		return nil
	})
	require.NoError(t, err)
	rs := make([]batchstate.Result, lines)
	for i := range rs {
		rs[i] = batchstate.Result{CustomID: fmt.Sprint(i), Kind: batchstate.Output, Line: []byte(fmt.Sprintf(`{"custom_id":"%d"}`, i))}
	}
	_, err = st.Record(ctx, batch.ID, rs)
	require.NoError(t, err)
	batch, err = st.Get(ctx, batch.ID)
	require.NoError(t, err)
	return mk("A"), mk("B"), st, fs, batch
}

// A replica whose claim passed to another while it wrote the files commits nothing and removes
// what it wrote; the replica holding the claim commits complete files.
func TestAssembleAfterLosingTheClaim(t *testing.T) {
	a, b, st, fs, cur := replicas(t, 3000)
	ctx := context.Background()
	_, owned, err := a.claim(ctx, cur.ID, nil, batchstate.InProgress)
	require.NoError(t, err)
	require.True(t, owned)
	_, err = st.Update(ctx, cur.ID, func(x *batchstate.Batch) error { x.Claim = "B"; return nil }) // A stalled; B took over
	require.NoError(t, err)

	a.assemble(ctx, cur)
	got, err := st.Get(ctx, cur.ID)
	require.NoError(t, err)
	require.Equal(t, batchstate.InProgress, got.Status, "A committed without its claim")
	require.Empty(t, got.OutputFileID)
	left, _, err := fs.List(ctx, files.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, left, "A left its uncommitted files behind")

	b.assemble(ctx, cur)
	got, err = st.Get(ctx, cur.ID)
	require.NoError(t, err)
	require.Equal(t, batchstate.Completed, got.Status)
	f, err := fs.Get(ctx, got.OutputFileID)
	require.NoError(t, err)
	rc, err := fs.Open(ctx, f.ID)
	require.NoError(t, err)
	body, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	require.Equal(t, 3000, countLines(body), "B's output is complete: A did not drop the results")
}

func countLines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// holdClaim renews the claim while the step runs, so the claim outlives ClaimTTL, and ends the
// step when another replica takes the claim.
func TestHoldClaim(t *testing.T) {
	a, _, st, _, cur := replicas(t, 1)
	ctx := context.Background()
	_, owned, err := a.claim(ctx, cur.ID, nil, batchstate.InProgress)
	require.NoError(t, err)
	require.True(t, owned)
	stepped := make(chan error, 1)
	go a.holdClaim(ctx, cur.ID, func(ctx context.Context) {
		select {
		case <-time.After(600 * time.Millisecond): // four claim TTLs
		case <-ctx.Done():
		}
		got, err := st.Get(context.Background(), cur.ID)
		if err == nil && (got.Claim != "A" || got.ClaimUntil <= time.Now().UnixMilli()) {
			err = fmt.Errorf("claim %q until %d, not renewed", got.Claim, got.ClaimUntil)
		}
		stepped <- err
	})
	require.NoError(t, <-stepped)

	lost := make(chan struct{})
	go a.holdClaim(ctx, cur.ID, func(ctx context.Context) {
		<-ctx.Done()
		close(lost)
	})
	_, err = st.Update(ctx, cur.ID, func(x *batchstate.Batch) error { x.Claim = "B"; return nil })
	require.NoError(t, err)
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the step went on after its claim was taken")
	}
}
