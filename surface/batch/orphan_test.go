package batch

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/files"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBatchOfFile(t *testing.T) {
	id := files.NewID("batch_")
	for _, which := range []string{"output", "error"} {
		got, ok := batchOfFile(fileID(id, which, "0123456789abcdef"))
		assert.True(t, ok, which)
		assert.Equal(t, id, got, which)
	}
	for _, bad := range []string{files.NewID("file-"), "file-" + id, "file-" + id + "-output-", "file-" + id + "-summary-ab",
		"file-" + id + "-output-a-b", "file-" + files.NewID("file_") + "-output-ab", "files-" + id + "-output-ab", id} {
		_, ok := batchOfFile(bad)
		assert.False(t, ok, bad)
	}
}

// A replica that died after writing a finalization's files and before committing or dropping
// them left them behind, unnamed by any batch. The orphan sweep removes them once their batch is
// terminal; it keeps the files the batch names, young files, files of batches still running or
// gone (whose committed files look the same), and everything else.
func TestSweepOrphans(t *testing.T) {
	a, b, st, fs, cur := replicas(t, 20)
	ctx := context.Background()

	// Two hours ago A claimed the finalization, wrote the files and died.
	a.clock = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	_, owned, err := a.claim(ctx, cur.ID, nil, batchstate.InProgress)
	require.NoError(t, err)
	require.True(t, owned)
	outN, _, err := a.writeFiles(ctx, cur, "0a0a0a0a0a0a0a0a")
	require.NoError(t, err)
	require.Equal(t, 20, outN)
	crashed := fileID(cur.ID, "output", "0a0a0a0a0a0a0a0a")
	// An hour ago B took over once A's claim had expired, and committed files of its own.
	b.clock = func() time.Time { return time.Now().Add(-time.Hour) }
	b.finalize(ctx, cur.ID)
	done, err := st.Get(ctx, cur.ID)
	require.NoError(t, err)
	require.Equal(t, batchstate.Completed, done.Status)
	require.NotEmpty(t, done.OutputFileID)
	require.NotEqual(t, crashed, done.OutputFileID)

	running := &batchstate.Batch{ID: files.NewID("batch_"), Endpoint: "/v1/chat/completions", InputFileID: "file-x",
		CompletionWindow: "24h", Status: batchstate.InProgress, Dispatched: true, Counts: batchstate.Counts{Total: 5}}
	require.NoError(t, st.Create(ctx, running))
	old, young := time.Now().Add(-time.Hour).Unix(), time.Now().Unix()
	put := func(id, purpose string, createdAt int64) string {
		_, err := fs.Put(ctx, files.File{ID: id, CreatedAt: createdAt, Filename: "x.jsonl", Purpose: purpose}, strings.NewReader("{}\n"), 0)
		require.NoError(t, err)
		return id
	}
	crashedErrors := put(fileID(cur.ID, "error", "0b0b0b0b0b0b0b0b"), "batch_output", old)
	kept := []string{
		done.OutputFileID,
		put(fileID(cur.ID, "output", "0c0c0c0c0c0c0c0c"), "batch_output", young), // a late replica's, being written
		put(fileID(running.ID, "output", "0d0d0d0d0d0d0d0d"), "batch_output", old),
		put(fileID(files.NewID("batch_"), "output", "0e0e0e0e0e0e0e0e"), "batch_output", old), // its batch expired
		put(files.NewID("file-"), "batch", old),
		put("file-"+cur.ID+"-summary-0f0f", "batch_output", old),
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := New(Options{Files: fs, State: st, Bus: bus.NewGoChannel(log), Logger: log, ID: "C",
		OrphanSweepInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = c.Run(runCtx) }()
	t.Cleanup(func() { stop(); c.Close(); <-ran })

	gone := func(id string) bool {
		_, err := fs.Get(ctx, id)
		return err != nil
	}
	require.Eventually(t, func() bool { return gone(crashed) && gone(crashedErrors) }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(60 * time.Millisecond) // more sweeps
	for _, id := range kept {
		_, err := fs.Get(ctx, id)
		assert.NoError(t, err, "%s was removed", id)
	}
	var m dto.Metric
	require.NoError(t, c.m.orphans.Write(&m))
	assert.Equal(t, 2.0, m.GetCounter().GetValue(), "removed orphans counted")
	_, err = st.Get(ctx, running.ID)
	require.NoError(t, err)
}
