package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// tokensClient calls Tokenize and Detokenize over one transport.
type tokensClient struct {
	name       string
	tokenize   func(context.Context, *openaiv1.TokenizeRequest) (*openaiv1.TokenizeResponse, error)
	detokenize func(context.Context, *openaiv1.DetokenizeRequest) (*openaiv1.DetokenizeResponse, error)
}

// tokensClients are a Connect client (JSON, as a browser's would be) and grpc-go.
func tokensClients(t *testing.T, addr string) []tokensClient {
	c := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, "http://"+addr, connect.WithProtoJSON())
	g := openaiv1.NewOpenAIServiceClient(dial(t, addr))
	return []tokensClient{
		{"Connect", c.Tokenize, c.Detokenize},
		{"gRPC", func(ctx context.Context, r *openaiv1.TokenizeRequest) (*openaiv1.TokenizeResponse, error) {
			return g.Tokenize(ctx, r)
		}, func(ctx context.Context, r *openaiv1.DetokenizeRequest) (*openaiv1.DetokenizeResponse, error) {
			return g.Detokenize(ctx, r)
		}},
	}
}

// rpcCode is an error's code and message, whatever client returned it.
func rpcCode(err error) (connect.Code, string) {
	var ce *connect.Error
	switch {
	case err == nil:
		return 0, ""
	case errors.As(err, &ce):
		return ce.Code(), ce.Message()
	}
	st := status.Convert(err)
	return connect.Code(st.Code()), st.Message()
}

// postJSON posts body to the gateway and returns the status and the answer.
func postJSON(t *testing.T, addr, path, body string) (int, string) {
	t.Helper()
	res, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

// errorOf is the message and code of an OpenAI error object.
func errorOf(t *testing.T, body string) (msg, code string) {
	t.Helper()
	var e struct {
		Error struct{ Message, Code string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e.Error.Message, e.Error.Code
}

// TestTokenizeRPC: OpenAIService's Tokenize and Detokenize answer what POST /tokenize and
// /detokenize answer, over Connect and gRPC: the same tokens for a model with a tokenizer, with
// every form and flag, and the same errors, as INVALID_ARGUMENT.
func TestTokenizeRPC(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "vllm", "qwen")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: vllm, url: %s, type: vllm, check_interval: 1h}
models:
  qwen: {tokenizer: %s, max_model_len: 64}
`, up.URL, qwenTokenizer(t)), "qwen")
	ctx := context.Background()
	kwargs := `{"enable_thinking":false}`
	cases := []string{
		`{"model":"qwen","prompt":"Hello world"}`,
		`{"model":"qwen","prompt":"Hello world<|im_end|>","return_token_strs":true}`,
		`{"model":"qwen","prompt":"Hello","add_special_tokens":false}`,
		`{"model":"qwen","prompt":""}`,
		`{"model":"qwen","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"qwen","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi <|im_end|>"}],"add_generation_prompt":false,"return_token_strs":true}`,
		`{"model":"qwen","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":` + kwargs + `,"add_special_tokens":true}`,
		// A Struct's keys have no order, so the RPC sends them sorted; the template prints the
		// tools' JSON as given, so the HTTP body has them sorted too.
		`{"model":"qwen","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"weather","description":"Says the weather.","parameters":{"properties":{"city":{"type":"string"}},"type":"object"}}}]}`,
	}
	for _, c := range tokensClients(t, addr) {
		t.Run(c.name, func(t *testing.T) {
			for _, body := range cases {
				code, answer := postJSON(t, addr, "/tokenize", body)
				require.Equal(t, http.StatusOK, code, answer)
				want := new(openaiv1.TokenizeResponse)
				require.NoError(t, protojson.Unmarshal([]byte(answer), want), answer)
				require.Len(t, want.GetTokens(), int(want.GetCount()), answer)

				req := new(openaiv1.TokenizeRequest)
				require.NoError(t, protojson.Unmarshal([]byte(body), req), body)
				got, err := c.tokenize(ctx, req)
				require.NoError(t, err, body)
				assert.True(t, proto.Equal(want, got), "%s\nHTTP: %v\nRPC:  %v", body, want, got)
			}

			res, err := c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "qwen", Prompt: proto.String("Hello world, again")})
			require.NoError(t, err)
			assert.Equal(t, int32(64), res.GetMaxModelLen())
			back, err := c.detokenize(ctx, &openaiv1.DetokenizeRequest{Model: "qwen", Tokens: res.GetTokens()})
			require.NoError(t, err)
			assert.Equal(t, "Hello world, again", back.GetPrompt(), "detokenize undoes tokenize")

			// The errors of bad requests are HTTP's, as INVALID_ARGUMENT.
			for _, tc := range []struct {
				path, body string
				rpc        func() error
			}{
				{"/tokenize", `{"model":"qwen","prompt":"x","messages":[{"role":"user","content":"x"}]}`, func() error {
					_, err := c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "qwen", Prompt: proto.String("x"),
						Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("x")}}})
					return err
				}},
				{"/tokenize", `{"model":"qwen","messages":[{"role":"user","content":"x"}],"continue_final_message":true}`, func() error {
					_, err := c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "qwen", ContinueFinalMessage: proto.Bool(true),
						Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("x")}}})
					return err
				}},
				{"/tokenize", `{"model":"qwen"}`, func() error {
					_, err := c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "qwen"})
					return err
				}},
				{"/tokenize", `{"model":"llama","prompt":"x"}`, func() error {
					_, err := c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "llama", Prompt: proto.String("x")})
					return err
				}},
				{"/detokenize", `{"model":"qwen","tokens":[9707,-1]}`, func() error {
					_, err := c.detokenize(ctx, &openaiv1.DetokenizeRequest{Model: "qwen", Tokens: []int32{9707, -1}})
					return err
				}},
				{"/detokenize", `{"model":"qwen","tokens":[99999999]}`, func() error {
					_, err := c.detokenize(ctx, &openaiv1.DetokenizeRequest{Model: "qwen", Tokens: []int32{99999999}})
					return err
				}},
			} {
				status, answer := postJSON(t, addr, tc.path, tc.body)
				require.Equal(t, http.StatusBadRequest, status, answer)
				msg, _ := errorOf(t, answer)
				code, rpcMsg := rpcCode(tc.rpc())
				assert.Equal(t, connect.CodeInvalidArgument, code, tc.body)
				assert.Equal(t, msg, rpcMsg, tc.body)
			}
			_, rpcMsg := rpcCode(func() error {
				_, err := c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "llama", Prompt: proto.String("x")})
				return err
			}())
			assert.Contains(t, rpcMsg, "models.llama.tokenizer", "names the setting to add")
		})
	}
	assert.Zero(t, up.Tokenizes(), "a model with a tokenizer is never forwarded")
}

// TestTokenizeForward: a model without a tokenizer whose upstream is vLLM is tokenized by that
// upstream, under its name for the model, over HTTP and RPC alike (its answers, errors included,
// pass through); a model of another upstream type still gets the 400 naming the setting to add,
// and its upstream is never asked.
func TestTokenizeForward(t *testing.T) {
	vllm := openaitest.Start(t, "vllm", "raw")
	oa := openaitest.Start(t, "oa", "gpt")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: vllm, url: %s, type: vllm, check_interval: 1h, aliases: {pub: raw}}
  - {name: oa, url: %s, type: openai, check_interval: 1h}
`, vllm.URL, oa.URL), "pub")
	ctx := context.Background()

	status, answer := postJSON(t, addr, "/tokenize", `{"model":"pub","prompt":"hi","return_token_strs":true}`)
	require.Equal(t, http.StatusOK, status, answer)
	assert.JSONEq(t, `{"count":2,"max_model_len":4096,"tokens":[104,105],"token_strs":["h","i"]}`, answer, "vLLM's own answer")
	assert.JSONEq(t, `{"model":"raw","prompt":"hi","return_token_strs":true}`, string(vllm.LastBody()), "the upstream's name for the model")
	status, answer = postJSON(t, addr, "/detokenize", `{"model":"pub","tokens":[104,105]}`)
	require.Equal(t, http.StatusOK, status, answer)
	assert.JSONEq(t, `{"prompt":"hi"}`, answer)
	// vLLM's error answer passes through: its status and body.
	status, answer = postJSON(t, addr, "/detokenize", `{"model":"pub","tokens":[1000]}`)
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, answer, `"message":"token id 1000 out of vocabulary"`)

	for _, c := range tokensClients(t, addr) {
		before := vllm.Tokenizes()
		res, err := c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "pub", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("hey")}}})
		require.NoError(t, err, c.name)
		assert.Equal(t, []int32{104, 101, 121}, res.GetTokens(), c.name)
		assert.Equal(t, int32(4096), res.GetMaxModelLen(), c.name)
		assert.JSONEq(t, `{"model":"raw","messages":[{"role":"user","content":"hey"}]}`, string(vllm.LastBody()), c.name)
		back, err := c.detokenize(ctx, &openaiv1.DetokenizeRequest{Model: "pub", Tokens: res.GetTokens()})
		require.NoError(t, err, c.name)
		assert.Equal(t, "hey", back.GetPrompt(), c.name)
		_, err = c.detokenize(ctx, &openaiv1.DetokenizeRequest{Model: "pub", Tokens: []int32{1000}})
		code, msg := rpcCode(err)
		assert.Equal(t, connect.CodeInvalidArgument, code, c.name)
		assert.Equal(t, "token id 1000 out of vocabulary", msg, c.name)
		assert.EqualValues(t, 3, vllm.Tokenizes()-before, c.name)

		_, err = c.tokenize(ctx, &openaiv1.TokenizeRequest{Model: "gpt", Prompt: proto.String("hi")})
		code, msg = rpcCode(err)
		assert.Equal(t, connect.CodeInvalidArgument, code, c.name)
		assert.Contains(t, msg, "models.gpt.tokenizer", c.name)
	}

	status, answer = postJSON(t, addr, "/tokenize", `{"model":"gpt","prompt":"hi"}`)
	assert.Equal(t, http.StatusBadRequest, status)
	msg, code := errorOf(t, answer)
	assert.Equal(t, "tokenizer_missing", code)
	assert.Contains(t, msg, "models.gpt.tokenizer")
	assert.Zero(t, oa.Tokenizes(), "an openai upstream is never asked")
}
