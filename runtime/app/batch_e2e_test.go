package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/store/bus/bustest"
	"github.com/infergate/infergate/surface/batch/batchtest"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/require"
)

// startWorkerBinary runs the binary as a batch worker until the test ends (or the test kills
// it), and waits until it serves /health.
func startWorkerBinary(t *testing.T, cfg string) (addr string, cmd *exec.Cmd) {
	t.Helper()
	return startProcess(t, nil, "/health", "-role", "batch-worker", "-config", cfg)
}

// linesDone reads a process's infergate_batch_lines_done_total, all results together.
func linesDone(t *testing.T, addr string) int {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	n := 0
	for sc.Scan() {
		if name, v, ok := strings.Cut(sc.Text(), " "); ok && strings.HasPrefix(name, "infergate_batch_lines_done_total") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			n += int(f)
		}
	}
	return n
}

type e2eBatch struct {
	Status        string  `json:"status"`
	OutputFileID  *string `json:"output_file_id"`
	ErrorFileID   *string `json:"error_file_id"`
	RequestCounts struct {
		Total, Completed, Failed int64
	} `json:"request_counts"`
}

func getBatch(t *testing.T, addr, id string) e2eBatch {
	t.Helper()
	res, err := http.Get("http://" + addr + "/v1/batches/" + id)
	require.NoError(t, err)
	defer res.Body.Close()
	var b e2eBatch
	require.NoError(t, json.NewDecoder(res.Body).Decode(&b))
	return b
}

// createBatch starts a /v1/chat/completions batch of an uploaded file and returns its id.
func createBatch(t *testing.T, addr, fileID string) string {
	t.Helper()
	res, err := http.Post("http://"+addr+"/v1/batches", "application/json",
		strings.NewReader(`{"input_file_id":"`+fileID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`))
	require.NoError(t, err)
	defer res.Body.Close()
	var created struct{ ID string }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&created))
	return created.ID
}

// completedBatch runs one JSONL line as a batch and returns the batch once completed, with an
// output file.
func completedBatch(t *testing.T, addr, line string) e2eBatch {
	t.Helper()
	id := createBatch(t, addr, uploadBatchFile(t, "http://"+addr, "k", line+"\n"))
	done := waitBatch(t, addr, id, 20*time.Second, func(b e2eBatch) bool { return b.Status == "completed" })
	require.NotNil(t, done.OutputFileID)
	return done
}

// waitBatch polls until cond holds, failing with the batch's state after timeout.
func waitBatch(t *testing.T, addr, id string, timeout time.Duration, cond func(e2eBatch) bool) e2eBatch {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b := getBatch(t, addr, id)
		if cond(b) {
			return b
		}
		require.True(t, time.Now().Before(deadline), "batch %s: %+v", id, b)
		time.Sleep(50 * time.Millisecond)
	}
}

// fileLines downloads a file and counts its lines by custom_id, checking the line shape.
func fileLines(t *testing.T, addr string, id *string, counts map[string]int) int {
	t.Helper()
	if id == nil {
		return 0
	}
	res, err := http.Get("http://" + addr + "/v1/files/" + *id + "/content")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	n := 0
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var o struct {
			CustomID string `json:"custom_id"`
			Response *struct {
				StatusCode int `json:"status_code"`
			} `json:"response"`
		}
		require.NoError(t, json.Unmarshal(l, &o), string(l))
		require.NotNil(t, o.Response, string(l))
		counts[o.CustomID]++
		n++
	}
	return n
}

// TestBinaryBatchWorkersOverKafka runs a gateway and two batch-worker processes sharing Redis
// (state) and Kafka (kfake: the requests, results and dead-letter topics), and a batch of 3,000
// lines, some of which the upstream refuses. Mid-batch one worker is killed (SIGKILL: its
// unacked chunks go to the other once the group rebalances), then the broker restarts. Every
// custom_id still ends up exactly once in the output or the error file, and the counts agree;
// the two workers together never had more than batch.concurrency requests at the upstream.
func TestBinaryBatchWorkersOverKafka(t *testing.T) {
	const lines = 3000
	rdb := redistest.Start(t)
	kafka := bustest.StartKafka(t)
	llm := openaitest.Start(t, "vllm", "m1")
	llm.SetLatency(25 * time.Millisecond)
	llm.FailBodiesContaining("refuse-me", http.StatusBadRequest)
	cfg := writeConfig(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: vllm, url: %q, type: vllm, check_interval: 100ms}
redis: {addr: %q}
batch:
  dir: %q
  worker: false
  concurrency: 8
  chunk_lines: 20
  kafka: {brokers: [%s], partitions: 8}
`, llm.URL, rdb.Addr, t.TempDir(), strings.Join(kafka.Addrs(), ", ")))
	gw := startBinary(t, nil, "-config", cfg)
	_, w1 := startWorkerBinary(t, cfg)
	w2addr, _ := startWorkerBinary(t, cfg)

	var in strings.Builder
	for i := range lines {
		content := fmt.Sprintf("line %d", i)
		if i%100 == 0 {
			content += " refuse-me"
		}
		fmt.Fprintf(&in, `{"custom_id":"c%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m1","messages":[{"role":"user","content":%q}]}}`+"\n", i, content)
	}
	id := createBatch(t, gw, batchtest.Upload(t, "http://"+gw, "", in.String()))

	done := func(b e2eBatch) int64 { return b.RequestCounts.Completed + b.RequestCounts.Failed }
	// The second worker gets partitions once the group has rebalanced (seconds): then both
	// run lines, and one is killed.
	waitBatch(t, gw, id, 60*time.Second, func(b e2eBatch) bool { return done(b) >= lines/5 && linesDone(t, w2addr) > 0 })
	require.LessOrEqual(t, llm.PeakInFlight(), int64(8), "batch.concurrency bounds both workers together")
	require.NoError(t, w1.Process.Kill())
	_ = w1.Wait()
	mid := waitBatch(t, gw, id, 60*time.Second, func(b e2eBatch) bool { return done(b) >= lines/2 })
	require.Equal(t, "in_progress", mid.Status, "the restart happens mid-batch")
	kafka.Restart()

	b := waitBatch(t, gw, id, 120*time.Second, func(b e2eBatch) bool { return b.Status == "completed" })
	require.EqualValues(t, lines, b.RequestCounts.Total)
	require.EqualValues(t, lines/100, b.RequestCounts.Failed)
	require.EqualValues(t, lines-lines/100, b.RequestCounts.Completed)
	counts := map[string]int{}
	outN := fileLines(t, gw, b.OutputFileID, counts)
	errN := fileLines(t, gw, b.ErrorFileID, counts)
	require.Equal(t, lines-lines/100, outN)
	require.Equal(t, lines/100, errN)
	require.Len(t, counts, lines)
	for cid, n := range counts {
		require.Equal(t, 1, n, "custom_id %s", cid)
	}
	require.EqualValues(t, 8, llm.PeakInFlight(), "batch.concurrency bounds every worker together, and is used in full")
}

// TestBinaryBatchRedisDown: with batch.redis_timeout set, a gateway whose Redis was killed
// answers the Batches API with 503, Retry-After and OpenAI's error object within that time,
// not after waiting for Redis; once Redis is back (empty), the API answers again.
func TestBinaryBatchRedisDown(t *testing.T) {
	rdb := redistest.Start(t)
	llm := openaitest.Start(t, "vllm", "m1")
	cfg := writeConfig(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: vllm, url: %q, type: vllm, check_interval: 100ms}
redis: {addr: %q}
batch:
  dir: %q
  redis_timeout: 500ms
`, llm.URL, rdb.Addr, t.TempDir()))
	gw := startBinary(t, nil, "-config", cfg)
	id := createBatch(t, gw, batchtest.Upload(t, "http://"+gw, "", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m1","messages":[]}}`+"\n"))
	waitBatch(t, gw, id, 20*time.Second, func(b e2eBatch) bool { return b.Status == "completed" })

	rdb.Kill()
	client := &http.Client{Timeout: 15 * time.Second}
	for _, path := range []string{"/v1/batches", "/v1/batches/" + id} {
		start := time.Now()
		res, err := client.Get("http://" + gw + path)
		require.NoError(t, err, path)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Less(t, time.Since(start), 10*time.Second, path)
		require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, "%s: %s", path, body)
		require.NotEmpty(t, res.Header.Get("Retry-After"), path)
		var er struct {
			Error struct{ Type, Code string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &er), string(body))
		require.Equal(t, "server_error", er.Error.Type)
		require.Equal(t, "state_unavailable", er.Error.Code)
	}

	rdb.Restart()
	res, err := client.Get("http://" + gw + "/v1/batches")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
}
