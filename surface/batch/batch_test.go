package batch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/bus/bustest"
	"github.com/infergate/infergate/surface/batch"
	oai "github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The official SDK's files and batches calls, end to end: upload, create, poll, list, download
// the output, delete.
func TestSDKFilesAndBatches(t *testing.T) {
	e := startEnv(t, envOptions{})
	c := e.sdk()
	ctx := context.Background()

	f, err := c.Files.New(ctx, oai.FileNewParams{File: oai.File(strings.NewReader(chatLines(50, "m1")), "in.jsonl", "application/jsonl"),
		Purpose: oai.FilePurposeBatch})
	require.NoError(t, err)
	require.Equal(t, "in.jsonl", f.Filename)
	require.EqualValues(t, len(chatLines(50, "m1")), f.Bytes)
	got, err := c.Files.Get(ctx, f.ID)
	require.NoError(t, err)
	require.Equal(t, f.ID, got.ID)

	b, err := c.Batches.New(ctx, oai.BatchNewParams{InputFileID: f.ID, Endpoint: oai.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: oai.BatchNewParamsCompletionWindow24h, Metadata: map[string]string{"team": "search"}})
	require.NoError(t, err)
	require.Equal(t, oai.BatchStatusValidating, b.Status)
	require.Equal(t, "search", b.Metadata["team"])

	deadline := time.Now().Add(20 * time.Second)
	for b.Status != oai.BatchStatusCompleted {
		require.True(t, time.Now().Before(deadline), "batch still %s", b.Status)
		time.Sleep(20 * time.Millisecond)
		b, err = c.Batches.Get(ctx, b.ID)
		require.NoError(t, err)
	}
	require.EqualValues(t, 50, b.RequestCounts.Total)
	require.EqualValues(t, 50, b.RequestCounts.Completed)
	require.EqualValues(t, 0, b.RequestCounts.Failed)
	require.NotZero(t, b.CompletedAt)
	require.NotZero(t, b.InProgressAt)
	require.Empty(t, b.ErrorFileID, "no line failed")

	res, err := c.Files.Content(ctx, b.OutputFileID)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	lines := bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n"))
	require.Len(t, lines, 50)
	seen := map[string]bool{}
	for _, l := range lines {
		var o outputLine
		require.NoError(t, json.Unmarshal(l, &o))
		require.False(t, seen[o.CustomID], "custom_id %s twice", o.CustomID)
		seen[o.CustomID] = true
		require.Nil(t, o.Error)
		require.Equal(t, 200, o.Response.StatusCode)
		require.True(t, strings.HasPrefix(o.ID, "batch_req_"), o.ID)
		var cc oai.ChatCompletion
		require.NoError(t, json.Unmarshal(o.Response.Body, &cc))
		require.Equal(t, "Hello from vllm-a", cc.Choices[0].Message.Content)
	}
	require.EqualValues(t, 50, e.up.Requests(), "one upstream request per line")

	page, err := c.Batches.List(ctx, oai.BatchListParams{})
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	require.Equal(t, b.ID, page.Data[0].ID)

	out, err := c.Files.Get(ctx, b.OutputFileID)
	require.NoError(t, err)
	require.Equal(t, "batch_output", string(out.Purpose))
	del, err := c.Files.Delete(ctx, f.ID)
	require.NoError(t, err)
	require.True(t, del.Deleted)
	_, err = c.Files.Get(ctx, f.ID)
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.StatusCode)
}

// Batches list newest first, a page at a time with the after cursor.
func TestListBatchesPagination(t *testing.T) {
	e := startEnv(t, envOptions{})
	file := e.upload(t, chatLines(1, "m1"))
	var ids []string
	for range 5 {
		ids = append(ids, e.create(t, file, "24h"))
	}
	type page struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
		HasMore bool    `json:"has_more"`
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		var p page
		require.Equal(t, http.StatusOK, e.do(t, http.MethodGet, "/v1/batches?limit=2&after="+after, "", &p))
		for _, d := range p.Data {
			got = append(got, d.ID)
		}
		if !p.HasMore {
			break
		}
		after = *p.LastID
	}
	require.Equal(t, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, got)
	require.Equal(t, http.StatusBadRequest, e.do(t, http.MethodGet, "/v1/batches?limit=0", "", nil))
}

// A file with any bad line fails validation as a whole, with line-numbered errors, and nothing
// runs.
func TestValidationFails(t *testing.T) {
	good := func(id string) string {
		return `{"custom_id":"` + id + `","method":"POST","url":"/v1/chat/completions","body":{"model":"m1","messages":[]}}`
	}
	cases := []struct {
		name, input string
		code        string
		line        int
		maxLines    int
		maxLineSize int
	}{
		{"malformed JSON", good("a") + "\n{not json\n", "invalid_json_line", 2, 0, 0},
		{"duplicate custom_id", good("a") + "\n" + good("b") + "\n" + good("a") + "\n", "duplicate_custom_id", 3, 0, 0},
		{"wrong url", strings.Replace(good("a"), "/v1/chat/completions", "/v1/embeddings", 1), "invalid_url", 1, 0, 0},
		{"mixed models", good("a") + "\n" + strings.Replace(good("b"), `"m1"`, `"m2"`, 1), "mismatched_model", 2, 0, 0},
		{"no model", strings.Replace(good("a"), `"model":"m1",`, "", 1), "missing_required_parameter", 1, 0, 0},
		{"no custom_id", strings.Replace(good("a"), `"custom_id":"a",`, "", 1), "missing_required_parameter", 1, 0, 0},
		{"GET", strings.Replace(good("a"), `"POST"`, `"GET"`, 1), "invalid_value", 1, 0, 0},
		{"streaming", strings.Replace(good("a"), `"messages":[]`, `"messages":[],"stream":true`, 1), "invalid_value", 1, 0, 0},
		{"body not an object", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":[1]}`, "invalid_value", 1, 0, 0},
		{"too many lines", good("a") + "\n" + good("b") + "\n" + good("c") + "\n", "too_many_requests", 3, 2, 0},
		{"empty", "\n\n", "empty_file", 0, 0, 0},
		{"line too long", good("a") + "\n" + good(strings.Repeat("b", 200)) + "\n", "line_too_long", 2, 0, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnv(t, envOptions{service: func(o *batch.Options) { o.MaxLines, o.MaxLineBytes = tc.maxLines, tc.maxLineSize }})
			id := e.create(t, e.upload(t, tc.input), "24h")
			b := e.waitStatus(t, id, 10*time.Second, "failed", "in_progress", "completed")
			require.Equal(t, "failed", b.Status)
			require.NotNil(t, b.Errors)
			require.NotEmpty(t, b.Errors.Data)
			got := b.Errors.Data[0]
			require.Equal(t, tc.code, got.Code, got.Message)
			if tc.line > 0 {
				require.NotNil(t, got.Line)
				require.Equal(t, tc.line, *got.Line, got.Message)
			}
			require.Nil(t, b.OutputFileID)
			require.Zero(t, e.up.Requests(), "nothing runs when validation fails")
		})
	}
}

// Creating a batch checks its parameters and its file before anything is stored.
func TestCreateBatchErrors(t *testing.T) {
	e := startEnv(t, envOptions{})
	file := e.upload(t, chatLines(1, "m1"))
	cases := []struct {
		body   string
		status int
		param  string
	}{
		{`{"endpoint":"/v1/chat/completions","completion_window":"24h"}`, 400, "input_file_id"},
		{`{"input_file_id":"` + file + `","endpoint":"/v1/images","completion_window":"24h"}`, 400, "endpoint"},
		{`{"input_file_id":"` + file + `","endpoint":"/v1/chat/completions","completion_window":"forever"}`, 400, "completion_window"},
		{`{"input_file_id":"file-nope","endpoint":"/v1/chat/completions","completion_window":"24h"}`, 404, "input_file_id"},
		{`{"input_file_id":`, 400, ""},
	}
	for _, tc := range cases {
		var er struct {
			Error struct {
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Message string  `json:"message"`
			} `json:"error"`
		}
		require.Equal(t, tc.status, e.do(t, http.MethodPost, "/v1/batches", tc.body, &er), tc.body)
		require.Equal(t, "invalid_request_error", er.Error.Type)
		require.NotEmpty(t, er.Error.Message)
		if tc.param != "" {
			require.NotNil(t, er.Error.Param, tc.body)
			require.Equal(t, tc.param, *er.Error.Param)
		}
	}
	var list struct{ Data []any }
	e.do(t, http.MethodGet, "/v1/batches", "", &list)
	require.Empty(t, list.Data, "no refused batch was stored")
	require.Equal(t, http.StatusNotFound, e.do(t, http.MethodGet, "/v1/batches/batch_nope", "", nil))
	require.Equal(t, http.StatusNotFound, e.do(t, http.MethodPost, "/v1/batches/batch_nope/cancel", "", nil))
}

// Upload errors: not multipart, no file, a wrong purpose, a file over the limit (nothing kept).
func TestUploadErrors(t *testing.T) {
	e := startEnv(t, envOptions{service: func(o *batch.Options) { o.MaxFileBytes = 1000 }})
	require.Equal(t, http.StatusBadRequest, e.do(t, http.MethodPost, "/v1/files", `{"purpose":"batch"}`, nil))

	post := func(purpose, content string) int {
		var body bytes.Buffer
		fmt.Fprintf(&body, "--X\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n%s\r\n", purpose)
		if content != "" {
			fmt.Fprintf(&body, "--X\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n%s\r\n", content)
		}
		body.WriteString("--X--\r\n")
		res, err := http.Post(e.URL+"/v1/files", "multipart/form-data; boundary=X", &body)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusBadRequest, post("batch", ""))
	require.Equal(t, http.StatusBadRequest, post("fine-tune", "x"))
	require.Equal(t, http.StatusBadRequest, post("batch", strings.Repeat("x", 1001)))
	require.Equal(t, http.StatusOK, post("batch", strings.Repeat("x", 1000)))
	var list struct {
		Data []struct {
			Bytes int64 `json:"bytes"`
		} `json:"data"`
	}
	e.do(t, http.MethodGet, "/v1/files", "", &list)
	require.Len(t, list.Data, 1, "only the accepted upload is kept")
	require.EqualValues(t, 1000, list.Data[0].Bytes)
}

// Lines the upstream refuses go to the error file with the upstream's status and body; lines
// that keep failing with a retryable status are retried, then go to the error file and the
// dead-letter topic; the rest go to the output file.
func TestErrorFileRetriesAndDeadLetter(t *testing.T) {
	e := startEnv(t, envOptions{worker: func(o *batch.WorkerOptions) { o.Attempts = 3 }})
	dead, err := e.bus.Subscribe(t.Context(), batch.DefaultTopics().DeadLetter, "test")
	require.NoError(t, err)
	input := chatLines(20, "m1")
	input = strings.Replace(input, `"line 3"`, `"line 3 reject-me"`, 1)
	input = strings.Replace(input, `"line 7"`, `"line 7 overload-me"`, 1)
	e.up.FailBodiesContaining("reject-me", http.StatusBadRequest)
	e.up.FailBodiesContaining("overload-me", http.StatusServiceUnavailable)
	id := e.create(t, e.upload(t, input), "24h")
	b := e.waitStatus(t, id, 20*time.Second, "completed")
	require.EqualValues(t, 20, b.RequestCounts.Total)
	require.EqualValues(t, 18, b.RequestCounts.Completed)
	require.EqualValues(t, 2, b.RequestCounts.Failed)

	out, errs := e.content(t, b.OutputFileID), e.content(t, b.ErrorFileID)
	require.Len(t, out, 18)
	require.Len(t, errs, 2)
	counts := byCustomID(out, errs)
	require.Len(t, counts, 20)
	for id, n := range counts {
		require.Equal(t, 1, n, id)
	}
	byID := map[string]outputLine{}
	for _, l := range errs {
		byID[l.CustomID] = l
	}
	require.Equal(t, 400, byID["req-3"].Response.StatusCode)
	require.Contains(t, string(byID["req-3"].Response.Body), "injected failure")
	require.Equal(t, 503, byID["req-7"].Response.StatusCode, "the last answer after the retries")

	// 1 try for each good line and the 400, 3 for the 503.
	require.EqualValues(t, 18+1+3, e.up.Requests())

	select {
	case m := <-dead:
		m.Ack()
		var d struct {
			Batch    string          `json:"batch"`
			CustomID string          `json:"custom_id"`
			Attempts int             `json:"attempts"`
			Body     json.RawMessage `json:"body"`
			Error    string          `json:"error"`
		}
		require.NoError(t, json.Unmarshal(m.Payload, &d))
		require.Equal(t, id, d.Batch)
		require.Equal(t, "req-7", d.CustomID)
		require.Equal(t, 3, d.Attempts)
		require.Contains(t, string(d.Body), "overload-me")
		require.Contains(t, d.Error, "503")
	case <-time.After(5 * time.Second):
		t.Fatal("no dead letter")
	}
	select {
	case m := <-dead:
		t.Fatalf("a second dead letter: %s", m.Payload)
	case <-time.After(100 * time.Millisecond):
	}
}

// A line waiting to be tried again does not hold its chunk: the chunk's other lines' results
// are in before the line's second try (a chunk acked only when its slowest line is done would
// hold its Kafka partition, and every chunk behind it, for the whole backoff).
func TestRetryDoesNotHoldItsChunk(t *testing.T) {
	e := startEnv(t, envOptions{worker: func(o *batch.WorkerOptions) { o.Attempts = 3; o.RetryBackoff = time.Second }})
	input := strings.Replace(chatLines(16, "m1"), `"line 5"`, `"line 5 overload-me"`, 1) // one chunk
	e.up.FailBodiesContaining("overload-me", http.StatusServiceUnavailable)
	id := e.create(t, e.upload(t, input), "24h")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var b batchView
		require.Equal(t, http.StatusOK, e.do(t, http.MethodGet, "/v1/batches/"+id, "", &b))
		if b.RequestCounts.Completed == 15 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the good lines' results did not come in: %+v", b.RequestCounts)
		time.Sleep(5 * time.Millisecond)
	}
	require.EqualValues(t, 16, e.up.Requests(), "the failing line was tried again before its chunk's results were in")
	b := e.waitStatus(t, id, 20*time.Second, "completed")
	require.EqualValues(t, 15, b.RequestCounts.Completed)
	require.EqualValues(t, 1, b.RequestCounts.Failed)
	require.EqualValues(t, 15+3, e.up.Requests(), "three tries of the failing line")
}

// An upstream that fails for a while: lines are retried with backoff and all complete once it
// recovers.
func TestRetriesRideOutAnOutage(t *testing.T) {
	e := startEnv(t, envOptions{worker: func(o *batch.WorkerOptions) { o.Attempts = 10; o.RetryBackoff = 50 * time.Millisecond }})
	e.up.FailWith(http.StatusServiceUnavailable)
	id := e.create(t, e.upload(t, chatLines(10, "m1")), "24h")
	e.waitStatus(t, id, 10*time.Second, "in_progress")
	deadline := time.Now().Add(10 * time.Second)
	for e.up.Requests() < 20 { // every line tried at least twice
		require.True(t, time.Now().Before(deadline), "lines are not retried")
		time.Sleep(10 * time.Millisecond)
	}
	e.up.FailWith(0)
	b := e.waitStatus(t, id, 20*time.Second, "completed")
	require.EqualValues(t, 10, b.RequestCounts.Completed)
	require.EqualValues(t, 0, b.RequestCounts.Failed)
	require.Nil(t, b.ErrorFileID)
}

// Cancelling mid-batch: cancelling, then cancelled; the lines that completed are kept in the
// output file, the requests in flight are cancelled upstream, and no further request is sent.
func TestCancelMidBatch(t *testing.T) {
	e := startEnv(t, envOptions{worker: func(o *batch.WorkerOptions) { o.Concurrency = 4 },
		service: func(o *batch.Options) { o.ChunkLines = 1 }})
	e.up.SetLatency(50 * time.Millisecond)
	id := e.create(t, e.upload(t, chatLines(40, "m1")), "24h")
	deadline := time.Now().Add(10 * time.Second)
	for e.waitStatus(t, id, 10*time.Second, "in_progress", "completed").RequestCounts.Completed < 2 {
		require.True(t, time.Now().Before(deadline))
		time.Sleep(2 * time.Millisecond)
	}
	// Hold every later request, a few lines having completed; wait until one request is held at
	// the gate (it can only end by being cancelled).
	release := e.up.Hold()
	defer release()
	held := e.up.Requests()
	deadline = time.Now().Add(10 * time.Second)
	for e.up.Requests() <= held {
		require.True(t, time.Now().Before(deadline), "no request reached the held upstream")
		time.Sleep(5 * time.Millisecond)
	}
	done := e.waitStatus(t, id, time.Second, "in_progress").RequestCounts.Completed

	var b batchView
	require.Equal(t, http.StatusOK, e.do(t, http.MethodPost, "/v1/batches/"+id+"/cancel", "", &b))
	require.Equal(t, "cancelling", b.Status)
	b = e.waitStatus(t, id, 10*time.Second, "cancelled")
	require.NotNil(t, b.CancelledAt)
	sent := e.up.Requests()
	require.Less(t, sent, int64(40), "not every line ran")
	// The held requests can only end by being cancelled: the gate is still closed.
	deadline = time.Now().Add(5 * time.Second)
	for e.up.InFlight() > 0 {
		require.True(t, time.Now().Before(deadline), "the requests in flight were not cancelled upstream")
		time.Sleep(5 * time.Millisecond)
	}
	require.Positive(t, e.up.Canceled())
	out := e.content(t, b.OutputFileID)
	require.Len(t, out, int(b.RequestCounts.Completed))
	require.GreaterOrEqual(t, b.RequestCounts.Completed, done)
	require.Positive(t, b.RequestCounts.Completed, "the partial output is kept")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, sent, e.up.Requests(), "no request after the batch was cancelled")

	// A running batch's input file cannot be deleted; once it finished, it can.
	id3 := e.create(t, e.upload(t, chatLines(4, "m1")), "24h")
	input := e.inputOf(t, id3)
	require.Equal(t, http.StatusBadRequest, e.do(t, http.MethodDelete, "/v1/files/"+input, "", nil))
	require.Equal(t, http.StatusOK, e.do(t, http.MethodPost, "/v1/batches/"+id3+"/cancel", "", nil))
	e.waitStatus(t, id3, 10*time.Second, "cancelled")
	require.Equal(t, http.StatusOK, e.do(t, http.MethodDelete, "/v1/files/"+input, "", nil))

	// A cancelled batch cannot be cancelled into anything else; a completed one refuses.
	require.Equal(t, http.StatusOK, e.do(t, http.MethodPost, "/v1/batches/"+id+"/cancel", "", nil))
	release()
	id2 := e.create(t, e.upload(t, chatLines(1, "m1")), "24h")
	e.waitStatus(t, id2, 10*time.Second, "completed")
	require.Equal(t, http.StatusBadRequest, e.do(t, http.MethodPost, "/v1/batches/"+id2+"/cancel", "", nil))
}

// A batch whose completion window ends: expired, with the completed lines in the output file and
// every other line in the error file as batch_expired.
func TestExpiry(t *testing.T) {
	e := startEnv(t, envOptions{worker: func(o *batch.WorkerOptions) { o.Concurrency = 2 }})
	e.up.SetLatency(300 * time.Millisecond)
	id := e.create(t, e.upload(t, chatLines(30, "m1")), "1s")
	b := e.waitStatus(t, id, 15*time.Second, "expired")
	require.NotNil(t, b.ExpiredAt)
	require.EqualValues(t, 30, b.RequestCounts.Total)
	out, errs := e.content(t, b.OutputFileID), e.content(t, b.ErrorFileID)
	require.NotEmpty(t, out, "lines done before the window ended are kept")
	require.NotEmpty(t, errs)
	require.Len(t, byCustomID(out, errs), 30, "every line in one of the files")
	require.Equal(t, 30, len(out)+len(errs))
	for _, l := range errs {
		require.NotNil(t, l.Error, l.CustomID)
		require.Equal(t, "batch_expired", l.Error.Code)
	}
	require.EqualValues(t, len(errs), b.RequestCounts.Failed)
}

// Progress moves while a batch runs and ends at 100%.
func TestProgress(t *testing.T) {
	e := startEnv(t, envOptions{worker: func(o *batch.WorkerOptions) { o.Concurrency = 1 },
		service: func(o *batch.Options) { o.ChunkLines = 2 }})
	e.up.SetLatency(20 * time.Millisecond)
	id := e.create(t, e.upload(t, chatLines(20, "m1")), "24h")
	var seen []int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		var b batchView
		e.do(t, http.MethodGet, "/v1/batches/"+id, "", &b)
		if len(seen) == 0 || seen[len(seen)-1] != b.Progress.Done {
			seen = append(seen, b.Progress.Done)
		}
		if b.Status == "completed" {
			assert.InDelta(t, 100, b.Progress.Percent, 0.001)
			break
		}
		require.True(t, time.Now().Before(deadline))
		time.Sleep(10 * time.Millisecond)
	}
	require.Greater(t, len(seen), 3, "counts move while the batch runs: %v", seen)
}

// Online requests during a large batch keep their share of the gateway: with load shedding on,
// batch work never holds more than its share of the slots (the rest of it waits, without failing),
// so online requests are admitted at once and all succeed, and the batch still completes.
func TestOnlineTrafficKeepsPriority(t *testing.T) {
	sh := guard.NewShedder(guard.ShedderConfig{MaxInFlight: 8, BatchShare: 0.5, MaxQueue: 10000, QueueTimeout: 100 * time.Millisecond})
	g := guard.New(guard.Options{Shedder: sh, Logger: quiet()})
	e := startEnv(t, envOptions{admit: g.OpenAI(), worker: func(o *batch.WorkerOptions) { o.Concurrency = 32; o.Attempts = 1 }})
	e.up.SetLatency(10 * time.Millisecond)
	id := e.create(t, e.upload(t, chatLines(300, "m1")), "24h")

	var maxBatch, maxInFlight atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			st := sh.Stats()
			if int64(st.Batch) > maxBatch.Load() {
				maxBatch.Store(int64(st.Batch))
			}
			if int64(st.InFlight) > maxInFlight.Load() {
				maxInFlight.Store(int64(st.InFlight))
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	require.Eventually(t, func() bool { return sh.Stats().Batch == 4 }, 10*time.Second, time.Millisecond, "the batch fills its share")
	c := e.sdk()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 10 {
		for range 4 {
			wg.Go(func() {
				_, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "m1",
					Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("online")}})
				if err != nil {
					failed.Add(1)
					t.Log(err)
				}
			})
		}
		wg.Wait()
	}
	require.Zero(t, failed.Load(), "every online request is admitted")
	b := e.waitStatus(t, id, 60*time.Second, "completed")
	close(stop)
	<-sampled
	require.EqualValues(t, 300, b.RequestCounts.Completed, "batch lines wait for slots, they do not fail (one attempt allowed)")
	require.EqualValues(t, 4, maxBatch.Load(), "batch work holds its share, never more")
	require.LessOrEqual(t, maxInFlight.Load(), int64(8))
}

// A chunk delivered again after its batch finished (at-least-once delivery) runs nothing.
func TestRedeliveredChunkOfAFinishedBatchRunsNothing(t *testing.T) {
	acked := &ackedBus{Bus: bus.NewGoChannel(quiet()), acked: make(chan string, 1000)}
	e := startEnv(t, envOptions{bus: acked})
	id := e.create(t, e.upload(t, chatLines(3, "m1")), "24h")
	e.waitStatus(t, id, 10*time.Second, "completed")
	require.EqualValues(t, 3, e.up.Requests())
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{"batch":"`+id+`","endpoint":"/v1/chat/completions","model":"m1","lines":[`+
		`{"custom_id":"req-0","body":{"model":"m1","messages":[]}},{"custom_id":"req-1","body":{"model":"m1","messages":[]}}]}`))
	require.NoError(t, e.bus.Publish(batch.DefaultTopics().Requests, msg))
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case u := <-acked.acked:
			done = u == msg.UUID
		case <-timeout:
			t.Fatal("the stale chunk was not acked")
		}
	}
	require.EqualValues(t, 3, e.up.Requests(), "the stale chunk made no request")
	b := e.waitStatus(t, id, time.Second, "completed")
	require.EqualValues(t, 3, b.RequestCounts.Completed)
}

// A 10,000-line batch, some of whose lines the upstream refuses, on each bus and state store:
// every custom_id ends up exactly once in the output or the error file, and the counts agree.
func TestTenThousandLinesExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 requests")
	}
	stacks := map[string]func(t *testing.T) envOptions{
		"gochannel+memory": func(t *testing.T) envOptions { return envOptions{} },
		"kafka+redis": func(t *testing.T) envOptions {
			k := bustest.StartKafka(t)
			kb, err := bus.NewKafka(bus.KafkaConfig{Brokers: k.Addrs(), Partitions: 8}, quiet())
			require.NoError(t, err)
			r := redistest.Start(t)
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr}, DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(rc.Close)
			return envOptions{bus: kb, state: batchstate.NewRedis(rc, batchstate.RedisOptions{Prefix: "t"})}
		},
	}
	for name, stack := range stacks {
		t.Run(name, func(t *testing.T) {
			eo := stack(t)
			eo.service = func(o *batch.Options) { o.ChunkLines = 64 }
			e := startEnv(t, eo)
			const n = 10_000
			input := chatLines(n, "m1")
			for i := 0; i < n; i += 97 {
				input = strings.Replace(input, fmt.Sprintf(`"line %d"`, i), fmt.Sprintf(`"line %d refuse"`, i), 1)
			}
			// Lines that keep failing with a 503 go through the retries topic until their tries
			// run out.
			const flaky = 10
			for i := 50; i < n; i += n / flaky {
				input = strings.Replace(input, fmt.Sprintf(`"line %d"`, i), fmt.Sprintf(`"line %d flaky"`, i), 1)
			}
			e.up.FailBodiesContaining("refuse", http.StatusBadRequest)
			e.up.FailBodiesContaining("flaky", http.StatusServiceUnavailable)
			id := e.create(t, e.upload(t, input), "24h")
			b := e.waitStatus(t, id, 120*time.Second, "completed")
			failed := (n+96)/97 + flaky
			require.EqualValues(t, n, b.RequestCounts.Total)
			require.EqualValues(t, failed, b.RequestCounts.Failed)
			require.EqualValues(t, n-failed, b.RequestCounts.Completed)
			out, errs := e.content(t, b.OutputFileID), e.content(t, b.ErrorFileID)
			require.Len(t, out, n-failed)
			require.Len(t, errs, failed)
			counts := byCustomID(out, errs)
			require.Len(t, counts, n)
			for cid, c := range counts {
				require.Equal(t, 1, c, cid)
			}
			for _, l := range out {
				require.Equal(t, 200, l.Response.StatusCode)
			}
			statuses := map[int]int{}
			for _, l := range errs {
				statuses[l.Response.StatusCode]++
			}
			require.Equal(t, map[int]int{400: failed - flaky, 503: flaky}, statuses)
			require.EqualValues(t, n+3*flaky, e.up.Requests(), "one upstream request per line, four per flaky line: none ran twice")
		})
	}
}

// With API keys on, a key sees only its own files and batches (admin keys see all), a batch runs
// as the key that created it, and a model outside the key's allow-list fails validation.
func TestOwners(t *testing.T) {
	keys, err := guard.NewStaticKeys([]guard.KeyConfig{
		{Name: "alice", SHA256: guard.HashKey("ka")},
		{Name: "bob", SHA256: guard.HashKey("kb")},
		{Name: "carol", SHA256: guard.HashKey("kc"), Models: []string{"m2"}},
		{Name: "root", SHA256: guard.HashKey("kr"), Admin: true},
	})
	require.NoError(t, err)
	auth := guard.NewAuth(keys, quiet())
	var seen sync.Map // key names the upstream's requests ran as
	admit := func(ctx context.Context, r *pipeline.Request) (pipeline.Admitted, error) {
		if p := guard.PrincipalFrom(ctx); p != nil {
			seen.Store(p.Name, true)
		}
		return pipeline.Admitted{}, nil
	}
	e := startEnv(t, envOptions{middleware: []func(http.Handler) http.Handler{auth.HTTP}, admit: admit})

	file := e.uploadAs(t, "ka", chatLines(3, "m1"))
	var b batchView
	require.Equal(t, http.StatusOK, e.doAs(t, "ka", http.MethodPost, "/v1/batches",
		`{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`, &b))
	id := b.ID
	deadline := time.Now().Add(10 * time.Second)
	for b.Status != "completed" {
		require.True(t, time.Now().Before(deadline), b.Status)
		time.Sleep(20 * time.Millisecond)
		require.Equal(t, http.StatusOK, e.doAs(t, "ka", http.MethodGet, "/v1/batches/"+id, "", &b))
	}
	_, ranAsAlice := seen.Load("alice")
	require.True(t, ranAsAlice, "the lines ran as the key that created the batch")

	// Bob sees none of it.
	for _, path := range []string{"/v1/batches/" + id, "/v1/files/" + file, "/v1/files/" + file + "/content", "/v1/files/" + *b.OutputFileID} {
		require.Equal(t, http.StatusNotFound, e.doAs(t, "kb", http.MethodGet, path, "", nil), path)
	}
	require.Equal(t, http.StatusNotFound, e.doAs(t, "kb", http.MethodPost, "/v1/batches/"+id+"/cancel", "", nil))
	require.Equal(t, http.StatusNotFound, e.doAs(t, "kb", http.MethodDelete, "/v1/files/"+file, "", nil))
	require.Equal(t, http.StatusNotFound, e.doAs(t, "kb", http.MethodPost, "/v1/batches",
		`{"input_file_id":"`+file+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`, nil), "nor can use her file")
	var list struct{ Data []struct{ ID string } }
	e.doAs(t, "kb", http.MethodGet, "/v1/batches", "", &list)
	require.Empty(t, list.Data)
	e.doAs(t, "kb", http.MethodGet, "/v1/files", "", &list)
	require.Empty(t, list.Data)
	// Alice and the admin do.
	e.doAs(t, "ka", http.MethodGet, "/v1/files", "", &list)
	require.Len(t, list.Data, 2, "the input and the output file")
	require.Equal(t, http.StatusOK, e.doAs(t, "kr", http.MethodGet, "/v1/files/"+*b.OutputFileID+"/content", "", nil))
	e.doAs(t, "kr", http.MethodGet, "/v1/batches", "", &list)
	require.Len(t, list.Data, 1)

	// Carol may use m2 only.
	cfile := e.uploadAs(t, "kc", chatLines(2, "m1"))
	require.Equal(t, http.StatusOK, e.doAs(t, "kc", http.MethodPost, "/v1/batches",
		`{"input_file_id":"`+cfile+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`, &b))
	b = e.waitStatusAs(t, "kc", b.ID, 10*time.Second, "failed")
	require.Equal(t, "model_not_allowed", b.Errors.Data[0].Code)
	require.EqualValues(t, 3, e.up.Requests(), "nothing of carol's ran")
}

// A rate-limit refusal that can never pass (no Retry-After: more tokens than a whole budget)
// fails the line at once instead of waiting; one that can pass later makes the line wait.
func TestRateLimitRefusals(t *testing.T) {
	var calls atomic.Int64
	admit := func(ctx context.Context, r *pipeline.Request) (pipeline.Admitted, error) {
		n := calls.Add(1)
		if bytes.Contains(r.Body(), []byte("too-big")) {
			return pipeline.Admitted{}, &pipeline.Error{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "over the whole budget"}
		}
		if n <= 3 { // the first tries are told to come back shortly
			return pipeline.Admitted{}, &pipeline.Error{Status: 429, Type: "requests", Code: "rate_limit_exceeded", Message: "slow down",
				Header: http.Header{"Retry-After": []string{"1"}}}
		}
		return pipeline.Admitted{}, nil
	}
	e := startEnv(t, envOptions{admit: admit, worker: func(o *batch.WorkerOptions) { o.Attempts = 1; o.Concurrency = 1 }})
	input := strings.Replace(chatLines(2, "m1"), `"line 1"`, `"line 1 too-big"`, 1)
	b := e.waitStatus(t, e.create(t, e.upload(t, input), "24h"), 20*time.Second, "completed")
	require.EqualValues(t, 1, b.RequestCounts.Completed, "the waiting line completed with its one attempt")
	require.EqualValues(t, 1, b.RequestCounts.Failed)
	errs := e.content(t, b.ErrorFileID)
	require.Equal(t, "req-1", errs[0].CustomID)
	require.Equal(t, 429, errs[0].Response.StatusCode)
	require.Less(t, calls.Load(), int64(10), "the line that cannot pass is not retried in a loop")
}

// A line the gateway holds back lets its slot go while it waits: the model's other lines use it
// (with slots shared through Redis, so do other workers).
func TestWaitingLineLetsItsSlotGo(t *testing.T) {
	var holding atomic.Bool
	holding.Store(true)
	admit := func(ctx context.Context, r *pipeline.Request) (pipeline.Admitted, error) {
		if holding.Load() && bytes.Contains(r.Body(), []byte("hold-me")) {
			return pipeline.Admitted{}, &pipeline.Error{Status: 429, Type: "requests", Code: "overloaded", Message: "busy",
				Header: http.Header{"Retry-After": []string{"1"}}}
		}
		return pipeline.Admitted{}, nil
	}
	e := startEnv(t, envOptions{admit: admit, worker: func(o *batch.WorkerOptions) { o.Concurrency = 1 }})
	input := strings.Replace(chatLines(4, "m1"), `"line 0"`, `"line 0 hold-me"`, 1) // first in the chunk
	id := e.create(t, e.upload(t, input), "24h")
	deadline := time.Now().Add(10 * time.Second)
	for e.up.Requests() < 3 { // the chunk's results go out together, once the waiting line is done
		require.True(t, time.Now().Before(deadline), "the other lines did not run while one waited: %d requests", e.up.Requests())
		time.Sleep(10 * time.Millisecond)
	}
	holding.Store(false)
	b := e.waitStatus(t, id, 10*time.Second, "completed")
	require.EqualValues(t, 4, b.RequestCounts.Completed)
	require.EqualValues(t, 1, e.up.PeakInFlight(), "one slot")
}

// An upstream outage (no healthy endpoint) is waited out, attempts unspent: the lines complete
// once the upstream is back.
func TestOutageIsWaitedOut(t *testing.T) {
	e := startEnv(t, envOptions{worker: func(o *batch.WorkerOptions) { o.Attempts = 1; o.RetryBackoff = 50 * time.Millisecond }})
	e.up.SetHealthy(false)
	require.Eventually(t, func() bool {
		_, err := e.proxy.Call(context.Background(), "/v1/chat/completions", []byte(`{"model":"m1","messages":[]}`))
		var oe *pipeline.Error
		return errors.As(err, &oe) && oe.Code == "no_healthy_upstream"
	}, 5*time.Second, 10*time.Millisecond)
	id := e.create(t, e.upload(t, chatLines(5, "m1")), "24h")
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, "in_progress", e.waitStatus(t, id, time.Second, "in_progress").Status, "still waiting")
	e.up.SetHealthy(true)
	b := e.waitStatus(t, id, 20*time.Second, "completed")
	require.EqualValues(t, 5, b.RequestCounts.Completed)
}

// On a bus that lost chunks (the in-process bus of a replica that restarted, under state in
// Redis), a batch that makes no progress has its lines without a result published again; lines
// that have one do not run twice.
func TestStalledBatchIsRedispatched(t *testing.T) {
	lossy := &lossyBus{Bus: bus.NewGoChannel(quiet())}
	lossy.drop.Store(2) // the first two chunks vanish
	m := batch.NewMetrics()
	e := startEnv(t, envOptions{bus: lossy, service: func(o *batch.Options) {
		o.ChunkLines = 5
		o.RedispatchAfter = 300 * time.Millisecond
		o.Metrics = m
	}})
	id := e.create(t, e.upload(t, chatLines(20, "m1")), "24h")
	b := e.waitStatus(t, id, 20*time.Second, "completed")
	require.EqualValues(t, 20, b.RequestCounts.Completed)
	require.Len(t, byCustomID(e.content(t, b.OutputFileID)), 20)
	require.EqualValues(t, 20, e.up.Requests(), "only the lost lines ran again")
	require.EqualValues(t, 20+10, metricValue(t, m, "infergate_batch_lines_queued_total"), "the 10 lost lines were published again, no others")
}

// metricSeries gathers the series of m's metric name (none: a vector nothing was counted in).
func metricSeries(t *testing.T, m *batch.Metrics, name string) []*dto.Metric {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// metricValue reads a counter or gauge without labels.
func metricValue(t *testing.T, m *batch.Metrics, name string) float64 {
	t.Helper()
	series := metricSeries(t, m, name)
	if len(series) == 0 {
		t.Fatalf("no metric %s", name)
	}
	if g := series[0].GetGauge(); g != nil {
		return g.GetValue()
	}
	return series[0].GetCounter().GetValue()
}

// Lines beyond batch.concurrency wait for a slot, and the gauge says so.
func TestSlotWaitingGauge(t *testing.T) {
	m := batch.NewMetrics()
	e := startEnv(t, envOptions{worker: func(o *batch.WorkerOptions) { o.Concurrency = 2; o.Metrics = m }})
	release := e.up.Hold()
	defer release()
	id := e.create(t, e.upload(t, chatLines(8, "m1")), "24h") // one chunk
	deadline := time.Now().Add(10 * time.Second)
	for e.up.InFlight() < 2 || metricValue(t, m, "infergate_batch_lines_waiting_for_slot") < 1 {
		require.True(t, time.Now().Before(deadline), "in flight %d, waiting %v", e.up.InFlight(),
			metricValue(t, m, "infergate_batch_lines_waiting_for_slot"))
		time.Sleep(5 * time.Millisecond)
	}
	require.EqualValues(t, 2, e.up.InFlight(), "two slots")
	require.EqualValues(t, 6, metricValue(t, m, "infergate_batch_lines_waiting_for_slot"), "the other six lines wait")
	release()
	e.waitStatus(t, id, 10*time.Second, "completed")
	require.Zero(t, metricValue(t, m, "infergate_batch_lines_waiting_for_slot"))
	require.EqualValues(t, 2, e.up.PeakInFlight())
}

// lossyBus loses the first drop messages published to the requests topic.
type lossyBus struct {
	bus.Bus
	drop atomic.Int64
}

func (b *lossyBus) Publish(topic string, msgs ...*message.Message) error {
	if topic == batch.DefaultTopics().Requests {
		kept := msgs[:0:0]
		for _, m := range msgs {
			if b.drop.Add(-1) < 0 {
				kept = append(kept, m)
			}
		}
		msgs = kept
	}
	return b.Bus.Publish(topic, msgs...)
}

// A worker that stops hands its lines in flight back (cancelled upstream, chunk not acked) and
// counts none of them as done: another worker runs them, and the batch completes once each.
func TestStoppedWorkerCountsNothing(t *testing.T) {
	e := startEnv(t, envOptions{noWorker: true})
	release := e.up.Hold()
	defer release()
	m := batch.NewMetrics()
	ctx, stop := context.WithCancel(t.Context())
	stopped := e.startWorker(t, ctx, func(o *batch.WorkerOptions) { o.Metrics = m })
	id := e.create(t, e.upload(t, chatLines(4, "m1")), "24h")
	deadline := time.Now().Add(10 * time.Second)
	for e.up.InFlight() < 4 {
		require.True(t, time.Now().Before(deadline), "the lines did not reach the upstream")
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-stopped
	for _, mm := range metricSeries(t, m, "infergate_batch_lines_done_total") {
		t.Errorf("a stopping worker counted %v lines as done (%v)", mm.GetCounter().GetValue(), mm.GetLabel())
	}
	release()
	e.startWorker(t, t.Context(), nil)
	b := e.waitStatus(t, id, 20*time.Second, "completed")
	require.EqualValues(t, 4, b.RequestCounts.Completed)
	require.Len(t, byCustomID(e.content(t, b.OutputFileID)), 4)
}
