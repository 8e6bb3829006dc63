package batch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/store/batchstate"
	"github.com/infergate/infergate/store/bus"
	"github.com/infergate/infergate/store/files"
	"github.com/infergate/infergate/surface/batch"
	"github.com/infergate/infergate/surface/batch/batchtest"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// env is a real gateway on a loopback port serving the OpenAI proxy and the batch API, with a
// batch worker, in front of a fake vLLM serving model "m1".
type env struct {
	URL   string
	up    *openaitest.Upstream
	proxy *openai.Proxy
	svc   *batch.Service
	state batchstate.Store
	files files.Store
	bus   bus.Bus
	opts  batch.Options
}

type envOptions struct {
	service func(*batch.Options)
	worker  func(*batch.WorkerOptions)
	admit   pipeline.Admission
	// noWorker starts no worker: the test starts its own.
	noWorker bool
	state    batchstate.Store
	bus      bus.Bus
	// middleware wraps the gateway's HTTP handler (API keys).
	middleware []func(http.Handler) http.Handler
	// filesDir is the file store's directory; default a temporary one.
	filesDir string
}

func startEnv(t testing.TB, eo envOptions) *env {
	t.Helper()
	up := openaitest.Start(t, "vllm-a", "m1")
	p, err := openai.New(openai.Options{Logger: quiet(), Stages: stagesOf(eo.admit), Endpoints: []upstream.Endpoint{{Name: up.Name,
		URL: up.URL, Type: upstream.TypeVLLM, CheckInterval: 20 * time.Millisecond, CheckTimeout: time.Second}}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	p.Start(ctx)
	dir := eo.filesDir
	if dir == "" {
		dir = t.TempDir()
	}
	fs, err := files.NewDir(dir)
	require.NoError(t, err)
	e := &env{up: up, proxy: p, files: fs, state: eo.state, bus: eo.bus}
	if e.state == nil {
		e.state = batchstate.NewMemory()
	}
	if e.bus == nil {
		e.bus = bus.NewGoChannel(quiet())
	}
	e.opts = batch.Options{Files: fs, State: e.state, Bus: e.bus, Logger: quiet(), SweepInterval: 50 * time.Millisecond,
		Grace: 200 * time.Millisecond, ChunkLines: 16}
	if eo.service != nil {
		eo.service(&e.opts)
	}
	e.svc, err = batch.New(e.opts)
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { defer close(done); _ = e.svc.Run(ctx) }()
	if !eo.noWorker {
		e.startWorker(t, ctx, eo.worker)
	}
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount, e.svc.Mount},
		HTTPMiddleware: eo.middleware})
	e.URL = srv.URL
	t.Cleanup(func() {
		cancel()
		e.svc.Close()
		<-done
		p.Close()
		_ = e.bus.Close()
	})
	return e
}

// startWorker runs a worker until ctx ends; the returned channel closes when it stopped.
func (e *env) startWorker(t testing.TB, ctx context.Context, adjust func(*batch.WorkerOptions)) <-chan struct{} {
	o := batch.WorkerOptions{Bus: e.bus, State: e.state, Caller: e.proxy, Logger: quiet(), RetryBackoff: 20 * time.Millisecond,
		StatusInterval: 50 * time.Millisecond}
	if adjust != nil {
		adjust(&o)
	}
	w := batch.NewWorker(o)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	return done
}

func (e *env) sdk() oai.Client {
	return oai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
}

// chatLines is a JSONL input of n chat requests for model, custom ids "req-0".."req-<n-1>".
func chatLines(n int, model string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"line %d"}]}}`+"\n", i, model, i)
	}
	return b.String()
}

// upload stores content as a batch input file through the HTTP API.
func (e *env) upload(t testing.TB, content string) string {
	t.Helper()
	return e.uploadAs(t, "", content)
}

// uploadAs is upload with an API key ("" for none).
func (e *env) uploadAs(t testing.TB, key, content string) string {
	t.Helper()
	return batchtest.Upload(t, e.URL, key, content)
}

type batchView struct {
	ID            string  `json:"id"`
	Status        string  `json:"status"`
	OutputFileID  *string `json:"output_file_id"`
	ErrorFileID   *string `json:"error_file_id"`
	RequestCounts struct {
		Total, Completed, Failed int64
	} `json:"request_counts"`
	Errors *struct {
		Data []struct {
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
			Line    *int    `json:"line"`
		} `json:"data"`
	} `json:"errors"`
	CancelledAt *int64 `json:"cancelled_at"`
	ExpiredAt   *int64 `json:"expired_at"`
	Progress    struct {
		Done    int64   `json:"done"`
		Percent float64 `json:"percent"`
	} `json:"progress"`
}

// do sends a request with an optional JSON body and decodes a JSON answer into out.
func (e *env) do(t testing.TB, method, path, body string, out any) int {
	t.Helper()
	return e.doAs(t, "", method, path, body, out)
}

// doAs is do with an API key ("" for none).
func (e *env) doAs(t testing.TB, key, method, path, body string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), string(b))
	}
	return res.StatusCode
}

// create starts a batch of the input file and returns its id.
func (e *env) create(t testing.TB, fileID, window string) string {
	t.Helper()
	var b batchView
	code := e.do(t, http.MethodPost, "/v1/batches",
		fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":%q}`, fileID, window), &b)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "validating", b.Status)
	return b.ID
}

// waitStatus polls the batch until its status is one of want, failing after timeout.
func (e *env) waitStatus(t testing.TB, id string, timeout time.Duration, want ...string) batchView {
	t.Helper()
	return e.waitStatusAs(t, "", id, timeout, want...)
}

// waitStatusAs is waitStatus with an API key ("" for none).
func (e *env) waitStatusAs(t testing.TB, key, id string, timeout time.Duration, want ...string) batchView {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var b batchView
	for {
		b = batchView{}
		require.Equal(t, http.StatusOK, e.doAs(t, key, http.MethodGet, "/v1/batches/"+id, "", &b))
		for _, w := range want {
			if b.Status == w {
				return b
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s is %s after %v, want %v (counts %+v)", id, b.Status, timeout, want, b.RequestCounts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outputLine is a line of an output or error file.
type outputLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// content reads a file's lines through the HTTP API; no id, no lines.
func (e *env) content(t testing.TB, id *string) []outputLine {
	t.Helper()
	if id == nil {
		return nil
	}
	res, err := http.Get(e.URL + "/v1/files/" + *id + "/content")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var out []outputLine
	for _, l := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var o outputLine
		require.NoError(t, json.Unmarshal(l, &o), string(l))
		out = append(out, o)
	}
	return out
}

// byCustomID counts lines per custom_id across files.
func byCustomID(files ...[]outputLine) map[string]int {
	m := map[string]int{}
	for _, f := range files {
		for _, l := range f {
			m[l.CustomID]++
		}
	}
	return m
}

// inputOf returns the batch's input file id.
func (e *env) inputOf(t testing.TB, id string) string {
	t.Helper()
	var b struct {
		InputFileID string `json:"input_file_id"`
	}
	require.Equal(t, http.StatusOK, e.do(t, http.MethodGet, "/v1/batches/"+id, "", &b))
	return b.InputFileID
}

// ackedBus reports the UUID of every message a subscriber acked.
type ackedBus struct {
	bus.Bus
	acked chan string
}

func (b *ackedBus) Subscribe(ctx context.Context, topic, group string) (<-chan *message.Message, error) {
	in, err := b.Bus.Subscribe(ctx, topic, group)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for m := range in {
			go func() {
				select {
				case <-m.Acked():
					b.acked <- m.UUID
				case <-m.Nacked():
				case <-ctx.Done():
				}
			}()
			out <- m
		}
	}()
	return out, nil
}

// stagesOf runs admit, if any, as every model's first stage.
func stagesOf(admit pipeline.Admission) func(string) []pipeline.Interceptor {
	if admit == nil {
		return nil
	}
	return pipeline.ForAll(pipeline.Admit(admit))
}
