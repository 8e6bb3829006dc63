package bus_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/bus/bustest"
)

// chunkLines and lineBytes shape a benchmark message like a batch chunk: 64 request lines of
// about 200 bytes.
const (
	chunkLines = 64
	lineBytes  = 200
)

// BenchmarkBusThroughput publishes b.N chunks from several goroutines and consumes and acks
// them all. lines/s counts the chunks' lines end to end; enqueued-lines/s counts them by the
// time the last Publish returned.
func BenchmarkBusThroughput(b *testing.B) {
	payload := chunkPayload()
	b.Run("kafka", func(b *testing.B) {
		k := bustest.StartKafka(b)
		benchmarkBus(b, newKafka(b, k), payload)
	})
	b.Run("gochannel", func(b *testing.B) {
		bs := bus.NewGoChannel(bustest.Logger(b))
		b.Cleanup(func() { closeBus(b, bs) })
		benchmarkBus(b, bs, payload)
	})
}

func chunkPayload() []byte {
	var sb strings.Builder
	for i := range chunkLines {
		line := fmt.Sprintf(`{"custom_id":"request-%06d","method":"POST","url":"/v1/chat/completions","body":{"model":"tiny","messages":[{"role":"user","content":"`, i)
		sb.WriteString(line)
		sb.WriteString(strings.Repeat("x", lineBytes-len(line)-len(`"}]}}`)-1))
		sb.WriteString("\"}]}}\n")
	}
	return []byte(sb.String())
}

func benchmarkBus(b *testing.B, bs bus.Bus, payload []byte) {
	const topic, publishers = "bench", 8
	ch := subscribe(b, b.Context(), bs, topic, "workers")
	// One message through first, so that the group has joined before the clock starts.
	publish(b, bs, topic, message.NewMessage(watermill.NewUUID(), payload))
	receive(b, ch).Ack()

	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	start := time.Now()
	var enqueued time.Duration
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		wg.Go(func() {
			for i := p; i < b.N; i += publishers {
				if err := bs.Publish(topic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		enqueued = time.Since(start)
		close(errs)
	}()
	for range b.N {
		receive(b, ch).Ack()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := <-errs; err != nil {
		b.Fatalf("Publish: %v", err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(b.N*chunkLines)/elapsed.Seconds(), "lines/s")
	b.ReportMetric(float64(b.N*chunkLines)/enqueued.Seconds(), "enqueued-lines/s")
}
