package kserve_test

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/gateway/gatewaytest"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/batcher"
	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// doubler is a batching backend: OUT = IN * 2 over INT32 [batch, 2]. It records the batch sizes
// and first values it sees, and when gate is set each execution waits for it.
type doubler struct {
	cfg     *inference.ModelConfig
	gate    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	sizes   []int64
	firsts  []int32
}

func newDoubler(name string, maxBatch int32, db *inference.ModelDynamicBatching) *doubler {
	return &doubler{
		cfg: &inference.ModelConfig{Name: name, MaxBatchSize: maxBatch,
			Input:            []*inference.ModelInput{{Name: "IN", DataType: inference.DataType_TYPE_INT32, Dims: []int64{2}}},
			Output:           []*inference.ModelOutput{{Name: "OUT", DataType: inference.DataType_TYPE_INT32, Dims: []int64{2}}},
			SchedulingChoice: &inference.ModelConfig_DynamicBatching{DynamicBatching: db},
		},
		entered: make(chan struct{}, 64),
	}
}

func (d *doubler) Config() *inference.ModelConfig { return d.cfg }

func (d *doubler) Execute(ctx context.Context, r *engines.Request, send func(*engines.Response) error) error {
	in := r.Inputs[0]
	d.mu.Lock()
	d.sizes = append(d.sizes, in.Shape[0])
	d.firsts = append(d.firsts, int32(binary.LittleEndian.Uint32(in.Data)))
	d.mu.Unlock()
	d.entered <- struct{}{}
	if d.gate != nil {
		<-d.gate
	}
	out := make([]byte, len(in.Data))
	for i := 0; i+4 <= len(in.Data); i += 4 {
		binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(in.Data[i:])*2)
	}
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: slices.Clone(in.Shape), Data: out}}})
}

// startBatching serves d with the dynamic batcher on and returns a grpc-go connection and the
// model's batcher.
func startBatching(t *testing.T, d *doubler) (*grpc.ClientConn, *gatewaytest.Server, *batcher.Batcher) {
	t.Helper()
	srv := start(t, d)
	var b *batcher.Batcher
	f := batcher.Factory(batcher.Options{})
	srv.Registry.SetScheduler(func(e *engines.Entry, run engines.ExecuteFunc) engines.Scheduler {
		s := f(e, run)
		if e.Name() == d.cfg.Name {
			b = s.(*batcher.Batcher)
		}
		return s
	})
	require.NotNil(t, b)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn, srv, b
}

func doublerRequest(model string, rows int, base int32) *inference.ModelInferRequest {
	vals := seq(rows*2, func(i int) int32 { return base + int32(i) })
	return &inference.ModelInferRequest{ModelName: model, Inputs: []*inference.ModelInferRequest_InferInputTensor{
		{Name: "IN", Datatype: "INT32", Shape: []int64{int64(rows), 2}, Contents: &inference.InferTensorContents{IntContents: vals}},
	}}
}

func inferGRPC(ctx context.Context, conn *grpc.ClientConn, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	return inference.NewGRPCInferenceServiceClient(conn).ModelInfer(ctx, req)
}

// waitQueued polls until the batcher holds n requests.
func waitQueued(t *testing.T, b *batcher.Batcher, n int) {
	t.Helper()
	for i := 0; b.Len() != n; i++ {
		if i == 30_000 { // a hang guard, not a threshold: a correct batcher gets there at once
			t.Fatalf("the queue holds %d requests, want %d", b.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDynamicBatchingCoalescesOverGRPC(t *testing.T) {
	t.Parallel()
	// The batch fills at 8 rows and the delay is long: exactly one execution of 8 rows.
	d := newDoubler("doubler", 8, &inference.ModelDynamicBatching{MaxQueueDelayMicroseconds: 60_000_000})
	conn, _, _ := startBatching(t, d)
	ctx := context.Background()
	rows := []int{1, 2, 2, 3}
	var wg sync.WaitGroup
	for i, n := range rows {
		wg.Go(func() {
			res, err := inferGRPC(ctx, conn, doublerRequest("doubler", n, int32(1000*i)))
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, []int64{int64(n), 2}, res.Outputs[0].Shape)
			assert.Equal(t, seq(n*2, func(k int) int32 { return 2 * (int32(1000*i) + int32(k)) }), int32s(res.RawOutputContents[0]), "request %d gets its own rows", i)
		})
	}
	wg.Wait()
	assert.Equal(t, []int64{8}, d.sizes)

	st, err := inference.NewGRPCInferenceServiceClient(conn).ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "doubler"})
	require.NoError(t, err)
	ms := st.ModelStats[0]
	assert.Equal(t, uint64(8), ms.InferenceCount)
	assert.Equal(t, uint64(1), ms.ExecutionCount)
	assert.Equal(t, uint64(4), ms.InferenceStats.Queue.Count)
	assert.Positive(t, ms.InferenceStats.Queue.Ns, "requests waited for the batch to fill")
	require.Len(t, ms.BatchStats, 1)
	assert.Equal(t, uint64(8), ms.BatchStats[0].BatchSize)
	assert.Equal(t, uint64(1), ms.BatchStats[0].ComputeInfer.Count)
}

func TestDynamicBatchingQueueFull(t *testing.T) {
	t.Parallel()
	d := newDoubler("doubler_qfull", 1, &inference.ModelDynamicBatching{
		DefaultQueuePolicy: &inference.ModelQueuePolicy{MaxQueueSize: 1},
	})
	d.gate = make(chan struct{})
	conn, _, b := startBatching(t, d)
	ctx := context.Background()
	errs := make(chan error, 3)
	go func() { _, err := inferGRPC(ctx, conn, doublerRequest(d.cfg.Name, 1, 1)); errs <- err }()
	<-d.entered // the first runs (blocked), out of the queue
	go func() { _, err := inferGRPC(ctx, conn, doublerRequest(d.cfg.Name, 1, 2)); errs <- err }()
	waitQueued(t, b, 1)
	_, err := inferGRPC(ctx, conn, doublerRequest(d.cfg.Name, 1, 3))
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, "Exceeds maximum queue size", status.Convert(err).Message())
	close(d.gate)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
}

func TestDynamicBatchingQueueTimeout(t *testing.T) {
	t.Parallel()
	d := newDoubler("doubler_timeout", 1, &inference.ModelDynamicBatching{
		DefaultQueuePolicy: &inference.ModelQueuePolicy{DefaultTimeoutMicroseconds: 1000, TimeoutAction: inference.ModelQueuePolicy_REJECT},
	})
	d.gate = make(chan struct{})
	conn, _, _ := startBatching(t, d)
	ctx := context.Background()
	first := make(chan error, 1)
	go func() { _, err := inferGRPC(ctx, conn, doublerRequest(d.cfg.Name, 1, 1)); first <- err }()
	<-d.entered
	_, err := inferGRPC(ctx, conn, doublerRequest(d.cfg.Name, 1, 2))
	require.Error(t, err)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, "Request timeout expired", status.Convert(err).Message())
	close(d.gate)
	require.NoError(t, <-first)
	assert.Equal(t, []int64{1}, d.sizes, "the expired request never ran")
}

func TestDynamicBatchingPriorities(t *testing.T) {
	t.Parallel()
	d := newDoubler("doubler_prio", 1, &inference.ModelDynamicBatching{PriorityLevels: 2, DefaultPriorityLevel: 2})
	d.gate = make(chan struct{}, 8)
	conn, _, b := startBatching(t, d)
	ctx := context.Background()
	errs := make(chan error, 4)
	send := func(base int32, priority uint64) {
		req := doublerRequest(d.cfg.Name, 1, base)
		if priority > 0 {
			req.Parameters = map[string]*inference.InferParameter{"priority": {ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: priority}}}
		}
		go func() { _, err := inferGRPC(ctx, conn, req); errs <- err }()
	}
	send(1, 0)
	<-d.entered // blocks the only instance
	send(10, 0)
	waitQueued(t, b, 1)
	send(20, 2)
	waitQueued(t, b, 2)
	send(30, 1) // the high priority request overtakes both
	waitQueued(t, b, 3)
	for range 4 {
		d.gate <- struct{}{}
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
	assert.Equal(t, []int32{1, 30, 10, 20}, d.firsts)
}
