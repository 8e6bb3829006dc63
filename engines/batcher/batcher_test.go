package batcher_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/batcher"
	"github.com/infergate/infergate/engines/batcher/batchertest"
	"github.com/infergate/infergate/gen/inference"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// gpu is a fake accelerator model: one execution at a time, costing perCall plus perItem for each
// row, OUT = IN * 2 over INT32 [batch, 2].
type gpu struct {
	cfg              *inference.ModelConfig
	perCall, perItem time.Duration
	mu               sync.Mutex
	sizes            []int64
}

func newGPU(db *inference.ModelDynamicBatching, maxBatch int32) *gpu {
	cfg := &inference.ModelConfig{Name: "gpu", MaxBatchSize: maxBatch,
		Input:  []*inference.ModelInput{{Name: "IN", DataType: inference.DataType_TYPE_INT32, Dims: []int64{2}}},
		Output: []*inference.ModelOutput{{Name: "OUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{2}}},
	}
	if db != nil {
		cfg.SchedulingChoice = &inference.ModelConfig_DynamicBatching{DynamicBatching: db}
	}
	return &gpu{cfg: cfg}
}

func (g *gpu) Config() *inference.ModelConfig { return g.cfg }

func (g *gpu) Execute(_ context.Context, r *engines.Request, send func(*engines.Response) error) error {
	in := r.Inputs[0]
	g.mu.Lock()
	g.sizes = append(g.sizes, in.Shape[0])
	if g.perCall > 0 {
		time.Sleep(g.perCall + time.Duration(in.Shape[0])*g.perItem)
	}
	g.mu.Unlock()
	out := make([]byte, len(in.Data))
	for i := 0; i+4 <= len(in.Data); i += 4 {
		binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(in.Data[i:])*2)
	}
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: slices.Clone(in.Shape), Data: out}}})
}

func request(rows int, base int32) *engines.Request {
	data := make([]byte, 0, rows*8)
	for i := range rows * 2 {
		data = binary.LittleEndian.AppendUint32(data, uint32(base+int32(i)))
	}
	return &engines.Request{Inputs: []engines.Tensor{{Name: "IN", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{int64(rows), 2}, Data: data}}}
}

// register puts m in a registry with the batcher on (or off) and returns its entry.
func register(t testing.TB, m engines.Model, batching bool) *engines.Entry {
	reg := engines.NewRegistry()
	if batching {
		reg.SetScheduler(batcher.Factory(batcher.Options{}))
	}
	e, err := reg.Register(m)
	require.NoError(t, err)
	return e
}

func run(e *engines.Entry, r *engines.Request) (*engines.Response, error) {
	var res *engines.Response
	err := e.Execute(context.Background(), r, func(x *engines.Response) error { res = x; return nil })
	return res, err
}

func TestCoalescesAndSplits(t *testing.T) {
	t.Parallel()
	// A long delay and a batch that fills at 8 rows: the model runs exactly once, whatever the
	// timing, with requests of 1, 2, 2 and 3 rows.
	g := newGPU(&inference.ModelDynamicBatching{MaxQueueDelayMicroseconds: 60_000_000}, 8)
	m := batcher.NewMetrics()
	reg := engines.NewRegistry()
	reg.SetScheduler(batcher.Factory(batcher.Options{Metrics: m}))
	e, err := reg.Register(g)
	require.NoError(t, err)
	rows := []int{1, 2, 2, 3}
	var wg sync.WaitGroup
	for i, n := range rows {
		wg.Go(func() {
			r := request(n, int32(100*i))
			res, err := run(e, r)
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, []int64{int64(n), 2}, res.Outputs[0].Shape)
			assert.Equal(t, n*8, len(res.Outputs[0].Data))
			for k := 0; k < len(res.Outputs[0].Data); k += 4 {
				assert.Equal(t, uint32(2*(100*i+k/4)), binary.LittleEndian.Uint32(res.Outputs[0].Data[k:]), "request %d element %d", i, k/4)
			}
			assert.True(t, r.Batched)
		})
	}
	wg.Wait()
	assert.Equal(t, []int64{8}, g.sizes)
	st := e.StatisticsProto()
	assert.Equal(t, uint64(1), st.ExecutionCount)
	require.Len(t, st.BatchStats, 1)
	assert.Equal(t, uint64(8), st.BatchStats[0].BatchSize)
	assert.Equal(t, uint64(1), st.BatchStats[0].ComputeInfer.Count)

	pr := prometheus.NewPedanticRegistry()
	require.NoError(t, pr.Register(m.Collectors()[0]))
	require.NoError(t, pr.Register(m.Collectors()[1]))
	require.NoError(t, testutil.GatherAndCompare(pr, strings.NewReader(`
# HELP infergate_batcher_pending_requests Requests waiting in a model's dynamic batching queue (Triton's nv_inference_pending_request_count).
# TYPE infergate_batcher_pending_requests gauge
infergate_batcher_pending_requests{model="gpu"} 0
`), "infergate_batcher_pending_requests"))
	n, err := testutil.GatherAndCount(pr, "infergate_batcher_batch_size")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestUnbatchedModelRunsDirectly(t *testing.T) {
	t.Parallel()
	g := newGPU(nil, 8)
	e := register(t, g, true)
	r := request(3, 1)
	_, err := run(e, r)
	require.NoError(t, err)
	assert.False(t, r.Batched)
	assert.Empty(t, e.StatisticsProto().BatchStats)
}

// BenchmarkDynamicBatching runs c=64 callers of small requests against a model costing 2 ms per
// call plus 20 µs per row, executing one call at a time like an accelerator, without and with the
// dynamic batcher, and reports the throughput ratio and each p99.
func BenchmarkDynamicBatching(b *testing.B) {
	const c = 64
	measure := func(batching bool) (perSec float64, p99 time.Duration) {
		g := newGPU(&inference.ModelDynamicBatching{}, 64)
		g.perCall, g.perItem = 2*time.Millisecond, 20*time.Microsecond
		e := register(b, g, batching)
		return batchertest.Closed(b, c, b.N, func(k int) error {
			_, err := run(e, request(1, int32(k)))
			return err
		})
	}
	unbatched, p99u := measure(false)
	b.ResetTimer()
	batched, p99b := measure(true)
	batchertest.Report(b, batched, unbatched, p99b, p99u)
	if testing.Verbose() {
		fmt.Printf("N=%d batched %.0f/s p99 %v; unbatched %.0f/s p99 %v\n", b.N, batched, p99b, unbatched, p99u)
	}
}

func TestRemoteModelsBatchOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	g := newGPU(&inference.ModelDynamicBatching{MaxQueueDelayMicroseconds: 60_000_000}, 2)
	raw, err := proto.Marshal(g.cfg)
	require.NoError(t, err)
	for _, remote := range []bool{false, true} {
		reg := engines.NewRegistry()
		reg.SetScheduler(batcher.Factory(batcher.Options{Remote: remote}))
		e, err := reg.RegisterRemote(&tensorv1.TensorModelConfig{TritonModelConfig: raw}, g.Execute)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				r := request(1, int32(i))
				_, err := run(e, r)
				assert.NoError(t, err)
				assert.Equal(t, remote, r.Batched)
			})
		}
		wg.Wait()
	}
	assert.Equal(t, []int64{1, 1, 2}, g.sizes, "two separate calls, then one batch of two")
}

func TestDelayedRequestsRunAfterOthers(t *testing.T) {
	t.Parallel()
	// max_batch_size 1 so order shows; a request past its 1 µs timeout under DELAY moves behind
	// the level's requests still in time.
	g := newGPU(&inference.ModelDynamicBatching{DefaultQueuePolicy: &inference.ModelQueuePolicy{
		TimeoutAction: inference.ModelQueuePolicy_DELAY, AllowTimeoutOverride: true,
	}}, 1)
	gate := make(chan struct{})
	blocked := &gatedModel{gpu: g, gate: gate, entered: make(chan struct{}, 8)}
	reg := engines.NewRegistry()
	var b *batcher.Batcher
	reg.SetScheduler(func(e *engines.Entry, run engines.ExecuteFunc) engines.Scheduler {
		b = batcher.New(e, run)
		return b
	})
	e, err := reg.Register(blocked)
	require.NoError(t, err)
	var wg sync.WaitGroup
	start := func(base int32, timeout time.Duration) {
		r := request(1, base)
		r.Timeout = timeout
		wg.Go(func() { _, err := run(e, r); assert.NoError(t, err) })
	}
	start(1, 0)
	<-blocked.entered
	start(2, time.Microsecond) // expires while queued: delayed
	for b.Len() != 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond) // its 1 µs timer fires long before: its caller moves it to the delayed queue
	start(3, 0)
	for b.Len() != 2 {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	assert.Equal(t, []int32{1, 3, 2}, blocked.firsts)
}

type gatedModel struct {
	*gpu
	gate    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	firsts  []int32
}

func (m *gatedModel) Execute(ctx context.Context, r *engines.Request, send func(*engines.Response) error) error {
	m.mu.Lock()
	m.firsts = append(m.firsts, int32(binary.LittleEndian.Uint32(r.Inputs[0].Data)))
	m.mu.Unlock()
	m.entered <- struct{}{}
	<-m.gate
	return m.gpu.Execute(ctx, r, send)
}
