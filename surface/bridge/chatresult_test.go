package bridge_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/granite"
	"github.com/infergate/infergate/stage/granitestage"
	"github.com/infergate/infergate/surface/bridge"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// startGranite is a gateway whose proxy serves, from the fake up, "granite" through a Granite
// 3.3 processor, "granite32" through a 3.2 one and "plain" without one, as the runtime chains
// models.<name>.processor, with the bridge told which have a processor.
func startGranite(t *testing.T, up *openaitest.Upstream) *env {
	t.Helper()
	reg := granite.NewDefaultRegistry()
	stages := map[string]pipeline.Interceptor{}
	for model, proc := range map[string]string{"granite": "granite3.3", "granite32": "granite3.2"} {
		entry, ok := reg.Lookup(proc)
		require.True(t, ok)
		stages[model] = granitestage.Stage(entry, granitestage.Options{})
	}
	p, err := openai.New(openai.Options{Endpoints: []upstream.Endpoint{vllm(up)}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Stages: func(model string) []pipeline.Interceptor {
			if s, ok := stages[model]; ok {
				return []pipeline.Interceptor{s}
			}
			return nil
		}})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	e := &env{logs: &syncBuffer{}, proxy: p}
	e.srv = gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	e.bridge = bridge.New(e.srv.Registry, p, bridge.WithLogger(slog.New(slog.NewTextHandler(e.logs, nil))),
		bridge.WithChatResult(func(model string) bool { _, ok := stages[model]; return ok }))
	p.Start(context.Background())
	e.bridge.Sync()
	conn, err := grpc.NewClient(e.srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	e.client = inference.NewGRPCInferenceServiceClient(conn)
	for _, m := range []string{"granite", "granite32", "plain"} {
		e.waitModel(t, m)
	}
	return e
}

// withKwargs adds the chat_template_kwargs input to req.
func withKwargs(req *inference.ModelInferRequest, kwargs string) *inference.ModelInferRequest {
	req.Inputs = append(req.Inputs, &inference.ModelInferRequest_InferInputTensor{Name: "chat_template_kwargs", Datatype: "BYTES", Shape: []int64{1}})
	req.RawInputContents = append(req.RawInputContents, frame(kwargs))
	return req
}

// result is what a test reads of a chat_result element.
type result struct {
	Role             string
	Content          *string
	ReasoningContent *string `json:"reasoning_content"`
	ToolCalls        []struct {
		ID       string
		Type     string
		Function struct{ Name, Arguments string }
	} `json:"tool_calls"`
	Citations      []granite.Citation      `json:"citations"`
	Documents      []granite.CitedDocument `json:"documents"`
	Hallucinations []granite.Hallucination `json:"hallucinations"`
	ParseError     string                  `json:"parse_error"`
}

func chatResult(t *testing.T, resp *inference.ModelInferResponse) (result, string) {
	t.Helper()
	els := strs(t, resp, "chat_result")
	require.Len(t, els, 1)
	var r result
	require.NoError(t, json.Unmarshal([]byte(els[0]), &r), els[0])
	return r, els[0]
}

func golden(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "lib", "granite", "testdata", "g33", "out", name))
	require.NoError(t, err)
	return string(b)
}

const thought = "<think>Six sevens.</think>\n<response>It is 42.</response>"

// TestChatResultMetadata: a model with a processor declares chat_template_kwargs and chat_result
// (a Triton client sees them in metadata and config); one without keeps the plain contract.
func TestChatResultMetadata(t *testing.T) {
	t.Parallel()
	e := startGranite(t, openaitest.Start(t, "up", "granite", "granite32", "plain"))
	ctx := context.Background()
	md, err := e.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "granite"})
	require.NoError(t, err)
	assert.Equal(t, &inference.ModelMetadataResponse_TensorMetadata{Name: "chat_template_kwargs", Datatype: "BYTES", Shape: []int64{1}}, md.GetInputs()[4])
	assert.Equal(t, &inference.ModelMetadataResponse_TensorMetadata{Name: "chat_result", Datatype: "BYTES", Shape: []int64{-1}}, md.GetOutputs()[2])
	assert.Len(t, md.GetInputs(), 5)
	assert.Len(t, md.GetOutputs(), 3)
	cfg, err := e.client.ModelConfig(ctx, &inference.ModelConfigRequest{Name: "granite"})
	require.NoError(t, err)
	assert.Empty(t, cmpProto(&inference.ModelInput{Name: "chat_template_kwargs", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}, Optional: true}, cfg.GetConfig().GetInput()[4]))
	assert.Empty(t, cmpProto(&inference.ModelOutput{Name: "chat_result", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}}, cfg.GetConfig().GetOutput()[2]))

	md, err = e.client.ModelMetadata(ctx, &inference.ModelMetadataRequest{Name: "plain"})
	require.NoError(t, err)
	assert.Len(t, md.GetInputs(), 4, "no chat_template_kwargs")
	assert.Len(t, md.GetOutputs(), 2, "no chat_result")
}

// TestChatResultInfer: ModelInfer on a processor model sends chat (the upstream, of no declared
// kind, gets Granite's prompt at /v1/completions), with chat_template_kwargs; text_output is the
// answer's content and chat_result its reasoning split off. chat_result comes with all outputs or
// by name, and not when only text_output is asked for.
func TestChatResultInfer(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "granite", "granite32", "plain")
	up.SetReply(thought)
	e := startGranite(t, up)
	ctx := context.Background()

	resp, err := e.client.ModelInfer(ctx, withKwargs(llm{model: "granite", prompt: "What is 6 times 7?", sampling: `{"max_tokens":64}`}.request(), `{"thinking":true}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"It is 42."}, strs(t, resp, "text_output"))
	assert.Equal(t, []string{"stop"}, strs(t, resp, "finish_reason"))
	r, raw := chatResult(t, resp)
	assert.Equal(t, `{"role":"assistant","content":"It is 42.","reasoning_content":"Six sevens."}`, raw)
	assert.Equal(t, "assistant", r.Role)
	var sent struct {
		Prompt    string
		MaxTokens int `json:"max_tokens"`
	}
	require.NoError(t, json.Unmarshal(up.LastBody(), &sent))
	assert.Contains(t, sent.Prompt, "You are a helpful AI assistant.\nRespond to every user query in a comprehensive and detailed way. You can write down your thoughts and reasoning process before responding.", "thinking reached the prompt")
	assert.True(t, strings.HasSuffix(sent.Prompt, "<|start_of_role|>user<|end_of_role|>What is 6 times 7?<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>"), sent.Prompt)
	assert.Equal(t, 64, sent.MaxTokens, "sampling_parameters still apply")

	for _, tc := range []struct {
		outputs []string
		want    []string
	}{
		{[]string{"text_output"}, []string{"text_output"}},
		{[]string{"chat_result"}, []string{"chat_result"}},
		{[]string{"chat_result", "text_output"}, []string{"chat_result", "text_output"}},
	} {
		req := withKwargs(llm{model: "granite", prompt: "q"}.request(), `{"thinking":true}`)
		for _, o := range tc.outputs {
			req.Outputs = append(req.Outputs, &inference.ModelInferRequest_InferRequestedOutputTensor{Name: o})
		}
		resp, err := e.client.ModelInfer(ctx, req)
		require.NoError(t, err, tc.outputs)
		var got []string
		for _, o := range resp.GetOutputs() {
			got = append(got, o.GetName())
		}
		assert.Equal(t, tc.want, got)
	}

	// Without kwargs (thinking off) the text is not split; a model without a processor is as before.
	resp, err = e.client.ModelInfer(ctx, llm{model: "granite", prompt: "q"}.request())
	require.NoError(t, err)
	r, _ = chatResult(t, resp)
	assert.Nil(t, r.ReasoningContent)
	resp, err = e.client.ModelInfer(ctx, llm{model: "plain", prompt: "q"}.request())
	require.NoError(t, err)
	assert.Len(t, resp.GetOutputs(), 2)
	assert.JSONEq(t, `{"model":"plain","prompt":"q","stream":false}`, string(up.LastBody()))
}

// TestChatResultCitations: documents and controls in chat_template_kwargs reach the prompt;
// chat_result has the citations with their offsets in the content, and the cited documents.
func TestChatResultCitations(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "granite", "granite32", "plain")
	up.SetReply(golden(t, "test_output_with_citation_from_source.txt"))
	e := startGranite(t, up)
	src := golden(t, "test_document_source.txt")
	kw, _ := json.Marshal(map[string]any{"documents": []any{map[string]any{"doc_id": 1, "text": src}}, "controls": map[string]any{"citations": true}})
	resp, err := e.client.ModelInfer(context.Background(), withKwargs(llm{model: "granite", prompt: "Tell me about Limerick."}.request(), string(kw)))
	require.NoError(t, err)
	var sent map[string]any
	require.NoError(t, json.Unmarshal(up.LastBody(), &sent))
	assert.Contains(t, sent["prompt"], `<|start_of_role|>document {"document_id": "1"}<|end_of_role|>`)
	assert.Equal(t, false, sent["skip_special_tokens"])
	r, _ := chatResult(t, resp)
	require.NotNil(t, r.Content)
	assert.Equal(t, []string{*r.Content}, strs(t, resp, "text_output"))
	require.Len(t, r.Citations, 1)
	c := r.Citations[0]
	assert.Equal(t, "1", c.DocID)
	assert.Equal(t, 124, c.ResponseBegin)
	assert.Equal(t, 709, c.ResponseEnd)
	// Offsets count characters (code points), as granite-io's Python does.
	assert.True(t, strings.HasPrefix(string([]rune(*r.Content)[c.ResponseBegin:]), c.ResponseText), "response_begin is an offset into content")
	assert.Equal(t, c.ContextText, string([]rune(src)[c.ContextBegin:c.ContextEnd]), "context offsets into the document")
	require.Len(t, r.Documents, 1)
	assert.Equal(t, src, r.Documents[0].Text)
	assert.Empty(t, r.ParseError)
}

// TestChatResultToolsAndErrors: tools (in sampling_parameters, a top-level chat member) come back
// as tool_calls with JSON-string arguments and no content; output the parser cannot read is the
// content with parse_error; what Granite refuses, or a bad chat_template_kwargs, is
// INVALID_ARGUMENT before any upstream call.
func TestChatResultToolsAndErrors(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "granite", "granite32", "plain")
	up.SetReply(`<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]`)
	e := startGranite(t, up)
	ctx := context.Background()
	tools := `{"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
	resp, err := e.client.ModelInfer(ctx, llm{model: "granite", prompt: "Weather in Paris?", sampling: tools}.request())
	require.NoError(t, err)
	assert.Equal(t, []string{"tool_calls"}, strs(t, resp, "finish_reason"))
	r, _ := chatResult(t, resp)
	assert.Nil(t, r.Content)
	require.Len(t, r.ToolCalls, 1)
	assert.Equal(t, "get_weather", r.ToolCalls[0].Function.Name)
	assert.JSONEq(t, `{"city":"Paris"}`, r.ToolCalls[0].Function.Arguments)
	assert.Equal(t, "function", r.ToolCalls[0].Type)
	assert.NotEmpty(t, r.ToolCalls[0].ID)

	bad := "A.\n# Citations:\n<co>1</co> Document 0: \"x\"\n# Citations:\n"
	up.SetReply(bad)
	resp, err = e.client.ModelInfer(ctx, llm{model: "granite32", prompt: "q"}.request())
	require.NoError(t, err)
	r, _ = chatResult(t, resp)
	assert.Equal(t, bad, *r.Content)
	assert.Equal(t, "failed to parse citations, documents and hallucinations from model output", r.ParseError,
		"once: from the message, not again from the stage's header")

	before := up.Requests()
	_, err = e.client.ModelInfer(ctx, withKwargs(llm{model: "granite", prompt: "q", sampling: tools}.request(), `{"thinking":true}`))
	requireCode(t, err, codes.InvalidArgument, "thinking")
	_, err = e.client.ModelInfer(ctx, withKwargs(llm{model: "granite", prompt: "q"}.request(), `["thinking"]`))
	requireCode(t, err, codes.InvalidArgument, "chat_template_kwargs must be a JSON object")
	_, err = e.client.ModelInfer(ctx, withKwargs(llm{model: "plain", prompt: "q"}.request(), `{}`))
	requireCode(t, err, codes.InvalidArgument, "unexpected inference input 'chat_template_kwargs' for model 'plain'")
	assert.Equal(t, before, up.Requests(), "nothing reached the upstream")
}

// TestChatResultStream: ModelStreamInfer sends the content as it is parsed, chat_result ""
// until the final response, which carries the whole message as JSON; REST generate and
// generate_stream carry it too.
func TestChatResultStream(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "granite", "granite32", "plain")
	up.SetReply(thought)
	up.SetStream(6, 0)
	e := startGranite(t, up)

	out, err := e.streamAll(t, nil, withKwargs(llm{model: "granite", prompt: "6*7?", stream: "stream"}.request(), `{"thinking":true}`))
	require.NoError(t, err)
	require.Greater(t, len(out), 2)
	var text strings.Builder
	for i, m := range out {
		resp := m.GetInferResponse()
		require.Empty(t, m.GetErrorMessage())
		text.WriteString(strs(t, resp, "text_output")[0])
		if i < len(out)-1 {
			assert.Equal(t, []string{""}, strs(t, resp, "chat_result"), "response %d", i)
			assert.False(t, isFinal(resp))
		}
	}
	last := out[len(out)-1].GetInferResponse()
	assert.True(t, isFinal(last))
	assert.Equal(t, []string{"stop"}, strs(t, last, "finish_reason"))
	_, raw := chatResult(t, last)
	assert.Equal(t, `{"role":"assistant","content":"It is 42.","reasoning_content":"Six sevens."}`, raw)
	assert.Equal(t, "It is 42.", text.String())

	// Only text_output asked for: no chat_result in any response.
	req := withKwargs(llm{model: "granite", prompt: "6*7?", stream: "stream"}.request(), `{"thinking":true}`)
	req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "text_output"}}
	out, err = e.streamAll(t, nil, req)
	require.NoError(t, err)
	for _, m := range out {
		require.Len(t, m.GetInferResponse().GetOutputs(), 1)
	}

	// Only chat_result asked for: every response has it, "" until the last.
	req = withKwargs(llm{model: "granite", prompt: "6*7?", stream: "stream"}.request(), `{"thinking":true}`)
	req.Outputs = []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "chat_result"}}
	out, err = e.streamAll(t, nil, req)
	require.NoError(t, err)
	for _, m := range out {
		require.Empty(t, m.GetErrorMessage())
		require.Len(t, m.GetInferResponse().GetOutputs(), 1)
	}
	_, raw = chatResult(t, out[len(out)-1].GetInferResponse())
	assert.Equal(t, `{"role":"assistant","content":"It is 42.","reasoning_content":"Six sevens."}`, raw)

	// Output the parser cannot read: parse_error in the final response.
	bad := "A.\n# Citations:\n<co>1</co> Document 0: \"x\"\n# Citations:\n"
	up.SetReply(bad)
	out, err = e.streamAll(t, nil, llm{model: "granite32", prompt: "q", stream: "stream"}.request())
	require.NoError(t, err)
	r, _ := chatResult(t, out[len(out)-1].GetInferResponse())
	assert.Equal(t, bad, *r.Content)
	assert.NotEmpty(t, r.ParseError)

	// Tool calls streamed: whole in the final response.
	up.SetReply(`<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]`)
	out, err = e.streamAll(t, nil, llm{model: "granite", prompt: "Weather?", stream: "stream",
		sampling: `{"tools":[{"type":"function","function":{"name":"get_weather"}}]}`}.request())
	require.NoError(t, err)
	r, _ = chatResult(t, out[len(out)-1].GetInferResponse())
	require.Len(t, r.ToolCalls, 1)
	assert.JSONEq(t, `{"city":"Paris"}`, r.ToolCalls[0].Function.Arguments)
	assert.Nil(t, r.Content)

	up.SetReply(thought)
	code, body := e.post(t, "/v2/models/granite/generate", `{"text_input":"6*7?","chat_template_kwargs":"{\"thinking\":true}"}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.JSONEq(t, `{"model_name":"granite","model_version":"1","text_output":"It is 42.","finish_reason":"stop",
		"chat_result":"{\"role\":\"assistant\",\"content\":\"It is 42.\",\"reasoning_content\":\"Six sevens.\"}"}`, body)
	code, body = e.post(t, "/v2/models/granite/generate_stream", `{"text_input":"6*7?","stream":true,"chat_template_kwargs":"{\"thinking\":true}"}`)
	require.Equal(t, http.StatusOK, code, body)
	events := sse(body)
	require.NotEmpty(t, events)
	assert.Contains(t, events[len(events)-1], `"chat_result":"{\"role\":\"assistant\",\"content\":\"It is 42.\",\"reasoning_content\":\"Six sevens.\"}"`)
	assert.Contains(t, events[0], `"chat_result":""`)
}
