package bridge_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/conformance/suite"
	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

func requireCode(t testing.TB, err error, code codes.Code, contains string) {
	t.Helper()
	require.Error(t, err)
	st := status.Convert(err)
	require.Equal(t, code, st.Code(), "%v", err)
	require.Contains(t, st.Message(), contains)
}

// TestInferFolded: ModelInfer sends one OpenAI request and answers the whole completion, with
// typed or raw text_input shaped [1] or [1,1]; a chat endpoint gets a chat request.
func TestInferFolded(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	c := openaitest.Start(t, "c", "chatty")
	chat := vllm(c)
	chat.Kind = upstream.KindChat
	e := start(t, vllm(a), chat)
	e.waitModel(t, "llama")
	e.waitModel(t, "chatty")
	ctx := context.Background()

	for _, tc := range []llm{
		{model: "llama", id: "r1", prompt: "Say hi"},
		{model: "llama", id: "r2", prompt: "Say hi", typed: true},
		{model: "llama", id: "r3", prompt: "Say hi", shape: []int64{1, 1}},
		{model: "llama", id: "r4", prompt: "Say hi", typed: true, shape: []int64{1, 1}},
	} {
		t.Run(fmt.Sprintf("typed=%v shape=%v", tc.typed, tc.shape), func(t *testing.T) {
			resp, err := e.client.ModelInfer(ctx, tc.request())
			require.NoError(t, err)
			assert.Equal(t, "llama", resp.GetModelName())
			assert.Equal(t, "1", resp.GetModelVersion())
			assert.Equal(t, tc.id, resp.GetId())
			assert.Equal(t, []string{"Hello from a"}, strs(t, resp, "text_output"))
			assert.Equal(t, []string{"stop"}, strs(t, resp, "finish_reason"))
			assert.JSONEq(t, `{"model":"llama","prompt":"Say hi","stream":false}`, string(a.LastBody()))
			assert.Equal(t, tc.id, a.LastHeader().Get(openai.HeaderRequestID), "the KServe id is the upstream request id")
		})
	}

	resp, err := e.client.ModelInfer(ctx, llm{model: "chatty", prompt: "Say \"hi\"\n"}.request())
	require.NoError(t, err)
	assert.Equal(t, []string{"Hello from c"}, strs(t, resp, "text_output"))
	assert.Equal(t, []string{"stop"}, strs(t, resp, "finish_reason"))
	assert.JSONEq(t, `{"model":"chatty","messages":[{"role":"user","content":"Say \"hi\"\n"}],"stream":false}`, string(c.LastBody()))
	assert.NotEmpty(t, c.LastHeader().Get(openai.HeaderRequestID), "without a KServe id the proxy makes one")

	// Only the outputs asked for.
	req := llm{model: "llama", prompt: "x"}.request()
	req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "finish_reason"}}
	resp, err = e.client.ModelInfer(ctx, req)
	require.NoError(t, err)
	require.Len(t, resp.GetOutputs(), 1)
	assert.Equal(t, []string{"stop"}, strs(t, resp, "finish_reason"))
}

// TestInvalidRequests: the registry's validation answers with Triton's messages before anything
// reaches the upstream.
func TestInvalidRequests(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, vllm(a))
	e.waitModel(t, "llama")
	ctx := context.Background()
	before := a.Requests()

	_, err := e.client.ModelInfer(ctx, &inference.ModelInferRequest{ModelName: "llama"})
	requireCode(t, err, codes.InvalidArgument, "missing required input(s) ['text_input']")
	req := llm{model: "llama", prompt: "x"}.request()
	req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "prompt", Datatype: "BYTES", Shape: []int64{1}})
	req.RawInputContents = append(req.RawInputContents, frame("y"))
	_, err = e.client.ModelInfer(ctx, req)
	requireCode(t, err, codes.InvalidArgument, "unexpected inference input 'prompt' for model 'llama'")
	req = llm{model: "llama", prompt: "x"}.request()
	req.Inputs[0].Datatype = "INT32"
	_, err = e.client.ModelInfer(ctx, req)
	requireCode(t, err, codes.InvalidArgument, "inference input 'text_input' data-type is 'INT32', but model 'llama' expects 'BYTES'")
	_, err = e.client.ModelInfer(ctx, llm{model: "llama", prompt: "x", shape: []int64{2}}.request())
	requireCode(t, err, codes.InvalidArgument, "unexpected shape for input 'text_input' for model 'llama'. Expected [1], got [2]")
	_, err = e.client.ModelInfer(ctx, llm{model: "llama", prompt: "x", shape: []int64{1, 2}}.request())
	requireCode(t, err, codes.InvalidArgument, "unexpected shape for input 'text_input' for model 'llama'. Expected [1], got [1,2]")
	_, err = e.client.ModelInfer(ctx, llm{model: "nope", prompt: "x"}.request())
	requireCode(t, err, codes.NotFound, "Request for unknown model: 'nope' is not found")
	assert.Equal(t, before, a.Requests(), "nothing reached the upstream")
}

// TestSamplingParameters: the members of sampling_parameters join the upstream body; anything
// but a JSON object that leaves the bridge's own fields alone is INVALID_ARGUMENT.
func TestSamplingParameters(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, vllm(a))
	e.waitModel(t, "llama")
	ctx := context.Background()

	_, err := e.client.ModelInfer(ctx, llm{model: "llama", prompt: "hi", typed: true,
		sampling: `{"temperature": 0.5, "max_tokens": 16, "top_k": 4, "stop": ["\n", "END"], "n": 1, "logit_bias": {"50256": -100}}`}.request())
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"llama","prompt":"hi","stream":false,"temperature":0.5,"max_tokens":16,"top_k":4,"stop":["\n","END"],"n":1,"logit_bias":{"50256":-100}}`,
		string(a.LastBody()))

	before := a.Requests()
	for sampling, msg := range map[string]string{
		`[1, 2]`:                   "sampling_parameters must be a JSON object",
		`"temperature"`:            "sampling_parameters must be a JSON object",
		`temperature=1`:            "sampling_parameters is not valid JSON",
		`{"temperature": 1`:        "sampling_parameters is not valid JSON",
		`{"temperature": 1} {}`:    "sampling_parameters must hold one JSON object and nothing after it",
		`{"prompt": "other"}`:      "sampling_parameters must not set 'prompt'",
		`{"pr\u006fmpt": "other"}`: "sampling_parameters must not set 'prompt'",
		`{"model": "gpt"}`:         "sampling_parameters must not set 'model'",
		`{"stream": true}`:         "sampling_parameters must not set 'stream'",
		`{"messages": []}`:         "sampling_parameters must not set 'messages'",
		`{"top_p": 1, "top_p": 2}`: "sampling_parameters sets 'top_p' twice",
		`{"n": 0}`:                 "'n' must be an integer from 1 to 1024, got 0",
		`{"n": "two"}`:             `'n' must be an integer from 1 to 1024, got "two"`,
	} {
		for _, typed := range []bool{false, true} {
			_, err := e.client.ModelInfer(ctx, llm{model: "llama", prompt: "hi", sampling: sampling, typed: typed}.request())
			requireCode(t, err, codes.InvalidArgument, msg)
		}
	}
	assert.Equal(t, before, a.Requests(), "no rejected request reached the upstream")
}

// TestStream: ModelStreamInfer with stream (or streaming) true answers one response per upstream
// chunk, with the delta text and finish_reason "", and one final response, the last, that
// carries the finish_reason.
func TestStream(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	const chunks = 5
	a.SetStream(chunks, 0)
	e := start(t, vllm(a))
	e.waitModel(t, "llama")

	for _, tc := range []struct {
		name   string
		req    llm
		params map[string]*inference.InferParameter
	}{
		{"stream", llm{model: "llama", id: "s1", prompt: "count", stream: "stream"}, nil},
		{"streaming typed", llm{model: "llama", id: "s2", prompt: "count", stream: "streaming", typed: true}, nil},
		{"empty final asked", llm{model: "llama", id: "s3", prompt: "count", stream: "stream"},
			map[string]*inference.InferParameter{"triton_enable_empty_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req.request()
			req.Parameters = tc.params
			got, err := e.streamAll(t, nil, req)
			require.NoError(t, err)
			require.Len(t, got, chunks+1, "one response per content chunk and one for the finish chunk; no empty final: the last data response is final")
			var text strings.Builder
			for i, m := range got {
				require.Empty(t, m.GetErrorMessage())
				r := m.GetInferResponse()
				assert.Equal(t, tc.req.id, r.GetId())
				assert.Equal(t, "llama", r.GetModelName())
				texts := strs(t, r, "text_output")
				require.Len(t, texts, 1)
				text.WriteString(texts[0])
				last := i == len(got)-1
				assert.Equal(t, last, isFinal(r), "response %d", i)
				want := ""
				if last {
					want = "stop"
				}
				assert.Equal(t, []string{want}, strs(t, r, "finish_reason"), "response %d", i)
			}
			assert.Equal(t, "tok0 tok1 tok2 tok3 tok4 ", text.String())
			assert.JSONEq(t, `{"model":"llama","prompt":"count","stream":true}`, string(a.LastBody()))
		})
	}

	// Without stream, one folded, final response per request, in request order; a streamed
	// request on the same stream is told apart by its id.
	got, err := e.streamAll(t, nil, llm{model: "llama", id: "f1", prompt: "x"}.request(), llm{model: "llama", id: "f2", prompt: "y", typed: true}.request())
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, m := range got {
		assert.Equal(t, fmt.Sprint("f", i+1), m.GetInferResponse().GetId())
		assert.True(t, isFinal(m.GetInferResponse()))
		assert.Equal(t, []string{"Hello from a"}, strs(t, m.GetInferResponse(), "text_output"))
	}
}

// TestInferRefusesStream: ModelInfer (and REST infer) with stream true is INVALID_ARGUMENT, as in
// Dynamo, and nothing reaches the upstream.
func TestInferRefusesStream(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, vllm(a))
	e.waitModel(t, "llama")
	_, err := e.client.ModelInfer(context.Background(), llm{model: "llama", prompt: "x", stream: "stream"}.request())
	requireCode(t, err, codes.InvalidArgument, "Streaming is not supported for this endpoint")
	_, err = e.client.ModelInfer(context.Background(), llm{model: "llama", prompt: "x", stream: "streaming", typed: true}.request())
	requireCode(t, err, codes.InvalidArgument, "Streaming is not supported for this endpoint")
	code, body := e.post(t, "/v2/models/llama/infer", `{"inputs":[{"name":"text_input","datatype":"BYTES","shape":[1],"data":["x"]},{"name":"stream","datatype":"BOOL","shape":[1],"data":[true]}]}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.JSONEq(t, `{"error":"Streaming is not supported for this endpoint"}`, body)
	assert.Zero(t, a.Requests())
}

// TestCancel: a cancelled ModelInfer or ModelStreamInfer cancels the upstream request.
func TestCancel(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, vllm(a))
	e.waitModel(t, "llama")

	release := a.Hold()
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.client.ModelInfer(ctx, llm{model: "llama", prompt: "x"}.request())
		done <- err
	}()
	<-a.Started()
	cancel()
	requireCode(t, <-done, codes.Canceled, "")
	require.Eventually(t, func() bool { return a.Canceled() == 1 }, 10*time.Second, 5*time.Millisecond, "the unary call's upstream request was cancelled")
	release()

	a.SetStream(100000, 5*time.Millisecond)
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	s, err := e.client.ModelStreamInfer(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Send(llm{model: "llama", id: "long", prompt: "x", stream: "stream"}.request()))
	for range 3 {
		m, err := s.Recv()
		require.NoError(t, err)
		require.False(t, isFinal(m.GetInferResponse()))
	}
	cancel()
	require.Eventually(t, func() bool { return a.Canceled() == 2 }, 10*time.Second, 5*time.Millisecond, "the stream's upstream request was cancelled")
	require.Eventually(t, func() bool { return a.InFlight() == 0 }, 10*time.Second, 5*time.Millisecond)
}

// TestStreamClientGone: a stream whose client went away after the first response is finished
// as such, even when the answer was read to its [DONE] before the bridge found the client gone
// (at its held-back final response): a session must not keep a turn its client never got.
func TestStreamClientGone(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	stage, finished := openaitest.ClientGoneStage()
	e := startStaged(t, []pipeline.Interceptor{stage}, vllm(a))
	e.waitModel(t, "llama")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := e.client.ModelStreamInfer(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Send(llm{model: "llama", id: "gone", prompt: "x", stream: "stream"}.request()))
	m, err := s.Recv()
	require.NoError(t, err)
	require.Equal(t, []string{"Hel"}, strs(t, m.GetInferResponse(), "text_output"))
	cancel()
	select {
	case err := <-finished:
		assert.Error(t, err, "the body is finished with the client's failure")
	case <-time.After(10 * time.Second):
		t.Fatal("the body was never finished")
	}
}

// TestUpstreamErrors: upstream statuses and failures map to gRPC codes with the upstream's
// message; an upstream dying mid-stream is an error, not a clean end.
func TestUpstreamErrors(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, vllm(a))
	e.waitModel(t, "llama")
	ctx := context.Background()

	for status, code := range map[int]codes.Code{
		400: codes.InvalidArgument, 422: codes.InvalidArgument, 401: codes.Unauthenticated, 404: codes.NotFound,
		429: codes.Unavailable, 502: codes.Unavailable, 503: codes.Unavailable, 500: codes.Internal,
	} {
		a.FailWith(status)
		_, err := e.client.ModelInfer(ctx, llm{model: "llama", prompt: "x"}.request())
		requireCode(t, err, code, fmt.Sprintf("upstream 'a' answered HTTP %d: injected failure from a", status))
		got, err := e.streamAll(t, nil, llm{model: "llama", id: "e", prompt: "x", stream: "stream"}.request())
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, fmt.Sprintf("upstream 'a' answered HTTP %d: injected failure from a", status), got[0].GetErrorMessage())
	}
	a.FailWith(0)

	// Dying mid-body: unary and streamed.
	a.DieAfter(0)
	_, err := e.client.ModelInfer(ctx, llm{model: "llama", prompt: "x"}.request())
	requireCode(t, err, codes.Unavailable, "upstream 'a' failed mid-answer")
	a.DieAfter(2)
	got, err := e.streamAll(t, nil, llm{model: "llama", id: "d", prompt: "x", stream: "stream"}.request())
	require.NoError(t, err)
	require.Len(t, got, 3, "two chunks, then the error")
	for _, m := range got[:2] {
		require.Empty(t, m.GetErrorMessage())
		assert.False(t, isFinal(m.GetInferResponse()))
	}
	assert.Contains(t, got[2].GetErrorMessage(), "upstream 'a' failed mid-answer")
	assert.Equal(t, "d", got[2].GetInferResponse().GetId())
	// With triton_grpc_error the stream ends with the status instead.
	_, err = e.streamAll(t, []string{"triton_grpc_error", "true"}, llm{model: "llama", id: "d", prompt: "x", stream: "stream"}.request())
	requireCode(t, err, codes.Unavailable, "upstream 'a' failed mid-answer")
	a.DieAfter(-1)

	// The proxy's own errors: no healthy endpoint.
	a.SetHealthy(false)
	a.Stop()
	require.Eventually(t, func() bool {
		_, err := e.client.ModelInfer(ctx, llm{model: "llama", prompt: "x"}.request())
		return status.Code(err) == codes.Unavailable && strings.Contains(status.Convert(err).Message(), "No healthy endpoint serves model `llama`")
	}, 10*time.Second, 10*time.Millisecond)
}

// TestSync: bridge models follow the proxy's models: added when it learns one, removed when it
// stops routing it, never for embeddings, and never over another model's name.
func TestSync(t *testing.T) {
	a := openaitest.Start(t, "a", "llama", "simple")
	emb := openaitest.Start(t, "emb", "embedder")
	embEp := vllm(emb)
	embEp.Kind = upstream.KindEmbeddings
	e := start(t, vllm(a), embEp)
	e.waitModel(t, "llama")
	ctx := context.Background()

	index := func() []string {
		r, err := e.client.RepositoryIndex(ctx, &inference.RepositoryIndexRequest{})
		require.NoError(t, err)
		var names []string
		for _, m := range r.GetModels() {
			names = append(names, m.GetName())
		}
		return names
	}
	assert.Contains(t, index(), "llama")
	assert.NotContains(t, index(), "embedder", "embeddings models are not bridged")
	// "simple" is the built-in's: skipped with a warning, the built-in still served.
	cfg, err := e.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "simple"})
	require.NoError(t, err)
	assert.Equal(t, "infergate_cpu", cfg.GetConfig().GetPlatform())
	assert.Contains(t, e.logs.String(), `another model has its name" model=simple`)
	assert.Equal(t, 1, strings.Count(e.logs.String(), "another model has its name"))
	e.bridge.Sync()
	assert.Equal(t, 1, strings.Count(e.logs.String(), "another model has its name"), "warned once, not on every sync")

	// An endpoint added at run time brings its models; removing it takes them away.
	reg := openaitest.Start(t, "reg", "mistral")
	require.NoError(t, e.proxy.AddEndpoint(upstream.Endpoint{Name: "reg", URL: reg.URL, Type: upstream.TypeVLLM, Kind: upstream.KindChat,
		SkipDiscovery: true, Models: []string{"mistral"}, CheckInterval: time.Hour}))
	e.waitModel(t, "mistral")
	md, err := e.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "mistral"})
	require.NoError(t, err)
	assert.Equal(t, "openai", md.GetPlatform())
	resp, err := e.client.ModelInfer(ctx, llm{model: "mistral", prompt: "x"}.request())
	require.NoError(t, err)
	assert.Equal(t, []string{"Hello from reg"}, strs(t, resp, "text_output"))
	assert.Contains(t, string(reg.LastBody()), `"messages":[{"role":"user","content":"x"}]`, "a chat endpoint gets chat requests")

	require.True(t, e.proxy.RemoveEndpoint("reg"))
	e.bridge.Sync() // the proxy announced the change already; another Sync changes nothing
	_, err = e.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "mistral"})
	requireCode(t, err, codes.NotFound, "Request for unknown model: 'mistral' is not found")
	assert.NotContains(t, index(), "mistral")
	assert.Contains(t, index(), "llama")

	// Many concurrent Syncs leave exactly one bridge model per name.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(e.bridge.Sync)
	}
	wg.Wait()
	assert.Equal(t, 1, strings.Count(strings.Join(index(), ","), "llama"))
}

// TestMetadataAndConfig: Dynamo's LLM contract with KServe datatype names.
func TestMetadataAndConfig(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, vllm(a))
	e.waitModel(t, "llama")
	ctx := context.Background()
	md, err := e.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "llama"})
	require.NoError(t, err)
	want := &inference.ModelMetadataResponse{Name: "llama", Versions: []string{"1"}, Platform: "openai",
		Inputs: []*inference.ModelMetadataResponse_TensorMetadata{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}},
			{Name: "stream", Datatype: "BOOL", Shape: []int64{1}},
			{Name: "streaming", Datatype: "BOOL", Shape: []int64{1}},
			{Name: "sampling_parameters", Datatype: "BYTES", Shape: []int64{1}},
		},
		Outputs: []*inference.ModelMetadataResponse_TensorMetadata{
			{Name: "text_output", Datatype: "BYTES", Shape: []int64{-1}},
			{Name: "finish_reason", Datatype: "BYTES", Shape: []int64{-1}},
		}}
	assert.Empty(t, cmpProto(want, md))
	cfg, err := e.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "llama"})
	require.NoError(t, err)
	wantCfg := &inference.ModelConfig{Name: "llama", Platform: "openai", Backend: "infergate_bridge",
		Input: []*inference.ModelInput{
			{Name: "text_input", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}},
			{Name: "stream", DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
			{Name: "streaming", DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
			{Name: "sampling_parameters", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}, Optional: true},
		},
		Output: []*inference.ModelOutput{
			{Name: "text_output", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
			{Name: "finish_reason", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
		}}
	assert.Empty(t, cmpProto(wantCfg, cfg.GetConfig()))
}

func cmpProto(want, got proto.Message) string {
	if proto.Equal(want, got) {
		return ""
	}
	return fmt.Sprintf("want %v\n got %v", want, got)
}

// TestREST: generate answers the folded text; generate_stream with stream true sends one event
// per upstream chunk.
func TestREST(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	a.SetStream(3, 0)
	e := start(t, vllm(a))
	e.waitModel(t, "llama")

	code, body := e.post(t, "/v2/models/llama/generate", `{"id":"g1","text_input":"hi","sampling_parameters":"{\"max_tokens\":8}"}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.JSONEq(t, `{"id":"g1","model_name":"llama","model_version":"1","text_output":"Hello from a","finish_reason":"stop"}`, body)
	assert.JSONEq(t, `{"model":"llama","prompt":"hi","stream":false,"max_tokens":8}`, string(a.LastBody()))

	code, body = e.post(t, "/v2/models/llama/generate_stream", `{"text_input":"hi","parameters":{"stream":true}}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, []string{
		`{"model_name":"llama","model_version":"1","text_output":"tok0 ","finish_reason":""}`,
		`{"model_name":"llama","model_version":"1","text_output":"tok1 ","finish_reason":""}`,
		`{"model_name":"llama","model_version":"1","text_output":"tok2 ","finish_reason":""}`,
		`{"model_name":"llama","model_version":"1","text_output":"","finish_reason":"stop"}`,
	}, sse(body))

	code, body = e.post(t, "/v2/models/llama/generate_stream", `{"text_input":"hi"}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, []string{`{"model_name":"llama","model_version":"1","text_output":"Hello from a","finish_reason":"stop"}`}, sse(body))

	code, body = e.post(t, "/v2/models/llama/generate", `{"text_input":"hi","stream":true}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "generate expects model to produce exactly 1 response")

	code, body = e.post(t, "/v2/models/llama/generate", `{"text_input":"hi","sampling_parameters":"{\"prompt\":1}"}`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "sampling_parameters must not set 'prompt'")
}

// TestConformance runs the suite's LLM and REST generate checks against a bridge model in front
// of a fake whose stream spells out its unary answer.
func TestConformance(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	a.SetReply("Hello from the bridge, in four parts")
	a.SetStream(4, 0)
	e := start(t, vllm(a))
	e.waitModel(t, "llama")
	rep, err := suite.Run(context.Background(), suite.Config{GRPCAddr: e.srv.Addr, HTTPURL: e.srv.URL,
		Run: regexp.MustCompile(`^(bridge\.|rest\.generate)`)})
	require.NoError(t, err)
	require.Len(t, rep.Results, 5)
	for _, r := range rep.Results {
		assert.Equal(t, suite.Pass, r.Outcome, "%s: %s", r.ID, r.Message)
	}
}
