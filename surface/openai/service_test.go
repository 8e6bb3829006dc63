package openai_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// rpcClient is one real OpenAIService peer: grpc-go, or connect-go speaking gRPC, gRPC-Web or
// Connect (binary or JSON).
type rpcClient struct {
	name string
	c    openaiv1connect.OpenAIServiceClient
	g    openaiv1.OpenAIServiceClient
}

func rpcClients(t *testing.T, e *env) []rpcClient {
	t.Helper()
	conn, err := grpc.NewClient(e.srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	cc := func(h *http.Client, opts ...connect.ClientOption) openaiv1connect.OpenAIServiceClient {
		return openaiv1connect.NewOpenAIServiceClient(h, e.URL, opts...)
	}
	// Each HTTP/2 client gets its own connection: the gateway pins a cleartext HTTP/2 connection
	// to the protocol family of its first request.
	return []rpcClient{
		{name: "grpc-go", g: openaiv1.NewOpenAIServiceClient(conn)},
		{name: "connect-grpc", c: cc(gatewaytest.H2CClient(), connect.WithGRPC())},
		{name: "connect-grpcweb", c: cc(gatewaytest.H2CClient(), connect.WithGRPCWeb())},
		{name: "connect", c: cc(http.DefaultClient)},
		{name: "connect-json", c: cc(http.DefaultClient, connect.WithProtoJSON())},
	}
}

func (c rpcClient) listModels(ctx context.Context) (*openaiv1.ListModelsResponse, error) {
	if c.g != nil {
		return c.g.ListModels(ctx, &openaiv1.ListModelsRequest{})
	}
	return c.c.ListModels(ctx, &openaiv1.ListModelsRequest{})
}

func (c rpcClient) chat(ctx context.Context, r *openaiv1.CreateChatCompletionRequest) (*openaiv1.CreateChatCompletionResponse, error) {
	if c.g != nil {
		return c.g.CreateChatCompletion(ctx, r)
	}
	return c.c.CreateChatCompletion(ctx, r)
}

func (c rpcClient) completion(ctx context.Context, r *openaiv1.CreateCompletionRequest) (*openaiv1.CreateCompletionResponse, error) {
	if c.g != nil {
		return c.g.CreateCompletion(ctx, r)
	}
	return c.c.CreateCompletion(ctx, r)
}

func (c rpcClient) embedding(ctx context.Context, r *openaiv1.CreateEmbeddingRequest) (*openaiv1.CreateEmbeddingResponse, error) {
	if c.g != nil {
		return c.g.CreateEmbedding(ctx, r)
	}
	return c.c.CreateEmbedding(ctx, r)
}

// recv reads one message of a server stream: io.EOF at a clean end.
type recv[T any] func() (*T, error)

func connectRecv[T any](s *connect.ServerStreamForClient[T], err error) recv[T] {
	return func() (*T, error) {
		if err != nil {
			return nil, err
		}
		if s.Receive() {
			return s.Msg(), nil
		}
		if err := s.Err(); err != nil {
			return nil, err
		}
		return nil, io.EOF
	}
}

func grpcRecv[T any](s grpc.ServerStreamingClient[T], err error) recv[T] {
	return func() (*T, error) {
		if err != nil {
			return nil, err
		}
		return s.Recv()
	}
}

func (c rpcClient) openChat(ctx context.Context, r *openaiv1.CreateChatCompletionRequest) recv[openaiv1.StreamChatCompletionResponse] {
	req := &openaiv1.StreamChatCompletionRequest{Request: r}
	if c.g != nil {
		return grpcRecv(c.g.StreamChatCompletion(ctx, req))
	}
	return connectRecv(c.c.StreamChatCompletion(ctx, req))
}

func (c rpcClient) openCompletion(ctx context.Context, r *openaiv1.CreateCompletionRequest) recv[openaiv1.StreamCompletionResponse] {
	req := &openaiv1.StreamCompletionRequest{Request: r}
	if c.g != nil {
		return grpcRecv(c.g.StreamCompletion(ctx, req))
	}
	return connectRecv(c.c.StreamCompletion(ctx, req))
}

// all reads a stream to its end: the messages received, and the error that ended it (nil for a
// clean end).
func all[T any](next recv[T]) ([]*T, error) {
	var out []*T
	for {
		m, err := next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

func codeOf(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	return connect.Code(status.Code(err))
}

func messageOf(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return status.Convert(err).Message()
}

// detailOf is the OpenAI error object an error carries.
func detailOf(t *testing.T, err error) *openaiv1.Error {
	t.Helper()
	var details []any
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			v, derr := d.Value()
			require.NoError(t, derr)
			details = append(details, v)
		}
	} else {
		details = status.Convert(err).Details()
	}
	for _, d := range details {
		if e, ok := d.(*openaiv1.Error); ok {
			return e
		}
	}
	t.Fatalf("no openai error detail in %v", err)
	return nil
}

func requireStatus(t *testing.T, err error, code connect.Code, msg string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code.String(), codeOf(err).String(), "code of %v", err)
	require.Equal(t, msg, messageOf(err))
}

func hi(model string) *openaiv1.CreateChatCompletionRequest {
	return &openaiv1.CreateChatCompletionRequest{Model: model,
		Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("hi")}}}
}

// TestServiceClients: every kind of client gets OpenAI's models, completions, streams and
// embeddings through OpenAIService, and the upstream receives OpenAI's JSON.
func TestServiceClients(t *testing.T) {
	a := openaitest.Start(t, "a", "llama", "e5")
	a.SetStream(3, 0)
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	ctx := context.Background()
	for _, c := range rpcClients(t, e) {
		t.Run(c.name, func(t *testing.T) {
			models, err := c.listModels(ctx)
			require.NoError(t, err)
			assert.Equal(t, "list", models.GetObject())
			require.Len(t, models.GetData(), 2)
			assert.True(t, proto.Equal(&openaiv1.Model{Id: "e5", Object: "model", Created: 1700000000, OwnedBy: "vllm",
				Root: "e5", MaxModelLen: proto.Int64(4096)}, models.GetData()[0]), "%v", models.GetData()[0])
			assert.Equal(t, "llama", models.GetData()[1].GetId())

			req := hi("llama")
			req.Temperature = proto.Float64(0) // 0 is greedy decoding, not "unset"
			res, err := c.chat(ctx, req)
			require.NoError(t, err)
			assert.Equal(t, `{"model":"llama","messages":[{"role":"user","content":"hi"}],"temperature":0}`, string(a.LastBody()))
			assert.Equal(t, "chatcmpl-a", res.GetId())
			assert.Equal(t, "chat.completion", res.GetObject())
			assert.Equal(t, int64(1700000000), res.GetCreated())
			require.Len(t, res.GetChoices(), 1)
			assert.Equal(t, "Hello from a", res.GetChoices()[0].GetMessage().GetContent())
			assert.Equal(t, "assistant", res.GetChoices()[0].GetMessage().GetRole())
			assert.Equal(t, "stop", res.GetChoices()[0].GetFinishReason())
			assert.Nil(t, res.GetChoices()[0].GetLogprobs(), "null in the JSON")
			assert.True(t, proto.Equal(&openaiv1.Usage{PromptTokens: 7, CompletionTokens: 4, TotalTokens: 11}, res.GetUsage()))

			req.StreamOptions = &openaiv1.StreamOptions{IncludeUsage: true}
			chunks, err := all(c.openChat(ctx, req))
			require.NoError(t, err)
			assert.Equal(t, `{"model":"llama","stream":true,"messages":[{"role":"user","content":"hi"}],"temperature":0,"stream_options":{"include_usage":true}}`, string(a.LastBody()))
			require.Len(t, chunks, 5, "3 content chunks, the finish chunk and the usage chunk")
			var text strings.Builder
			for _, ch := range chunks[:4] {
				require.Len(t, ch.GetChoices(), 1)
				text.WriteString(ch.GetChoices()[0].GetDelta().GetContent())
			}
			assert.Equal(t, "tok0 tok1 tok2 ", text.String())
			assert.Equal(t, "chat.completion.chunk", chunks[0].GetObject())
			assert.Empty(t, chunks[2].GetChoices()[0].GetFinishReason())
			assert.Equal(t, "stop", chunks[3].GetChoices()[0].GetFinishReason())
			assert.Empty(t, chunks[4].GetChoices())
			assert.Equal(t, int32(3), chunks[4].GetUsage().GetCompletionTokens())

			comp, err := c.completion(ctx, &openaiv1.CreateCompletionRequest{Model: "llama", Prompt: []string{"hi"}, MaxTokens: proto.Int32(5)})
			require.NoError(t, err)
			assert.Equal(t, `{"model":"llama","prompt":"hi","max_tokens":5}`, string(a.LastBody()))
			assert.Equal(t, "Hello from a", comp.GetChoices()[0].GetText())
			assert.Equal(t, "text_completion", comp.GetObject())
			assert.Equal(t, int32(11), comp.GetUsage().GetTotalTokens())

			parts, err := all(c.openCompletion(ctx, &openaiv1.CreateCompletionRequest{Model: "llama",
				PromptTokenIds: []*openaiv1.TokenIds{{Ids: []int32{1, 2}}, {Ids: []int32{3}}}}))
			require.NoError(t, err)
			assert.Equal(t, `{"model":"llama","stream":true,"prompt":[[1,2],[3]]}`, string(a.LastBody()))
			require.Len(t, parts, 4)
			text.Reset()
			for _, p := range parts {
				text.WriteString(p.GetChoices()[0].GetText())
			}
			assert.Equal(t, "tok0 tok1 tok2 ", text.String())
			assert.Equal(t, "stop", parts[3].GetChoices()[0].GetFinishReason())

			emb, err := c.embedding(ctx, &openaiv1.CreateEmbeddingRequest{Model: "e5", Input: []string{"a", "b"}, Dimensions: proto.Int32(3)})
			require.NoError(t, err)
			assert.Equal(t, `{"model":"e5","input":["a","b"],"encoding_format":"float","dimensions":3}`, string(a.LastBody()))
			require.Len(t, emb.GetData(), 1)
			assert.Equal(t, []float32{0.25, -0.5, 1}, emb.GetData()[0].GetEmbedding())
			assert.Equal(t, "e5", emb.GetModel())
			assert.Equal(t, int32(3), emb.GetUsage().GetPromptTokens())
		})
	}
}

// TestServiceRequestBody: every typed field and the extra keys reach the upstream as OpenAI's
// JSON, byte for byte; extra keys come last, sorted, with vLLM's parameters passed through.
func TestServiceRequestBody(t *testing.T) {
	a := openaitest.Start(t, "a", "llama", "e5")
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	c := rpcClients(t, e)[3]
	ctx := context.Background()
	mustStruct := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		require.NoError(t, err)
		return s
	}
	req := &openaiv1.CreateChatCompletionRequest{
		Model: "llama",
		Messages: []*openaiv1.ChatMessage{
			{Role: "system", Content: proto.String("Be \"brief\".\n\t\x01é😀")},
			{Role: "user", Name: "ann", ContentParts: []*openaiv1.ContentPart{
				{Part: &openaiv1.ContentPart_Text{Text: "what's this?"}},
				{Part: &openaiv1.ContentPart_ImageUrl{ImageUrl: &openaiv1.ImageUrl{Url: "data:image/png;base64,AAAA", Detail: "low"}}},
				{Part: &openaiv1.ContentPart_Other{Other: mustStruct(map[string]any{"type": "input_audio",
					"input_audio": map[string]any{"data": "UklG", "format": "wav"}})}},
			}},
			{Role: "assistant", ToolCalls: []*openaiv1.ToolCall{{Id: "call_1", Function: &openaiv1.FunctionCall{Name: "look", Arguments: `{"x":1}`}}}},
			{Role: "tool", ToolCallId: "call_1", Content: proto.String("")},
		},
		Temperature:         proto.Float64(0.7),
		TopP:                proto.Float64(1),
		N:                   proto.Int32(1),
		MaxTokens:           proto.Int32(100),
		MaxCompletionTokens: proto.Int32(64),
		Stop:                []string{"\n\n", "END"},
		PresencePenalty:     proto.Float64(-0.5),
		FrequencyPenalty:    proto.Float64(0),
		Seed:                proto.Int64(-42),
		LogitBias:           map[int32]float64{50256: -100, 7: 2.5},
		Logprobs:            proto.Bool(true),
		TopLogprobs:         proto.Int32(0),
		User:                "u1",
		Tools: []*openaiv1.Tool{{Function: &openaiv1.FunctionDefinition{Name: "look", Description: "Looks.", Strict: proto.Bool(true),
			Parameters: mustStruct(map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "integer"}}})}}},
		ToolChoice: &openaiv1.ToolChoice{Choice: &openaiv1.ToolChoice_FunctionName{FunctionName: "look"}},
		ResponseFormat: &openaiv1.ResponseFormat{Type: "json_schema", JsonSchema: &openaiv1.JsonSchema{Name: "answer",
			Schema: mustStruct(map[string]any{"type": "object", "required": []any{"a"}}), Strict: proto.Bool(false)}},
		ParallelToolCalls: proto.Bool(false),
		ReasoningEffort:   "low",
		Extra: mustStruct(map[string]any{"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": true,
			"chat_template_kwargs": map[string]any{"enable_thinking": false}, "guided_choice": []any{"yes", "no"},
			"tiny": 1e-7, "big": 1e21, "none": nil}),
	}
	_, err := c.chat(ctx, req)
	require.NoError(t, err)
	want := `{"model":"llama","messages":[` +
		`{"role":"system","content":"Be \"brief\".\n\t\u0001é😀"},` +
		`{"role":"user","content":[{"type":"text","text":"what's this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}},` +
		`{"input_audio":{"data":"UklG","format":"wav"},"type":"input_audio"}],"name":"ann"},` +
		`{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"look","arguments":"{\"x\":1}"}}]},` +
		`{"role":"tool","content":"","tool_call_id":"call_1"}],` +
		`"temperature":0.7,"top_p":1,"n":1,"max_tokens":100,"max_completion_tokens":64,"stop":["\n\n","END"],` +
		`"presence_penalty":-0.5,"frequency_penalty":0,"seed":-42,"logit_bias":{"7":2.5,"50256":-100},"logprobs":true,"top_logprobs":0,"user":"u1",` +
		`"tools":[{"type":"function","function":{"name":"look","description":"Looks.","parameters":{"properties":{"x":{"type":"integer"}},"type":"object"},"strict":true}}],` +
		`"tool_choice":{"type":"function","function":{"name":"look"}},` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"required":["a"],"type":"object"},"strict":false}},` +
		`"parallel_tool_calls":false,"reasoning_effort":"low",` +
		`"big":1e+21,"chat_template_kwargs":{"enable_thinking":false},"guided_choice":["yes","no"],"ignore_eos":true,"min_p":0.05,"none":null,"repetition_penalty":1.1,"tiny":1e-07,"top_k":20}`
	assert.Equal(t, want, string(a.LastBody()))

	_, err = all(c.openCompletion(ctx, &openaiv1.CreateCompletionRequest{Model: "llama", Prompt: []string{"a", "b"}, Echo: proto.Bool(true),
		Suffix: proto.String(""), BestOf: proto.Int32(2), Logprobs: proto.Int32(1), StreamOptions: &openaiv1.StreamOptions{ContinuousUsageStats: proto.Bool(true)},
		Extra: mustStruct(map[string]any{"top_k": -1})}))
	require.NoError(t, err)
	assert.Equal(t, `{"model":"llama","stream":true,"prompt":["a","b"],"best_of":2,"echo":true,"logprobs":1,`+
		`"stream_options":{"include_usage":false,"continuous_usage_stats":true},"suffix":"","top_k":-1}`, string(a.LastBody()))

	_, err = c.embedding(ctx, &openaiv1.CreateEmbeddingRequest{Model: "e5", InputTokenIds: []*openaiv1.TokenIds{{Ids: []int32{5, 6}}},
		EncodingFormat: "float", User: "u", Extra: mustStruct(map[string]any{"truncate_prompt_tokens": 128})})
	require.NoError(t, err)
	assert.Equal(t, `{"model":"e5","input":[5,6],"encoding_format":"float","user":"u","truncate_prompt_tokens":128}`, string(a.LastBody()))
}

// TestServiceInvalidRequests: bad requests are INVALID_ARGUMENT with a message naming the field,
// and never reach an upstream.
func TestServiceInvalidRequests(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	ctx := context.Background()
	chat := func(edit func(r *openaiv1.CreateChatCompletionRequest)) *openaiv1.CreateChatCompletionRequest {
		r := hi("llama")
		edit(r)
		return r
	}
	extra := func(k string, v *structpb.Value) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{k: v}}
	}
	cases := []struct {
		name  string
		req   *openaiv1.CreateChatCompletionRequest
		param string
		msg   string
	}{
		{"no model", chat(func(r *openaiv1.CreateChatCompletionRequest) { r.Model = "" }), "model", "you must provide a model parameter"},
		{"no messages", chat(func(r *openaiv1.CreateChatCompletionRequest) { r.Messages = nil }), "messages", "messages must contain at least one message"},
		{"no role", chat(func(r *openaiv1.CreateChatCompletionRequest) {
			r.Messages = append(r.Messages, &openaiv1.ChatMessage{Content: proto.String("x")})
		}), "messages", "messages[1].role is required"},
		{"two contents", chat(func(r *openaiv1.CreateChatCompletionRequest) {
			r.Messages[0].ContentParts = []*openaiv1.ContentPart{{Part: &openaiv1.ContentPart_Text{Text: "x"}}}
		}), "messages", "messages[0] sets both content and content_parts; set one"},
		{"empty part", chat(func(r *openaiv1.CreateChatCompletionRequest) {
			r.Messages[0].Content = nil
			r.Messages[0].ContentParts = []*openaiv1.ContentPart{{Part: &openaiv1.ContentPart_Text{Text: "x"}}, {}}
		}), "messages", "messages[0].content_parts[1] is empty: set text, image_url or other"},
		{"n 0", chat(func(r *openaiv1.CreateChatCompletionRequest) { r.N = proto.Int32(0) }), "n", "n must be at least 1, not 0"},
		{"NaN temperature", chat(func(r *openaiv1.CreateChatCompletionRequest) { r.Temperature = proto.Float64(math.NaN()) }),
			"temperature", "temperature must be a finite number, 0 or more, not NaN"},
		{"top_p", chat(func(r *openaiv1.CreateChatCompletionRequest) { r.TopP = proto.Float64(1.5) }), "top_p", "top_p must lie between 0 and 1, not 1.5"},
		{"tool without name", chat(func(r *openaiv1.CreateChatCompletionRequest) {
			r.Tools = []*openaiv1.Tool{{Function: &openaiv1.FunctionDefinition{}}}
		}), "tools", "tools[0].function.name is required"},
		{"json_schema without schema", chat(func(r *openaiv1.CreateChatCompletionRequest) {
			r.ResponseFormat = &openaiv1.ResponseFormat{Type: "json_schema"}
		}), "response_format", "response_format.json_schema is required when type is json_schema"},
		{"stream_options on unary", chat(func(r *openaiv1.CreateChatCompletionRequest) { r.StreamOptions = &openaiv1.StreamOptions{} }),
			"stream_options", "stream_options is only allowed when streaming: call StreamChatCompletion"},
		{"extra twice", chat(func(r *openaiv1.CreateChatCompletionRequest) {
			r.Temperature = proto.Float64(1)
			r.Extra = extra("temperature", structpb.NewNumberValue(0.5))
		}), "extra", `extra sets "temperature", which a field of the request sets too; set it once`},
		{"extra stream", chat(func(r *openaiv1.CreateChatCompletionRequest) { r.Extra = extra("stream", structpb.NewBoolValue(true)) }),
			"extra", `extra must not set "stream": call the Stream RPC to stream`},
		{"extra NaN", chat(func(r *openaiv1.CreateChatCompletionRequest) {
			r.Extra = extra("min_p", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(math.Inf(1))}}))
		}), "extra.min_p", "extra.min_p holds a number JSON cannot carry (NaN or infinity)"},
	}
	// Binary protobuf clients only: JSON cannot carry the NaN cases to the server.
	for _, c := range rpcClients(t, e)[:4] {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range cases {
				_, err := c.chat(ctx, tc.req)
				requireStatus(t, err, connect.CodeInvalidArgument, tc.msg)
				d := detailOf(t, err)
				assert.Equal(t, "invalid_request_error", d.GetType(), tc.name)
				assert.Equal(t, tc.param, d.GetParam(), tc.name)
			}
			_, err := all(c.openChat(ctx, nil))
			requireStatus(t, err, connect.CodeInvalidArgument, "request is required")
			_, err = c.completion(ctx, &openaiv1.CreateCompletionRequest{Model: "llama"})
			requireStatus(t, err, connect.CodeInvalidArgument, "prompt is required (or prompt_token_ids)")
			_, err = c.completion(ctx, &openaiv1.CreateCompletionRequest{Model: "llama", Prompt: []string{"x"}, PromptTokenIds: []*openaiv1.TokenIds{{}}})
			requireStatus(t, err, connect.CodeInvalidArgument, "set prompt or prompt_token_ids, not both")
			_, err = c.embedding(ctx, &openaiv1.CreateEmbeddingRequest{Model: "llama", Input: []string{"x"}, EncodingFormat: "base64"})
			requireStatus(t, err, connect.CodeInvalidArgument, `encoding_format must be "float" (or empty), not "base64": embeddings are returned as floats`)
		})
	}
	assert.Zero(t, a.Requests(), "no invalid request reaches the upstream")
}

// TestServiceErrors: the gateway's and the upstreams' errors keep OpenAI's message and map their
// HTTP status to the matching code, on unary calls and streams alike.
func TestServiceErrors(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	ctx := context.Background()
	for _, c := range rpcClients(t, e) {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.chat(ctx, hi("nope"))
			requireStatus(t, err, connect.CodeNotFound, "The model `nope` does not exist or you do not have access to it.")
			d := detailOf(t, err)
			assert.Equal(t, "model_not_found", d.GetCode())
			assert.Equal(t, "model", d.GetParam())
			_, err = all(c.openChat(ctx, hi("nope")))
			requireStatus(t, err, connect.CodeNotFound, "The model `nope` does not exist or you do not have access to it.")

			for status, code := range map[int]connect.Code{
				400: connect.CodeInvalidArgument, 401: connect.CodeUnauthenticated, 403: connect.CodePermissionDenied,
				404: connect.CodeNotFound, 413: connect.CodeResourceExhausted, 429: connect.CodeResourceExhausted,
				500: connect.CodeInternal, 502: connect.CodeUnavailable, 503: connect.CodeUnavailable, 504: connect.CodeUnavailable,
			} {
				a.FailWith(status)
				_, err = c.chat(ctx, hi("llama"))
				requireStatus(t, err, code, "injected failure from a")
				assert.Equal(t, "BadRequestError", detailOf(t, err).GetType(), "the upstream's own error type is kept")
			}
			a.FailWith(http.StatusTooManyRequests)
			_, err = all(c.openChat(ctx, hi("llama")))
			requireStatus(t, err, connect.CodeResourceExhausted, "injected failure from a")
			assert.Equal(t, "429", detailOf(t, err).GetCode(), "vLLM's numeric code as text")
			_, err = c.embedding(ctx, &openaiv1.CreateEmbeddingRequest{Model: "llama", Input: []string{"x"}})
			requireStatus(t, err, connect.CodeResourceExhausted, "injected failure from a")
			a.FailWith(0)
		})
	}
}

// TestServiceUpstreamNotFound: the upstream's own 404 (a model it was registered for but does not
// serve) is NOT_FOUND with the upstream's message.
func TestServiceUpstreamNotFound(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	reg := openaitest.SlowChecks(a.Endpoint(0))
	reg.SkipDiscovery, reg.Models = true, []string{"ghost"}
	e := start(t, reg)
	c := rpcClients(t, e)[0]
	_, err := c.chat(context.Background(), hi("ghost"))
	requireStatus(t, err, connect.CodeNotFound, "The model `ghost` does not exist.")
	assert.Equal(t, "404", detailOf(t, err).GetCode())
}

// TestServiceStreamDies: an upstream that dies mid-stream ends the stream with UNAVAILABLE after
// the chunks it sent, never with a clean end a client could take for a complete answer.
func TestServiceStreamDies(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	a.SetStream(5, 0)
	a.DieAfter(2)
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	for _, c := range rpcClients(t, e) {
		t.Run(c.name, func(t *testing.T) {
			chunks, err := all(c.openChat(context.Background(), hi("llama")))
			require.Error(t, err, "a cut stream must not end cleanly")
			assert.Equal(t, connect.CodeUnavailable.String(), codeOf(err).String(), "%v", err)
			assert.Contains(t, messageOf(err), "upstream a failed mid-response")
			assert.Len(t, chunks, 2)
			parts, err := all(c.openCompletion(context.Background(), &openaiv1.CreateCompletionRequest{Model: "llama", Prompt: []string{"x"}}))
			assert.Equal(t, connect.CodeUnavailable.String(), codeOf(err).String(), "%v", err)
			assert.Len(t, parts, 2)
		})
	}
	a.DieAfter(0) // non-streaming: the body is cut in the middle
	_, err := rpcClients(t, e)[0].chat(context.Background(), hi("llama"))
	assert.Equal(t, connect.CodeUnavailable.String(), codeOf(err).String(), "%v", err)
}

// TestServiceCancel: a client that cancels its stream cancels the upstream request.
func TestServiceCancel(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	a.SetStream(1000, 10*time.Millisecond)
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	for _, c := range rpcClients(t, e) {
		t.Run(c.name, func(t *testing.T) {
			before := a.Canceled()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			next := c.openChat(ctx, hi("llama"))
			_, err := next()
			require.NoError(t, err)
			cancel()
			require.Eventually(t, func() bool { return a.Canceled() == before+1 }, 10*time.Second, 5*time.Millisecond)
			require.Eventually(t, func() bool { return a.InFlight() == 0 }, 10*time.Second, 5*time.Millisecond)

			// Cancelled while the upstream has not answered yet: the upstream request is cancelled
			// too, not left waiting.
			release := a.Hold()
			defer release()
			for len(a.Started()) > 0 {
				<-a.Started()
			}
			ctx, cancel = context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() {
				_, err := c.chat(ctx, hi("llama"))
				errc <- err
			}()
			select {
			case <-a.Started():
			case <-time.After(10 * time.Second):
				t.Fatal("the request did not reach the upstream")
			}
			cancel()
			require.Eventually(t, func() bool { return a.Canceled() == before+2 }, 10*time.Second, 5*time.Millisecond)
			select {
			case err := <-errc:
				assert.Equal(t, connect.CodeCanceled.String(), codeOf(err).String(), "%v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not return")
			}
			release()
		})
	}
}

// TestServiceMetadata: calls carry X-Request-Id to the upstream and name what served them in
// response headers; a finished stream counts as a 200 with its usage.
func TestServiceMetadata(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	clients := rpcClients(t, e)

	var hdr metadata.MD
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-request-id", "grpc-7")
	_, err := clients[0].g.CreateChatCompletion(ctx, hi("llama"), grpc.Header(&hdr))
	require.NoError(t, err)
	assert.Equal(t, "grpc-7", a.LastHeader().Get("X-Request-Id"))
	assert.Equal(t, []string{"grpc-7"}, hdr.Get("x-request-id"))
	assert.Equal(t, []string{"a"}, hdr.Get("x-infergate-endpoint"))

	cctx, info := connect.NewClientContext(context.Background())
	info.RequestHeader().Set("X-Request-Id", "connect-8")
	req := hi("llama")
	req.StreamOptions = &openaiv1.StreamOptions{IncludeUsage: true}
	_, err = all(clients[3].openChat(cctx, req))
	require.NoError(t, err)
	assert.Equal(t, "connect-8", a.LastHeader().Get("X-Request-Id"))
	assert.Equal(t, "a", info.ResponseHeader().Get("X-Infergate-Endpoint"))
	assert.Equal(t, "llama", info.ResponseHeader().Get("X-Infergate-Model"))

	_, m := e.Get(t, "/metrics")
	assert.Contains(t, m, `infergate_openai_requests_total{code="200",endpoint="a",model="llama"} 2`)
	assert.NotContains(t, m, `code="499"`)
	assert.Contains(t, m, `infergate_openai_tokens_total{direction="out",endpoint="a",model="llama"} 8`, "4 from the reply, 4 from the stream's usage chunk")
}

// TestServiceReflection: grpcurl finds the service through the gateway's reflection and calls it.
func TestServiceReflection(t *testing.T) {
	if testing.Short() {
		t.Skip("builds grpcurl")
	}
	a := openaitest.Start(t, "a", "llama")
	e := start(t, openaitest.SlowChecks(a.Endpoint(0)))
	_, file, _, _ := runtime.Caller(0)
	modfile := filepath.Join(filepath.Dir(file), "..", "..", "tools", "grpcurl", "go.mod")
	grpcurl := func(args ...string) string {
		out, err := exec.Command("go", append([]string{"tool", "-modfile=" + modfile, "grpcurl", "-plaintext"}, args...)...).CombinedOutput()
		require.NoError(t, err, "grpcurl %v: %s", args, out)
		return string(out)
	}
	assert.Contains(t, grpcurl(e.srv.Addr, "list"), "infergate.openai.v1.OpenAIService")
	out := grpcurl("-d", `{"model":"llama","messages":[{"role":"user","content":"hi"}],"extra":{"top_k":5}}`, e.srv.Addr,
		"infergate.openai.v1.OpenAIService/CreateChatCompletion")
	assert.Contains(t, out, `"content": "Hello from a"`)
	assert.Equal(t, `{"model":"llama","messages":[{"role":"user","content":"hi"}],"top_k":5}`, string(a.LastBody()))
}

// TestServiceRefusalHeaders: a refusal's headers (the guard's Retry-After) reach Connect clients
// as response headers and gRPC clients as trailers.
func TestServiceRefusalHeaders(t *testing.T) {
	a := openaitest.Start(t, "a", "llama")
	p, err := openai.New(openai.Options{Logger: quiet(), Endpoints: []upstream.Endpoint{openaitest.SlowChecks(a.Endpoint(0))},
		Stages: pipeline.ForAll(pipeline.Admit(func(context.Context, *pipeline.Request) (pipeline.Admitted, error) {
			return pipeline.Admitted{}, &pipeline.Error{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded",
				Message: "slow down", Header: http.Header{"Retry-After": {"7"}}}
		}))})
	require.NoError(t, err)
	p.Start(context.Background())
	defer p.Close()
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})

	cc := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, srv.URL)
	_, err = cc.CreateChatCompletion(context.Background(), hi("llama"))
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, connect.CodeResourceExhausted, ce.Code())
	assert.Equal(t, "7", ce.Meta().Get("Retry-After"))

	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	var trailer metadata.MD
	_, err = openaiv1.NewOpenAIServiceClient(conn).CreateChatCompletion(context.Background(), hi("llama"), grpc.Trailer(&trailer))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, []string{"7"}, trailer.Get("retry-after"))
}
