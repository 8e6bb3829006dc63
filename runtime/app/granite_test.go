package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/gen/inference"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/stage/guard"
	"github.com/infergate/infergate/surface/kserve/shm"
	"github.com/infergate/infergate/surface/openai/openaitest"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestGraniteProcessor: models.<name>.processor serves chat completions through a Granite
// processor: the upstream gets Granite 3.3's prompt at /v1/completions, the client a chat
// completion; an unknown processor fails start-up naming the known ones.
func TestGraniteProcessor(t *testing.T) {
	up := openaitest.Start(t, "up", "granite")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, kind: chat, check_interval: 1h}
models:
  granite: {processor: ibm-granite/granite-3.3-8b-instruct}
`, up.URL), "granite")
	c := oai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	out, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "granite",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Hello")}})
	require.NoError(t, err)
	assert.Equal(t, "Hello from up", out.Choices[0].Message.Content)
	var sent struct{ Prompt string }
	require.NoError(t, json.Unmarshal(up.LastBody(), &sent))
	assert.True(t, strings.HasPrefix(sent.Prompt, "<|start_of_role|>system<|end_of_role|>Knowledge Cutoff Date: April 2024.\nToday's Date: "), "Granite 3.3's prompt, at /v1/completions: %q", sent.Prompt)
	assert.True(t, strings.HasSuffix(sent.Prompt, "<|start_of_role|>user<|end_of_role|>Hello<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"), sent.Prompt)

	// Every surface takes the processor: OpenAIService over Connect, the KServe bridge (the
	// bridge sends chat for a model with a processor) and a Batch API line.
	prompted := func(what, text string) {
		t.Helper()
		var sent struct{ Prompt string }
		require.NoError(t, json.Unmarshal(up.LastBody(), &sent), what)
		assert.True(t, strings.HasSuffix(sent.Prompt, "<|start_of_role|>user<|end_of_role|>"+text+"<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"),
			"%s: Granite's prompt at /v1/completions: %q", what, sent.Prompt)
	}
	ctx := context.Background()
	got, err := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, "http://"+addr).CreateChatCompletion(ctx,
		&openaiv1.CreateChatCompletionRequest{Model: "granite", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("Over Connect")}}})
	require.NoError(t, err)
	assert.Equal(t, "Hello from up", got.GetChoices()[0].GetMessage().GetContent())
	prompted("Connect", "Over Connect")

	res, err := http.Post("http://"+addr+"/v2/models/granite/generate", "application/json",
		strings.NewReader(`{"text_input":"Through the bridge","parameters":{"max_tokens":8}}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	assert.Contains(t, string(b), `"text_output":"Hello from up"`)
	prompted("bridge", "Through the bridge")

	done := completedBatch(t, addr, `{"custom_id":"g","method":"POST","url":"/v1/chat/completions","body":{"model":"granite","messages":[{"role":"user","content":"In a batch"}]}}`)
	assert.Equal(t, 1, fileLines(t, addr, done.OutputFileID, map[string]int{}), "the line succeeded")
	prompted("batch line", "In a batch")

	_, err = ParseConfig("test", []byte("models:\n  g: {processor: granite9}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `models.g.processor: unknown processor "granite9" (known: `)
	assert.True(t, strings.Contains(err.Error(), "granite3.3"), err.Error())
}

// server.system_shared_memory: Triton's system shared memory extension is advertised (on Linux)
// unless turned off, and its routes then answer that it is off.
func TestSystemSharedMemorySwitch(t *testing.T) {
	extensions := func(addr string) string {
		res, err := http.Get("http://" + addr + "/v2")
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return string(b)
	}
	on := serveYAML(t, "", io.Discard)
	off := serveYAML(t, "server: {system_shared_memory: false}\n", io.Discard)
	if shm.Supported() {
		assert.Contains(t, extensions(on), `"system_shared_memory"`)
	}
	assert.NotContains(t, extensions(off), `"system_shared_memory"`)
	res, err := http.Post("http://"+off+"/v2/systemsharedmemory/status", "application/json", nil)
	require.NoError(t, err)
	res.Body.Close()
	assert.GreaterOrEqual(t, res.StatusCode, 400, "turned off")
}

// With API keys on, only an admin key gets a Granite request's rendered prompt back
// (X-Infergate-Debug: prompt): it holds the system prompt and documents.
func TestGraniteDebugPromptNeedsAdmin(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "granite")
	const user, admin = "sk-granite-user-31c4", "sk-granite-admin-77d0"
	addr := serveYAML(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
auth:
  keys:
    - {name: user, sha256: %s}
    - {name: admin, sha256: %s, admin: true}
models:
  granite: {processor: granite3.3}
`, up.URL, guard.HashKey(user), guard.HashKey(admin)), io.Discard)
	prompt := func(key string) string {
		t.Helper()
		var res *http.Response
		require.Eventually(t, func() bool {
			req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions",
				strings.NewReader(`{"model":"granite","messages":[{"role":"user","content":"Hello"}]}`))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("X-Infergate-Debug", "prompt")
			var err error
			if res, err = http.DefaultClient.Do(req); err != nil {
				return false
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		}, 10*time.Second, 10*time.Millisecond)
		return res.Header.Get("X-Infergate-Granite-Prompt")
	}
	assert.Empty(t, prompt(user), "a user key does not see the prompt")
	assert.NotEmpty(t, prompt(admin), "an admin key does")
}

// models.<name>.voting: each chat answer is the majority of samples completions of the
// processor; bad voting settings fail start-up naming the key.
func TestGraniteVoting(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "granite")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
models:
  granite: {processor: granite3.3, voting: {samples: 3}}
`, up.URL), "granite")
	c := oai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	calls := up.Requests()
	out, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "granite",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("What is 6 times 7?")}})
	require.NoError(t, err)
	assert.Equal(t, "Hello from up", out.Choices[0].Message.Content, "the answer every sample gave")
	// The fake answers one choice whatever n asks for: the vote asks again for the samples missing.
	assert.EqualValues(t, 3, up.Requests()-calls, "three samples, one completion each")

	for cfg, want := range map[string]string{
		"{processor: granite3.3, voting: {samples: 1}}":                      "models.g.voting.samples: 1 is not between 2 and 1024",
		"{processor: granite3.3, voting: {samples: 3, normalizer: fuzzy}}":   `models.g.voting.normalizer: "fuzzy" is neither exact nor integer`,
		"{voting: {samples: 3}}":                                             "models.g.voting needs processor",
		"{processor: granite3.3, voting: {samples: 3, normalizer: integer}}": "",
	} {
		_, err := ParseConfig("test", []byte("models:\n  g: "+cfg+"\n"))
		if want == "" {
			assert.NoError(t, err, cfg)
		} else if assert.Error(t, err, cfg) {
			assert.Contains(t, err.Error(), want)
		}
	}
}

// TestGraniteKServeChatResult: a Granite model through the KServe bridge, from a grpc-go client:
// its metadata declares chat_template_kwargs and chat_result; thinking and documents pass in
// chat_template_kwargs (the upstream, of no declared kind, gets Granite's prompt at
// /v1/completions); chat_result holds the structured answer (the reasoning split off, citations
// with their offsets), in the one response of ModelInfer and the final one of ModelStreamInfer;
// what Granite refuses is INVALID_ARGUMENT with its message, before any upstream call.
func TestGraniteKServeChatResult(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "granite")
	up.SetReply("<think>Six sevens.</think>\n<response>It is 42.</response>")
	up.SetStream(5, 0)
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
models:
  granite: {processor: granite3.3}
`, up.URL), "granite")
	kc := inference.NewGRPCInferenceServiceClient(dial(t, addr))
	ctx := context.Background()
	require.Eventually(t, func() bool {
		r, err := kc.ModelReady(ctx, &inference.ModelReadyRequest{Name: "granite"})
		return err == nil && r.GetReady()
	}, 10*time.Second, 10*time.Millisecond)

	md, err := kc.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "granite"})
	require.NoError(t, err)
	names := func(ts []*inference.ModelMetadataResponse_TensorMetadata) (out []string) {
		for _, x := range ts {
			out = append(out, x.GetName()+" "+x.GetDatatype())
		}
		return out
	}
	assert.Contains(t, names(md.GetInputs()), "chat_template_kwargs BYTES")
	assert.Equal(t, []string{"text_output BYTES", "finish_reason BYTES", "chat_result BYTES"}, names(md.GetOutputs()))

	bytesIn := func(name, v string) *inference.ModelInferRequest_InferInputTensor {
		return &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: "BYTES", Shape: []int64{1},
			Contents: &inference.InferTensorContents{BytesContents: [][]byte{[]byte(v)}}}
	}
	request := func(text, kwargs string, stream bool) *inference.ModelInferRequest {
		req := &inference.ModelInferRequest{ModelName: "granite", Inputs: []*inference.ModelInferRequest_InferInputTensor{
			bytesIn("text_input", text), bytesIn("chat_template_kwargs", kwargs)}}
		if stream {
			req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "stream", Datatype: "BOOL", Shape: []int64{1},
				Contents: &inference.InferTensorContents{BoolContents: []bool{true}}})
		}
		return req
	}
	output := func(res *inference.ModelInferResponse, name string) string {
		t.Helper()
		for i, o := range res.GetOutputs() {
			if o.GetName() == name {
				els, err := tensor.SplitBytes(res.GetRawOutputContents()[i])
				require.NoError(t, err)
				require.Len(t, els, 1)
				return string(els[0])
			}
		}
		t.Fatalf("no %s in %v", name, res.GetOutputs())
		return ""
	}
	type result struct {
		Content          *string
		ReasoningContent *string `json:"reasoning_content"`
		Citations        []struct {
			DocID         string `json:"doc_id"`
			ContextText   string `json:"context_text"`
			ContextBegin  int    `json:"context_begin"`
			ContextEnd    int    `json:"context_end"`
			ResponseText  string `json:"response_text"`
			ResponseBegin int    `json:"response_begin"`
			ResponseEnd   int    `json:"response_end"`
		}
		Documents []struct {
			DocID string `json:"doc_id"`
			Text  string
		}
		ParseError string `json:"parse_error"`
	}
	chatResult := func(res *inference.ModelInferResponse) (r result) {
		t.Helper()
		raw := output(res, "chat_result")
		require.NoError(t, json.Unmarshal([]byte(raw), &r), raw)
		return r
	}

	res, err := kc.ModelInfer(ctx, request("What is 6 times 7?", `{"thinking": true}`, false))
	require.NoError(t, err)
	assert.Equal(t, "It is 42.", output(res, "text_output"))
	r := chatResult(res)
	require.NotNil(t, r.ReasoningContent)
	assert.Equal(t, "Six sevens.", *r.ReasoningContent)
	assert.Equal(t, "It is 42.", *r.Content)
	var sent struct{ Prompt string }
	require.NoError(t, json.Unmarshal(up.LastBody(), &sent))
	assert.Contains(t, sent.Prompt, "You can write down your thoughts and reasoning process before responding.", "thinking reached the prompt")
	assert.True(t, strings.HasSuffix(sent.Prompt, "<|start_of_role|>user<|end_of_role|>What is 6 times 7?<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"), sent.Prompt)

	s, err := kc.ModelStreamInfer(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Send(request("What is 6 times 7?", `{"thinking": true}`, true)))
	require.NoError(t, s.CloseSend())
	var last *inference.ModelInferResponse
	var streamed strings.Builder
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Empty(t, m.GetErrorMessage())
		if last != nil {
			assert.Empty(t, output(last, "chat_result"), "only the last response carries the JSON")
		}
		last = m.GetInferResponse()
		streamed.WriteString(output(last, "text_output"))
	}
	require.NotNil(t, last)
	assert.True(t, last.GetParameters()["triton_final_response"].GetBoolParam())
	r = chatResult(last)
	require.NotNil(t, r.ReasoningContent)
	assert.Equal(t, "Six sevens.", *r.ReasoningContent)
	assert.Equal(t, "It is 42.", *r.Content)
	assert.Equal(t, "It is 42.", streamed.String(), "text_output streams the content")

	src := repoFile(t, "lib/granite/testdata/g33/out/test_document_source.txt")
	up.SetReply(repoFile(t, "lib/granite/testdata/g33/out/test_output_with_citation_from_source.txt"))
	kw, _ := json.Marshal(map[string]any{"documents": []any{map[string]any{"doc_id": 1, "text": src}}, "controls": map[string]any{"citations": true}})
	res, err = kc.ModelInfer(ctx, request("Tell me about Limerick.", string(kw), false))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(up.LastBody(), &sent))
	assert.Contains(t, sent.Prompt, `<|start_of_role|>document {"document_id": "1"}<|end_of_role|>`)
	r = chatResult(res)
	require.NotNil(t, r.Content)
	assert.Equal(t, *r.Content, output(res, "text_output"))
	require.Len(t, r.Citations, 1)
	c := r.Citations[0]
	assert.Equal(t, "1", c.DocID)
	assert.Equal(t, 124, c.ResponseBegin)
	assert.Equal(t, 709, c.ResponseEnd)
	// Offsets count characters, as granite-io's do.
	assert.True(t, strings.HasPrefix(string([]rune(*r.Content)[c.ResponseBegin:]), c.ResponseText), c.ResponseText)
	assert.Equal(t, c.ContextText, string([]rune(src)[c.ContextBegin:c.ContextEnd]))
	require.Len(t, r.Documents, 1)
	assert.Equal(t, src, r.Documents[0].Text)
	assert.Empty(t, r.ParseError)

	before := up.Requests()
	kw, _ = json.Marshal(map[string]any{"documents": []any{map[string]any{"doc_id": 1, "text": src}}, "thinking": true})
	_, err = kc.ModelInfer(ctx, request("q", string(kw), false))
	require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "'thinking' flag is set, but documents were provided")
	assert.Equal(t, before, up.Requests(), "refused before any upstream call")
}

// repoFile reads a file by its path from the module's root (found above the working directory).
func repoFile(t *testing.T, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
			require.NoError(t, err)
			return string(b)
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the working directory")
		dir = parent
	}
}
