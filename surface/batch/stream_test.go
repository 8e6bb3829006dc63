package batch_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/files"
	"github.com/infergate/infergate/surface/batch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A batch's input is never held whole: validating and dispatching a 50,000-line file of ~2 KB
// lines (about 100 MB) keeps the live heap under a quarter of the file, and the dispatch publishes
// its chunks as it reads, never more than a few chunks behind the line it has read. Both checks
// are taken at fixed points (input reads and publishes), not on a timer: holding the file's lines
// fails the first, building every chunk before publishing the second.
func TestDispatchStreamsTheInput(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a 100 MB file twice")
	}
	const (
		n          = 50_000
		padding    = 1900 // each line ~2 KB
		chunkLines = 64
		// The most lines the dispatch may have read beyond those it handed to the bus: two groups
		// of at most 16 chunks (one waiting while the bus sends the one before, one filling), the
		// chunk being filled, and the 64 KiB the input's scanner reads ahead (~32 lines). Holding
		// the file's chunks would put all 50,000 there.
		maxAhead = 2*16*chunkLines + chunkLines + 64
	)
	fs := &watchedFiles{}
	pub := &watchedBus{Bus: bus.NewGoChannel(quiet()), reads: fs}
	e := startEnv(t, envOptions{noWorker: true, bus: pub, service: func(o *batch.Options) {
		o.ChunkLines = chunkLines
		fs.Store = o.Files
		o.Files = fs
	}})

	// Stored straight from a generator rather than uploaded: an upload would build the whole
	// file in the test's own memory, which the heap check would count.
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriter(pw)
		pad := strings.Repeat("x", padding)
		for i := range n {
			fmt.Fprintf(w, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m1","messages":[{"role":"user","content":"%d %s"}]}}`+"\n", i, i, pad)
		}
		pw.CloseWithError(w.Flush())
	}()
	f, err := e.files.Put(context.Background(), files.File{ID: files.NewID("file-"), CreatedAt: time.Now().Unix(),
		Filename: "big.jsonl", Purpose: "batch"}, pr, 0)
	require.NoError(t, err)

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fs.mu.Lock()
	fs.base = ms.HeapAlloc
	fs.mu.Unlock()
	id := e.create(t, f.ID, "24h")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		b, err := e.state.Get(context.Background(), id)
		require.NoError(t, err)
		require.NotEqual(t, "failed", string(b.Status), "%+v", b.Errors)
		if b.Dispatched {
			require.EqualValues(t, n, b.Counts.Total)
			break
		}
		require.True(t, time.Now().Before(deadline), "not dispatched in time")
		time.Sleep(10 * time.Millisecond)
	}

	fs.mu.Lock()
	defer fs.mu.Unlock()
	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.Equal(t, n, pub.published, "every line published once")
	require.Equal(t, n, fs.lastRead, "the dispatch read the whole file")
	t.Logf("file %d MB; live heap at most %.1f MB over the start (%d samples); dispatch read at most %d lines ahead of publishing, %d at the first publish",
		f.Bytes>>20, float64(fs.peak)/(1<<20), fs.samples, pub.maxAhead, pub.firstAhead)
	assert.LessOrEqual(t, pub.maxAhead, maxAhead, "the dispatch read far ahead of what it published: its chunks were held")
	require.Positive(t, fs.samples)
	assert.Less(t, fs.peak, uint64(f.Bytes/4), "the live heap grew with the file: its lines or chunks were held")
}

// watchedFiles is a file store whose readers count the lines read since the latest Open and,
// every 64th read, measure the live heap (after a collection, so garbage does not count), keeping
// the most it grew above base.
type watchedFiles struct {
	files.Store
	base uint64

	mu       sync.Mutex
	read     int // lines read since the latest Open
	lastRead int // lines the latest reader read in all
	reads    int
	samples  int
	peak     uint64
}

func (w *watchedFiles) Open(ctx context.Context, id string) (io.ReadCloser, error) {
	rc, err := w.Store.Open(ctx, id)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.read = 0
	w.mu.Unlock()
	return &watchedReader{ReadCloser: rc, w: w}, nil
}

// linesRead is how many lines the latest reader has read.
func (w *watchedFiles) linesRead() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.read
}

type watchedReader struct {
	io.ReadCloser
	w *watchedFiles
}

func (r *watchedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	w := r.w
	w.mu.Lock()
	w.read += bytes.Count(p[:n], []byte{'\n'})
	w.lastRead = w.read
	w.reads++
	sample := w.base != 0 && w.reads%64 == 0
	w.mu.Unlock()
	if sample {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.mu.Lock()
		w.samples++
		if ms.HeapAlloc > w.base {
			w.peak = max(w.peak, ms.HeapAlloc-w.base)
		}
		w.mu.Unlock()
	}
	return n, err
}

// watchedBus counts the lines published to the requests topic and, at each publish, how many
// more lines the input's latest reader had read. It keeps none of those messages (nothing takes
// them here), so that what the heap check sees is the service's.
type watchedBus struct {
	bus.Bus
	reads *watchedFiles

	mu         sync.Mutex
	published  int
	maxAhead   int
	firstAhead int
}

func (b *watchedBus) Publish(topic string, msgs ...*message.Message) error {
	if topic != batch.DefaultTopics().Requests {
		return b.Bus.Publish(topic, msgs...)
	}
	read := b.reads.linesRead()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.published == 0 {
		b.firstAhead = read
	}
	b.maxAhead = max(b.maxAhead, read-b.published)
	for _, m := range msgs {
		b.published += bytes.Count(m.Payload, []byte(`{"custom_id":`))
	}
	return nil
}

// vanishingFiles is a file store on which the Opens numbered in gone (from 1) find no file, as
// when a file is removed between two reads of it.
type vanishingFiles struct {
	files.Store
	gone     map[int]bool
	goneFrom int // > 0: every open from this one on fails too

	mu    sync.Mutex
	opens int
}

func (v *vanishingFiles) Open(ctx context.Context, id string) (io.ReadCloser, error) {
	v.mu.Lock()
	v.opens++
	gone := v.gone[v.opens] || v.goneFrom > 0 && v.opens >= v.goneFrom
	v.mu.Unlock()
	if gone {
		return nil, fmt.Errorf("files: %s: %w", id, files.ErrNotFound)
	}
	return v.Store.Open(ctx, id)
}

// An input that passed validation but cannot be read when the lines are dispatched leaves the
// batch undispatched, as a takeover that cannot read it does; the takeover after the claim expires
// reads it again, and every line runs once.
func TestInputGoneAtDispatch(t *testing.T) {
	fs := &vanishingFiles{gone: map[int]bool{2: true}} // 1: validation, 2: dispatch
	e := startEnv(t, envOptions{service: func(o *batch.Options) {
		o.ClaimTTL = 300 * time.Millisecond
		fs.Store = o.Files
		o.Files = fs
	}})
	id := e.create(t, e.upload(t, chatLines(20, "m1")), "24h")
	b := e.waitStatus(t, id, 20*time.Second, "completed")
	require.EqualValues(t, 20, b.RequestCounts.Total)
	require.EqualValues(t, 20, b.RequestCounts.Completed)
	require.Len(t, byCustomID(e.content(t, b.OutputFileID)), 20)
	require.EqualValues(t, 20, e.up.Requests(), "each line ran once")
	fs.mu.Lock()
	defer fs.mu.Unlock()
	require.GreaterOrEqual(t, fs.opens, 4, "a takeover validated and dispatched the input again")
}

// A cancelled batch whose input cannot be read when its remaining lines are given up ends with
// the lines that have a result, and says why the others are in neither file: whether the file is
// gone at the first read of the give-up or only at the second.
func TestInputGoneAtGiveUp(t *testing.T) {
	for _, gone := range []int{3, 4} { // 1, 2: validation and dispatch; 3, 4: the give-up's reads
		t.Run(fmt.Sprint("open ", gone), func(t *testing.T) {
			fs := &vanishingFiles{gone: map[int]bool{gone: true}}
			e := startEnv(t, envOptions{noWorker: true, service: func(o *batch.Options) {
				fs.Store = o.Files
				o.Files = fs
			}})
			id := e.create(t, e.upload(t, chatLines(10, "m1")), "24h")
			require.Eventually(t, func() bool {
				b, err := e.state.Get(context.Background(), id)
				return err == nil && b.Dispatched
			}, 10*time.Second, 5*time.Millisecond)
			// One line has run (no worker here: its result is recorded as a worker would).
			_, err := e.state.Record(context.Background(), id, []batchstate.Result{
				{CustomID: "req-3", Kind: batchstate.Output, Line: []byte(`{"id":"r","custom_id":"req-3","response":{"status_code":200,"body":{}}}`)}})
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, e.do(t, http.MethodPost, "/v1/batches/"+id+"/cancel", "", nil))
			b := e.waitStatus(t, id, 10*time.Second, "cancelled")
			require.EqualValues(t, 1, b.RequestCounts.Total)
			require.EqualValues(t, 1, b.RequestCounts.Completed)
			require.Equal(t, map[string]int{"req-3": 1}, byCustomID(e.content(t, b.OutputFileID)))
			require.Nil(t, b.ErrorFileID)
			require.NotNil(t, b.Errors)
			require.Len(t, b.Errors.Data, 1)
			require.Equal(t, "input_unavailable", b.Errors.Data[0].Code)
			require.Contains(t, b.Errors.Data[0].Message, "9 requests")
			require.Contains(t, b.Errors.Data[0].Message, "no longer exists")
		})
	}
}

// An input that vanishes after validation, before any line was dispatched, leaves the batch
// undispatched for good: the batch still ends when its window does, as expired, with no lines
// and the reason in its errors (once, however many sweeps saw it).
func TestInputGoneBeforeAnyLine(t *testing.T) {
	fs := &vanishingFiles{goneFrom: 2} // every read after the validation's
	e := startEnv(t, envOptions{service: func(o *batch.Options) {
		o.ClaimTTL = 200 * time.Millisecond
		fs.Store = o.Files
		o.Files = fs
	}})
	id := e.create(t, e.upload(t, chatLines(10, "m1")), "1s")
	b := e.waitStatus(t, id, 20*time.Second, "expired")
	require.EqualValues(t, 0, b.RequestCounts.Total)
	require.Nil(t, b.OutputFileID)
	require.Nil(t, b.ErrorFileID)
	require.NotNil(t, b.Errors)
	require.Len(t, b.Errors.Data, 1)
	require.Equal(t, "input_unavailable", b.Errors.Data[0].Code)
	require.Contains(t, b.Errors.Data[0].Message, "10 requests")
	require.Zero(t, e.up.Requests())
	time.Sleep(300 * time.Millisecond) // more sweeps
	require.Len(t, e.waitStatus(t, id, time.Second, "expired").Errors.Data, 1)
}

// failingBus fails the Publish calls to the requests topic numbered in fail (from 1).
type failingBus struct {
	bus.Bus
	fail map[int64]bool

	calls atomic.Int64
}

func (b *failingBus) Publish(topic string, msgs ...*message.Message) error {
	if topic == batch.DefaultTopics().Requests && b.fail[b.calls.Add(1)] {
		return errors.New("broker unavailable")
	}
	return b.Bus.Publish(topic, msgs...)
}

// A bus failure during a dispatch stops it and leaves the batch undispatched, and the takeover
// after the claim expires publishes it again: every line ends up once in the output. The failure
// comes while the file is still being read (the second of three groups of chunks) or after it
// was read whole (the last group).
func TestPublishFailureMidDispatch(t *testing.T) {
	for _, call := range []int64{2, 3} {
		t.Run(fmt.Sprint("publish ", call), func(t *testing.T) {
			fb := &failingBus{Bus: bus.NewGoChannel(quiet()), fail: map[int64]bool{call: true}}
			e := startEnv(t, envOptions{bus: fb, service: func(o *batch.Options) {
				o.ChunkLines = 1 // 40 chunks: groups of 16, 16 and 8
				o.ClaimTTL = 300 * time.Millisecond
			}})
			id := e.create(t, e.upload(t, chatLines(40, "m1")), "24h")
			b := e.waitStatus(t, id, 10*time.Second, "completed")
			require.EqualValues(t, 40, b.RequestCounts.Total)
			require.EqualValues(t, 40, b.RequestCounts.Completed)
			got := byCustomID(e.content(t, b.OutputFileID))
			require.Len(t, got, 40)
			for id, n := range got {
				require.Equal(t, 1, n, id)
			}
			require.GreaterOrEqual(t, fb.calls.Load(), call+3, "the failed dispatch, then a whole one")
		})
	}
}
