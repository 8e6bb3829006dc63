package batch

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/bus/bustest"
	"github.com/stretchr/testify/require"
)

// callerFunc is a Caller.
type callerFunc func(ctx context.Context, path string, body []byte) (*pipeline.Response, error)

func (f callerFunc) Call(ctx context.Context, path string, body []byte) (*pipeline.Response, error) {
	return f(ctx, path, body)
}

// A retry waiting for its time does not hold back the retries behind it in its partition: over
// Kafka, with one partition, a retry due in an hour is ahead of one due now, and the one due now
// runs while the first still waits. (An ordered subscription hands a partition's next message
// over only once the previous one was acked: the second would wait the hour.)
func TestWaitingRetryDoesNotHoldItsPartition(t *testing.T) {
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	k := bustest.StartKafka(t)
	b, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), Partitions: 1}, discard)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	st := batchstate.NewMemory()
	const id = "batch_retries"
	require.NoError(t, st.Create(t.Context(), &batchstate.Batch{ID: id, Endpoint: "/v1/chat/completions", InputFileID: "file-x",
		CompletionWindow: "24h", Status: batchstate.InProgress, CreatedAt: time.Now().Unix(), Model: "m",
		Counts: batchstate.Counts{Total: 2}}))

	retry := func(customID string, notBefore time.Time) {
		c := &chunk{Batch: id, Endpoint: "/v1/chat/completions", Model: "m", Attempts: 1, NotBefore: notBefore.UnixMilli(),
			Lines: []Line{{CustomID: customID, Body: []byte(`{"model":"m","messages":[],"user":"` + customID + `"}`)}}}
		require.NoError(t, b.Publish(DefaultTopics().Retries, newRawMessage(id+"/retry/"+customID, encodeChunk(c))))
	}
	retry("later", time.Now().Add(time.Hour)) // first in the partition
	retry("now", time.Now())

	ran := make(chan string, 2)
	w := NewWorker(WorkerOptions{Bus: b, State: st, Logger: discard, Caller: callerFunc(func(_ context.Context, _ string, body []byte) (*pipeline.Response, error) {
		for _, who := range []string{"later", "now"} {
			if bytes.Contains(body, []byte(`"user":"`+who+`"`)) {
				ran <- who
			}
		}
		return nil, &pipeline.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "refused"}
	})})
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })

	select {
	case who := <-ran:
		require.Equal(t, "now", who)
	case <-time.After(60 * time.Second): // joining the consumer group takes seconds; this is the hour
		t.Fatal("the retry due now did not run: it waits behind the one due in an hour")
	}
	select {
	case who := <-ran:
		t.Fatalf("%q ran too", who)
	default:
	}
}
