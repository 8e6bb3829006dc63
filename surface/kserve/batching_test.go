package kserve_test

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/batcher"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
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
	cost    func(rows int64) // when set, runs in place of signalling entered: a benchmark's backend
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
	if d.cost != nil {
		d.cost(in.Shape[0])
	} else {
		d.entered <- struct{}{}
	}
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

func loadParams(kv ...any) map[string]*inference.ModelRepositoryParameter {
	out := map[string]*inference.ModelRepositoryParameter{}
	for i := 0; i < len(kv); i += 2 {
		var p inference.ModelRepositoryParameter
		switch v := kv[i+1].(type) {
		case string:
			p.ParameterChoice = &inference.ModelRepositoryParameter_StringParam{StringParam: v}
		case []byte:
			p.ParameterChoice = &inference.ModelRepositoryParameter_BytesParam{BytesParam: v}
		case int64:
			p.ParameterChoice = &inference.ModelRepositoryParameter_Int64Param{Int64Param: v}
		}
		out[kv[i].(string)] = &p
	}
	return out
}

func TestLoadConfigOverrideSwitchesBatchingOn(t *testing.T) {
	t.Parallel()
	reg := newDoubler("registered", 8, &inference.ModelDynamicBatching{})
	srv := start(t, reg)
	srv.Registry.SetScheduler(batcher.Factory(batcher.Options{}))
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	c := inference.NewGRPCInferenceServiceClient(conn)
	ctx := context.Background()
	load := func(model string, params map[string]*inference.ModelRepositoryParameter) error {
		_, err := c.RepositoryModelLoad(ctx, &inference.RepositoryModelLoadRequest{ModelName: model, Parameters: params})
		return err
	}

	require.NoError(t, load("simple", loadParams("config",
		`{"name":"simple","max_batch_size":4,"dynamic_batching":{"max_queue_delay_microseconds":60000000},"instance_group":[{"kind":"KIND_CPU","count":2}]}`)))
	cfg, err := c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple"})
	require.NoError(t, err)
	assert.Equal(t, int32(4), cfg.Config.MaxBatchSize)
	assert.Equal(t, uint64(60000000), cfg.Config.GetDynamicBatching().GetMaxQueueDelayMicroseconds())
	assert.Equal(t, int32(2), cfg.Config.InstanceGroup[0].Count)

	// Four one-row requests fill the batch of 4 (the delay is a minute): one execution.
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			base := int32(100 * i)
			req := &inference.ModelInferRequest{ModelName: "simple", Inputs: []*inference.ModelInferRequest_InferInputTensor{
				{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: seq(16, func(k int) int32 { return base + int32(k) })}},
				{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &inference.InferTensorContents{IntContents: seq(16, func(int) int32 { return 1 })}},
			}}
			res, err := c.ModelInfer(ctx, req)
			if assert.NoError(t, err) {
				assert.Equal(t, seq(16, func(k int) int32 { return base + int32(k) + 1 }), int32s(res.RawOutputContents[0]), "request %d gets its own sums", i)
			}
		})
	}
	wg.Wait()
	st, err := c.ModelStatistics(ctx, &inference.ModelStatisticsRequest{Name: "simple"})
	require.NoError(t, err)
	require.Len(t, st.ModelStats[0].BatchStats, 1)
	assert.Equal(t, uint64(4), st.ModelStats[0].BatchStats[0].BatchSize)
	assert.Equal(t, uint64(1), st.ModelStats[0].ExecutionCount)

	// A plain load undoes the override.
	require.NoError(t, load("simple", nil))
	cfg, err = c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple"})
	require.NoError(t, err)
	assert.Equal(t, int32(8), cfg.Config.MaxBatchSize)
	assert.Nil(t, cfg.Config.GetDynamicBatching())

	for _, tc := range []struct {
		name, model string
		params      map[string]*inference.ModelRepositoryParameter
		code        codes.Code
		msg         string
	}{
		{"unknown parameter", "simple", loadParams("foo", "x"), codes.InvalidArgument, "unrecognized load parameter 'foo'."},
		{"config not a string", "simple", loadParams("config", int64(1)), codes.InvalidArgument, "invalid value type for load parameter 'config', expected string_param."},
		{"file not bytes", "simple", loadParams("file:1/model.onnx", int64(1)), codes.InvalidArgument, "invalid value type for load parameter 'file:1/model.onnx', expected bytes_param."},
		{"files", "simple", loadParams("config", "{}", "file:1/model.onnx", []byte{1}), codes.Unimplemented,
			"failed to load 'simple': model file overrides ('file:1/model.onnx') are not supported: infergate's models have no model files to replace"},
		{"bad JSON", "simple", loadParams("config", `{"max_batch_size":`), codes.InvalidArgument, "failed to load 'simple', failed to poll from model repository: Invalid config override: "},
		{"unknown field", "simple", loadParams("config", `{"max_batch_sizes":4}`), codes.InvalidArgument, "failed to load 'simple', failed to poll from model repository: Invalid config override: "},
		{"other name", "simple", loadParams("config", `{"name":"other"}`), codes.InvalidArgument,
			"unexpected directory name 'simple' for model 'other', directory name must equal model name"},
		{"changes inputs", "simple", loadParams("config", `{"input":[{"name":"X","data_type":"TYPE_FP32","dims":[1]}]}`), codes.Unimplemented,
			"failed to load 'simple': the config override changes 'input', which infergate cannot change on this model"},
		{"batch size too large", "simple", loadParams("config", `{"max_batch_size":1000000}`), codes.InvalidArgument, "failed to load 'simple': max_batch_size 1000000 is out of range"},
		{"preferred above max", "simple", loadParams("config", `{"max_batch_size":4,"dynamic_batching":{"preferred_batch_size":[8]}}`), codes.InvalidArgument,
			"dynamic batching preferred size must be <= max batch size for simple"},
		{"default priority", "simple", loadParams("config", `{"dynamic_batching":{"priority_levels":2}}`), codes.InvalidArgument,
			"default priority level must be in range [1, 2] for simple"},
		{"GPU instances", "simple", loadParams("config", `{"instance_group":[{"kind":"KIND_GPU","count":1}]}`), codes.Unimplemented, "failed to load 'simple': its instance group has kind KIND_GPU, and this server has no GPU engine"},
		{"sequence model", "simple_sequence", loadParams("config", `{"dynamic_batching":{}}`), codes.Unimplemented,
			"failed to load 'simple_sequence': dynamic batching cannot be enabled on a sequence or decoupled model"},
		{"registered model", "registered", loadParams("config", `{"max_batch_size":4}`), codes.Unimplemented,
			"failed to load 'registered': config overrides apply to infergate's built-in models only"},
		{"unknown model", "nope", loadParams("config", `{}`), codes.InvalidArgument, "failed to load 'nope', failed to poll from model repository"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := load(tc.model, tc.params)
			require.Error(t, err)
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), tc.msg)
		})
	}
	cfg, err = c.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple"})
	require.NoError(t, err)
	assert.Equal(t, int32(8), cfg.Config.MaxBatchSize, "refused overrides change nothing")
}
