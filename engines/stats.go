package engines

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/gen/inference"
)

// LatencyBuckets are the upper bounds, in seconds, of the request latency histogram each model
// keeps; exported so the metrics endpoint publishes the same buckets.
var LatencyBuckets = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Duration is a count of events and their summed duration, updated without locks.
type Duration struct {
	count atomic.Uint64
	ns    atomic.Uint64
}

func (d *Duration) add(t time.Duration) {
	d.count.Add(1)
	d.ns.Add(uint64(max(t, 0)))
}

// Count and Total read the accumulated values.
func (d *Duration) Count() uint64        { return d.count.Load() }
func (d *Duration) Total() time.Duration { return time.Duration(d.ns.Load()) }

func (d *Duration) proto() *inference.StatisticDuration {
	return &inference.StatisticDuration{Count: d.count.Load(), Ns: d.ns.Load()}
}

// Stats are a model's request statistics, the source of both ModelStatistics and /metrics.
type Stats struct {
	inferences    atomic.Uint64
	executions    atomic.Uint64
	lastInference atomic.Int64 // ms since the Unix epoch
	Success       Duration
	Fail          Duration
	Queue         Duration
	ComputeInput  Duration
	ComputeInfer  Duration
	ComputeOutput Duration
	buckets       [len(LatencyBuckets) + 1]atomic.Uint64

	batchMu sync.Mutex
	batches map[int]*batchStat // by batch size; at most one per size up to max_batch_size
}

type batchStat struct{ input, infer, output Duration }

// Timing splits one request's time the way Triton reports it.
type Timing struct {
	Start                        time.Time
	Input, Infer, Output, Queued time.Duration
	// Batched marks a request that ran inside a batch its scheduler already counted as one
	// execution (RecordBatch); RecordSuccess then counts its inferences only.
	Batched bool
}

// RecordSuccess accounts one successful request of the given batch size.
func (s *Stats) RecordSuccess(batch int, t Timing, end time.Time) {
	total := end.Sub(t.Start)
	s.inferences.Add(uint64(max(batch, 1)))
	if !t.Batched {
		s.executions.Add(1)
	}
	s.lastInference.Store(end.UnixMilli())
	s.Success.add(total)
	s.Queue.add(t.Queued)
	s.ComputeInput.add(t.Input)
	s.ComputeInfer.add(t.Infer)
	s.ComputeOutput.add(t.Output)
	s.observe(total)
}

// RecordBatch accounts one model execution of a batch of size requests' rows, formed by a
// scheduler, for ModelStatistics' batch_stats.
func (s *Stats) RecordBatch(size int, input, infer, output time.Duration) {
	s.executions.Add(1)
	s.batchMu.Lock()
	if s.batches == nil {
		s.batches = make(map[int]*batchStat)
	}
	b := s.batches[size]
	if b == nil {
		b = &batchStat{}
		s.batches[size] = b
	}
	s.batchMu.Unlock()
	b.input.add(input)
	b.infer.add(infer)
	b.output.add(output)
}

func (s *Stats) batchProto() []*inference.InferBatchStatistics {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	if len(s.batches) == 0 {
		return nil
	}
	out := make([]*inference.InferBatchStatistics, 0, len(s.batches))
	for size, b := range s.batches {
		out = append(out, &inference.InferBatchStatistics{
			BatchSize: uint64(size), ComputeInput: b.input.proto(), ComputeInfer: b.infer.proto(), ComputeOutput: b.output.proto(),
		})
	}
	slices.SortFunc(out, func(a, b *inference.InferBatchStatistics) int { return cmp.Compare(a.BatchSize, b.BatchSize) })
	return out
}

// RecordFailure accounts one failed request.
func (s *Stats) RecordFailure(start, end time.Time) {
	total := end.Sub(start)
	s.Fail.add(total)
	s.observe(total)
}

func (s *Stats) observe(d time.Duration) {
	sec := d.Seconds()
	i := 0
	for i < len(LatencyBuckets) && sec > LatencyBuckets[i] {
		i++
	}
	s.buckets[i].Add(1)
}

// Inferences is the number of inferences run (batch elements), Executions the number of model runs.
func (s *Stats) Inferences() uint64 { return s.inferences.Load() }
func (s *Stats) Executions() uint64 { return s.executions.Load() }

// Histogram returns cumulative counts per bucket of LatencyBuckets, the total count and the sum
// of latencies in seconds, ready for a Prometheus histogram.
func (s *Stats) Histogram() (cumulative map[float64]uint64, count uint64, sum float64) {
	cumulative = make(map[float64]uint64, len(LatencyBuckets))
	var running uint64
	for i, le := range LatencyBuckets {
		running += s.buckets[i].Load()
		cumulative[le] = running
	}
	count = running + s.buckets[len(LatencyBuckets)].Load()
	sum = (s.Success.Total() + s.Fail.Total()).Seconds()
	return cumulative, count, sum
}

// StatisticsProto returns the statistics as Triton's ModelStatistics message.
func (e *Entry) StatisticsProto() *inference.ModelStatistics {
	s := &e.Stats
	return &inference.ModelStatistics{
		Name:           e.Name(),
		Version:        e.versionS,
		LastInference:  uint64(max(s.lastInference.Load(), 0)),
		InferenceCount: s.inferences.Load(),
		ExecutionCount: s.executions.Load(),
		InferenceStats: &inference.InferStatistics{
			Success:       s.Success.proto(),
			Fail:          s.Fail.proto(),
			Queue:         s.Queue.proto(),
			ComputeInput:  s.ComputeInput.proto(),
			ComputeInfer:  s.ComputeInfer.proto(),
			ComputeOutput: s.ComputeOutput.proto(),
			CacheHit:      &inference.StatisticDuration{},
			CacheMiss:     &inference.StatisticDuration{},
		},
		BatchStats: s.batchProto(),
	}
}
