package batch_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/batch"
	"github.com/infergate/infergate/adapters/batch/bus"
	"github.com/infergate/infergate/adapters/batch/bus/bustest"
	"github.com/infergate/infergate/adapters/openai/openaitest"
	"github.com/stretchr/testify/require"
)

// runBatch runs one batch of n chat lines on e and returns how long it took from the create
// call until every line was published (enqueued) and until it completed (processed).
func runBatch(b *testing.B, e *env, n int) (enqueued, processed time.Duration) {
	b.Helper()
	file := e.upload(b, chatLines(n, "m1"))
	start := time.Now()
	id := e.create(b, file, "24h")
	for {
		st, err := e.state.Get(context.Background(), id)
		require.NoError(b, err)
		if enqueued == 0 && st.Dispatched {
			enqueued = time.Since(start)
		}
		if st.Status.Terminal() {
			require.Equal(b, "completed", string(st.Status))
			require.EqualValues(b, n, st.Counts.Completed)
			if enqueued == 0 {
				enqueued = time.Since(start)
			}
			return enqueued, time.Since(start)
		}
		time.Sleep(time.Millisecond)
	}
}

// direct sends n chat requests straight to the fake upstream from c goroutines (the upstream's
// own ceiling: what a batch could reach with no gateway, bus or store at all).
func direct(b *testing.B, up *openaitest.Upstream, n, c int) time.Duration {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, DisableCompression: true}}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				body := fmt.Sprintf(`{"model":"m1","messages":[{"role":"user","content":"line %d"}]}`, i)
				res, err := client.Post(up.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkBatchKafka: one batch of b.N lines (use -benchtime 20000x) through the whole
// pipeline on a Kafka wire-protocol broker (kfake): validation and dispatch to the requests
// topic, a worker calling a 0 ms fake upstream through the gateway's proxy (64 at a time),
// results back over the results topic, recorded and assembled into the output file. Reports
// lines/s enqueued (create until every line is on the bus) and processed (create until
// completed); the baseline sends the same requests straight to the upstream from 64 goroutines.
func BenchmarkBatchKafka(b *testing.B) {
	b.Run("infergate", func(b *testing.B) {
		k := bustest.StartKafka(b)
		kb, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), Partitions: 16}, quiet())
		require.NoError(b, err)
		e := startEnv(b, envOptions{bus: kb, service: func(o *batch.Options) { o.ChunkLines = 64 },
			worker: func(o *batch.WorkerOptions) { o.Concurrency = 64 }})
		runBatch(b, e, 200) // topics created, group joined, connections warm
		b.ResetTimer()
		enq, proc := runBatch(b, e, b.N)
		b.ReportMetric(float64(b.N)/enq.Seconds(), "enqueued-lines/s")
		b.ReportMetric(float64(b.N)/proc.Seconds(), "processed-lines/s")
	})
	b.Run("baseline", func(b *testing.B) {
		up := openaitest.Start(b, "vllm", "m1")
		direct(b, up, 200, 64)
		b.ResetTimer()
		d := direct(b, up, b.N, 64)
		b.ReportMetric(float64(b.N)/d.Seconds(), "processed-lines/s")
	})
}

// BenchmarkBatchSlowUpstream: one batch of b.N lines (use -benchtime 100000x) against a fake
// upstream taking 50 ms per request, 256 requests allowed at once, on the in-process bus.
// Reports the time over the ideal (lines x 50 ms / 256) as x-ideal; the baseline is 256
// goroutines calling the upstream directly.
func BenchmarkBatchSlowUpstream(b *testing.B) {
	const latency, allowed = 50 * time.Millisecond, 256
	ideal := func(n int) float64 { return float64(n) * latency.Seconds() / allowed }
	b.Run("infergate", func(b *testing.B) {
		e := startEnv(b, envOptions{service: func(o *batch.Options) { o.ChunkLines = 64 },
			worker: func(o *batch.WorkerOptions) { o.Concurrency = allowed }})
		e.up.SetLatency(latency)
		runBatch(b, e, 512)
		b.ResetTimer()
		_, proc := runBatch(b, e, b.N)
		b.ReportMetric(proc.Seconds()/ideal(b.N), "x-ideal")
		b.ReportMetric(float64(b.N)/proc.Seconds(), "processed-lines/s")
	})
	b.Run("baseline", func(b *testing.B) {
		up := openaitest.Start(b, "vllm", "m1")
		up.SetLatency(latency)
		direct(b, up, 512, allowed)
		b.ResetTimer()
		d := direct(b, up, b.N, allowed)
		b.ReportMetric(d.Seconds()/ideal(b.N), "x-ideal")
		b.ReportMetric(float64(b.N)/d.Seconds(), "processed-lines/s")
	})
}
