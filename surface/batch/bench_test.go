package batch_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/bus/bustest"
	"github.com/infergate/infergate/surface/batch"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/require"
)

// runBatch runs one batch of n chat lines on e and returns how long it took from the create
// call until it completed.
func runBatch(b *testing.B, e *env, n int) time.Duration {
	b.Helper()
	file := e.upload(b, chatLines(n, "m1"))
	start := time.Now()
	id := e.create(b, file, "24h")
	for {
		st, err := e.state.Get(context.Background(), id)
		require.NoError(b, err)
		if st.Status.Terminal() {
			require.Equal(b, "completed", string(st.Status))
			require.EqualValues(b, n, st.Counts.Completed)
			return time.Since(start)
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

// kafkaEnv is a batch env on a kfake broker.
func kafkaEnv(b *testing.B, eo envOptions) *env {
	k := bustest.StartKafka(b)
	kb, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), Partitions: 16}, quiet())
	require.NoError(b, err)
	eo.bus = kb
	eo.service = func(o *batch.Options) { o.ChunkLines = 64 }
	return startEnv(b, eo)
}

// BenchmarkBatchKafka: one batch of b.N lines (use -benchtime 20000x) through the whole
// pipeline on a Kafka wire-protocol broker (kfake): validation and dispatch to the requests
// topic, a worker calling a 0 ms fake upstream through the gateway's proxy (64 at a time),
// results back over the results topic, recorded and assembled into the output file. Reports
// lines/s processed (create until completed); the baseline sends the same requests straight to
// the upstream from 64 goroutines.
func BenchmarkBatchKafka(b *testing.B) {
	b.Run("infergate", func(b *testing.B) {
		e := kafkaEnv(b, envOptions{worker: func(o *batch.WorkerOptions) { o.Concurrency = 64 }})
		runBatch(b, e, 200) // topics created, group joined, connections warm
		b.ResetTimer()
		proc := runBatch(b, e, b.N)
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

// BenchmarkBatchEnqueue: a batch of b.N lines (use -benchtime 20000x) from the create call until
// every line is on the kfake broker's requests topic (validation, chunking, publishing; no worker
// takes them). The baseline publishes the same chunks, encoded beforehand, straight to the bus.
func BenchmarkBatchEnqueue(b *testing.B) {
	b.Run("infergate", func(b *testing.B) {
		e := kafkaEnv(b, envOptions{noWorker: true})
		file := e.upload(b, chatLines(b.N, "m1"))
		warm := e.create(b, e.upload(b, chatLines(64, "m1")), "24h")
		waitDispatched(b, e, warm)
		b.ResetTimer()
		start := time.Now()
		waitDispatched(b, e, e.create(b, file, "24h"))
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "enqueued-lines/s")
	})
	b.Run("baseline", func(b *testing.B) {
		k := bustest.StartKafka(b)
		kb, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), Partitions: 16}, quiet())
		require.NoError(b, err)
		b.Cleanup(func() { _ = kb.Close() })
		lines := strings.Split(strings.TrimSpace(chatLines(b.N, "m1")), "\n")
		var msgs []*message.Message
		for i := 0; i < len(lines); i += 64 {
			payload := `{"batch":"b","endpoint":"/v1/chat/completions","model":"m1","lines":[` + strings.Join(lines[i:min(i+64, len(lines))], ",") + `]}`
			msgs = append(msgs, message.NewMessage(fmt.Sprint(i), []byte(payload)))
		}
		topic := batch.DefaultTopics().Requests
		require.NoError(b, kb.Publish(topic, message.NewMessage("warm", []byte("{}"))))
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < len(msgs); i += 16 {
			require.NoError(b, kb.Publish(topic, msgs[i:min(i+16, len(msgs))]...))
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "enqueued-lines/s")
	})
}

func waitDispatched(b *testing.B, e *env, id string) {
	for {
		st, err := e.state.Get(context.Background(), id)
		require.NoError(b, err)
		if st.Dispatched {
			return
		}
		require.NotEqual(b, "failed", string(st.Status))
		time.Sleep(time.Millisecond)
	}
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
		proc := runBatch(b, e, b.N)
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

// BenchmarkOnlineDuringBatch: online chat requests, one at a time, against a fake upstream
// taking 5 ms, with load shedding on (8 slots, half for batch work): the infergate arm while a
// large batch saturates its share, the baseline with no batch. Reports the online p50 and p99;
// the batch holds back, so the two arms should match.
func BenchmarkOnlineDuringBatch(b *testing.B) {
	run := func(b *testing.B, withBatch bool) {
		sh := guard.NewShedder(guard.ShedderConfig{MaxInFlight: 8, BatchShare: 0.5, MaxQueue: 100000, QueueTimeout: time.Second})
		g := guard.New(guard.Options{Shedder: sh, Logger: quiet()})
		e := startEnv(b, envOptions{admit: g.OpenAI(), worker: func(o *batch.WorkerOptions) { o.Concurrency = 64 }})
		e.up.SetLatency(5 * time.Millisecond)
		if withBatch {
			e.create(b, e.upload(b, chatLines(20000, "m1")), "24h")
			require.Eventually(b, func() bool { return sh.Stats().Batch == 4 }, 10*time.Second, time.Millisecond)
		}
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		body := `{"model":"m1","messages":[{"role":"user","content":"online"}]}`
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			res, err := client.Post(e.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			require.NoError(b, err)
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			require.Equal(b, http.StatusOK, res.StatusCode)
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
		if withBatch {
			b.ReportMetric(float64(sh.Stats().Batch), "batch-slots")
		}
	}
	b.Run("infergate", func(b *testing.B) { run(b, true) })
	b.Run("baseline", func(b *testing.B) { run(b, false) })
}
