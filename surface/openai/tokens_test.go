package openai_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/core/pipeline"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// startTokens is start with no upstream and Options.Tokens set to tokens.
func startTokens(tb testing.TB, tokens func(ctx context.Context, path string, body []byte) (int, []byte, *pipeline.Error)) *env {
	tb.Helper()
	p, err := openai.New(openai.Options{Logger: quiet(), Tokens: tokens})
	require.NoError(tb, err)
	p.Start(context.Background())
	tb.Cleanup(p.Close)
	srv := gatewaytest.Start(tb, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	return &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}}
}

func (c rpcClient) tokenize(ctx context.Context, r *openaiv1.TokenizeRequest) (*openaiv1.TokenizeResponse, error) {
	if c.g != nil {
		return c.g.Tokenize(ctx, r)
	}
	return c.c.Tokenize(ctx, r)
}

func (c rpcClient) detokenize(ctx context.Context, r *openaiv1.DetokenizeRequest) (*openaiv1.DetokenizeResponse, error) {
	if c.g != nil {
		return c.g.Detokenize(ctx, r)
	}
	return c.c.Detokenize(ctx, r)
}

// Tokenize and Detokenize become vLLM's /tokenize and /detokenize JSON bodies, answered by
// Options.Tokens: its answer is decoded into the response, its errors and an upstream's error
// status become codes as the other RPCs' do, on every kind of client.
func TestServiceTokens(t *testing.T) {
	type call struct{ path, body string }
	var (
		mu     sync.Mutex
		calls  []call
		answer func(body string) (int, []byte, *pipeline.Error)
	)
	e := startTokens(t, func(_ context.Context, path string, body []byte) (int, []byte, *pipeline.Error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call{path, string(body)})
		return answer(string(body))
	})
	// last takes the calls made since the last take, and returns the last of them.
	last := func() call {
		mu.Lock()
		defer mu.Unlock()
		var c call
		if len(calls) > 0 {
			c = calls[len(calls)-1]
		}
		calls = nil
		return c
	}
	answers := func(f func(string) (int, []byte, *pipeline.Error)) {
		mu.Lock()
		answer = f
		mu.Unlock()
	}
	kwargs, err := structpb.NewStruct(map[string]any{"enable_thinking": false})
	require.NoError(t, err)
	ctx := context.Background()
	for _, c := range rpcClients(t, e) {
		t.Run(c.name, func(t *testing.T) {
			answers(func(string) (int, []byte, *pipeline.Error) {
				return http.StatusOK, []byte(`{"count":2,"max_model_len":null,"tokens":[9707,1879],"token_strs":["Hello","Ġworld"]}`), nil
			})
			res, err := c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "qwen", Prompt: proto.String("Hello world"), ReturnTokenStrs: true})
			require.NoError(t, err)
			assert.True(t, proto.Equal(&openaiv1.TokenizeResponse{Count: 2, Tokens: []int32{9707, 1879}, TokenStrs: []string{"Hello", "Ġworld"}}, res), "%v", res)
			assert.Equal(t, call{"/tokenize", `{"model":"qwen","prompt":"Hello world","return_token_strs":true}`}, last())

			answers(func(string) (int, []byte, *pipeline.Error) {
				return http.StatusOK, []byte(`{"count":1,"max_model_len":64,"tokens":[1]}`), nil
			})
			res, err = c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "qwen",
				Messages:             []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("hi")}},
				Tools:                []*openaiv1.Tool{{Function: &openaiv1.FunctionDefinition{Name: "look"}}},
				AddSpecialTokens:     proto.Bool(true),
				AddGenerationPrompt:  proto.Bool(false),
				ContinueFinalMessage: proto.Bool(true),
				ChatTemplateKwargs:   kwargs})
			require.NoError(t, err)
			assert.Equal(t, int32(64), res.GetMaxModelLen())
			assert.Equal(t, call{"/tokenize", `{"model":"qwen","messages":[{"role":"user","content":"hi"}],` +
				`"tools":[{"type":"function","function":{"name":"look"}}],"add_special_tokens":true,"add_generation_prompt":false,` +
				`"continue_final_message":true,"chat_template_kwargs":{"enable_thinking":false}}`}, last())

			answers(func(string) (int, []byte, *pipeline.Error) {
				return http.StatusOK, []byte(`{"prompt":"Hello world"}`), nil
			})
			dres, err := c.detokenize(ctx, &openaiv1.DetokenizeRequest{Model: "qwen", Tokens: []int32{9707, 1879}})
			require.NoError(t, err)
			assert.Equal(t, "Hello world", dres.GetPrompt())
			assert.Equal(t, call{"/detokenize", `{"model":"qwen","tokens":[9707,1879]}`}, last())

			// The gateway's own errors, and an upstream's error answer, as codes with OpenAI's
			// error object.
			answers(func(string) (int, []byte, *pipeline.Error) {
				return 0, nil, pipeline.InvalidRequest("model", "tokenizer_missing", "no tokenizer for `x`")
			})
			_, err = c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "x", Prompt: proto.String("")})
			requireStatus(t, err, connect.CodeInvalidArgument, "no tokenizer for `x`")
			assert.Equal(t, "tokenizer_missing", detailOf(t, err).GetCode())
			last()
			answers(func(string) (int, []byte, *pipeline.Error) {
				return 0, nil, pipeline.Unavailable("no_healthy_upstream", time.Second, "no healthy endpoint")
			})
			_, err = c.detokenize(ctx, &openaiv1.DetokenizeRequest{Model: "x"})
			requireStatus(t, err, connect.CodeUnavailable, "no healthy endpoint")
			last()
			answers(func(string) (int, []byte, *pipeline.Error) {
				return http.StatusNotFound, []byte(`{"object":"error","message":"The model x does not exist.","type":"NotFoundError","param":null,"code":404}`), nil
			})
			_, err = c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "x", Prompt: proto.String("")})
			requireStatus(t, err, connect.CodeNotFound, "The model x does not exist.")
			last()
			answers(func(string) (int, []byte, *pipeline.Error) { return http.StatusOK, []byte(`{"count":"many"}`), nil })
			_, err = c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "x", Prompt: proto.String("")})
			assert.Equal(t, connect.CodeInternal, codeOf(err), "%v", err)
			last()

			// Requests the conversion refuses never reach Tokens.
			_, err = c.tokenize(ctx, &openaiv1.TokenizeRequest{Prompt: proto.String("x")})
			assert.Equal(t, connect.CodeInvalidArgument, codeOf(err), "%v", err)
			_, err = c.detokenize(ctx, &openaiv1.DetokenizeRequest{})
			assert.Equal(t, connect.CodeInvalidArgument, codeOf(err), "%v", err)
			_, err = c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "x", Messages: []*openaiv1.ChatMessage{{Content: proto.String("x")}}})
			assert.Equal(t, connect.CodeInvalidArgument, codeOf(err), "%v", err)
			assert.Equal(t, call{}, last())
		})
	}
}

// Without Options.Tokens the RPCs are UNIMPLEMENTED.
func TestServiceTokensUnset(t *testing.T) {
	e := startTokens(t, nil)
	for _, c := range rpcClients(t, e)[:2] {
		_, err := c.tokenize(context.Background(), &openaiv1.TokenizeRequest{Model: "x", Prompt: proto.String("x")})
		assert.Equal(t, connect.CodeUnimplemented, codeOf(err), "%s: %v", c.name, err)
		_, err = c.detokenize(context.Background(), &openaiv1.DetokenizeRequest{Model: "x"})
		assert.Equal(t, connect.CodeUnimplemented, codeOf(err), "%s: %v", c.name, err)
	}
}
