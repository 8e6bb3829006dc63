package bridge_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/bridge"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// env is a real gateway on a loopback port with the OpenAI proxy mounted and the bridge synced on
// every change of the proxy's models, as the runtime wires them, in front of fake upstreams.
type env struct {
	srv    *gatewaytest.Server
	proxy  *openai.Proxy
	bridge *bridge.Bridge
	client inference.GRPCInferenceServiceClient
	logs   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t testing.TB, eps ...upstream.Endpoint) *env {
	t.Helper()
	return startStaged(t, nil, eps...)
}

// startStaged is start with stages in front of every model's upstreams.
func startStaged(t testing.TB, stages []pipeline.Interceptor, eps ...upstream.Endpoint) *env {
	t.Helper()
	e := &env{logs: &syncBuffer{}}
	p, err := openai.New(openai.Options{Endpoints: eps, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Stages: func(string) []pipeline.Interceptor { return stages }})
	require.NoError(t, err)
	t.Cleanup(p.Close) // after the gateway's drain (cleanups run last-in first-out)
	e.proxy = p
	e.srv = gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	e.bridge = bridge.New(e.srv.Registry, p, bridge.WithLogger(slog.New(slog.NewTextHandler(e.logs, nil))))
	p.Start(context.Background())
	e.bridge.Sync()
	conn, err := grpc.NewClient(e.srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	e.client = inference.NewGRPCInferenceServiceClient(conn)
	return e
}

// waitModel waits until the KServe surface serves name.
func (e *env) waitModel(t testing.TB, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		r, err := e.client.ModelReady(context.Background(), &inference.ModelReadyRequest{Name: name})
		return err == nil && r.GetReady()
	}, 10*time.Second, 5*time.Millisecond, "model %q never appeared", name)
}

// vllm is an endpoint for a fake, discovered by listing its models, with rare health checks.
func vllm(u *openaitest.Upstream) upstream.Endpoint {
	return upstream.Endpoint{Name: u.Name, URL: u.URL, Type: upstream.TypeVLLM, CheckInterval: time.Hour, CheckTimeout: time.Second}
}

// llm builds a request for the bridge model: prompt in text_input (raw or typed, shaped
// shape), and optionally stream and sampling_parameters.
type llm struct {
	model, id, prompt string
	typed             bool
	shape             []int64
	stream            string // "", "stream" or "streaming": the BOOL input set true
	sampling          string // sampling_parameters, when not ""
	params            map[string]*inference.InferParameter
}

func (r llm) request() *inference.ModelInferRequest {
	shape := r.shape
	if shape == nil {
		shape = []int64{1}
	}
	req := &inference.ModelInferRequest{ModelName: r.model, Id: r.id, Parameters: r.params}
	add := func(name, datatype string, raw []byte, typed *inference.InferTensorContents) {
		in := &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: datatype, Shape: shape}
		if r.typed {
			in.Contents = typed
		} else {
			req.RawInputContents = append(req.RawInputContents, raw)
		}
		req.Inputs = append(req.Inputs, in)
	}
	add("text_input", "BYTES", frame(r.prompt), &inference.InferTensorContents{BytesContents: [][]byte{[]byte(r.prompt)}})
	if r.stream != "" {
		add(r.stream, "BOOL", []byte{1}, &inference.InferTensorContents{BoolContents: []bool{true}})
	}
	if r.sampling != "" {
		add("sampling_parameters", "BYTES", frame(r.sampling), &inference.InferTensorContents{BytesContents: [][]byte{[]byte(r.sampling)}})
	}
	return req
}

func frame(s string) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(s))), s...)
}

// strs decodes output name of resp as strings, from raw or typed contents.
func strs(t testing.TB, resp *inference.ModelInferResponse, name string) []string {
	t.Helper()
	for i, o := range resp.GetOutputs() {
		if o.GetName() != name {
			continue
		}
		require.Equal(t, "BYTES", o.GetDatatype())
		var out []string
		if i < len(resp.GetRawOutputContents()) {
			b := resp.GetRawOutputContents()[i]
			for len(b) > 0 {
				require.GreaterOrEqual(t, len(b), 4)
				n := binary.LittleEndian.Uint32(b)
				require.LessOrEqual(t, int(n), len(b)-4)
				out = append(out, string(b[4:4+n]))
				b = b[4+n:]
			}
		}
		require.Equal(t, []int64{int64(len(out))}, o.GetShape(), "shape of %s", name)
		return out
	}
	t.Fatalf("no output %q in %v", name, resp)
	return nil
}

func isFinal(resp *inference.ModelInferResponse) bool {
	return resp.GetParameters()["triton_final_response"].GetBoolParam()
}

// streamAll sends reqs on one ModelStreamInfer stream (with header pairs as metadata), closes it
// and returns every response and the stream's end.
func (e *env) streamAll(t testing.TB, header []string, reqs ...*inference.ModelInferRequest) ([]*inference.ModelStreamInferResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(header) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, header...)
	}
	s, err := e.client.ModelStreamInfer(ctx)
	require.NoError(t, err)
	for _, r := range reqs {
		require.NoError(t, s.Send(r))
	}
	require.NoError(t, s.CloseSend())
	var out []*inference.ModelStreamInferResponse
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

// post sends a REST request and returns the status and body.
func (e *env) post(t testing.TB, path, body string) (int, string) {
	t.Helper()
	res, err := http.Post(e.srv.URL+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// sse returns the data of each server-sent event in body.
func sse(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}
