package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/infergate/infergate/surface/openai"
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/infergate/infergate/upstream"
	oai "github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// TestStages: a model's stages see every request to it, from every surface (HTTP, the
// OpenAI SDK streaming, OpenAIService over gRPC and Connect, Call), and can answer a request
// themselves (a cache hit: no upstream request) or rewrite it before it goes upstream. A model
// without stages is forwarded as before.
func TestStages(t *testing.T) {
	up := openaitest.Start(t, "up", "llama", "qwen")
	var seen atomic.Int64
	// answer makes a canned answer for bodies holding "canned"; rewrite tags every other body
	// with a user field the upstream sees.
	answer := func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			seen.Add(1)
			if !bytes.Contains(req.Body(), []byte("canned")) {
				return next(ctx, req)
			}
			if req.Stream() {
				return &pipeline.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, Stream: true,
					Body: pipeline.NewEventBody([][]byte{
						[]byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"llama","choices":[{"index":0,"delta":{"role":"assistant","content":"from "}}]}`),
						[]byte(`{"id":"c1","object":"chat.completion.chunk","created":1,"model":"llama","choices":[{"index":0,"delta":{"content":"the stage"},"finish_reason":"stop"}]}`),
					}, pipeline.Usage{})}, nil
			}
			return &pipeline.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
				Body: pipeline.NewBody([]byte(`{"id":"c1","object":"chat.completion","created":1,"model":"llama","choices":[{"index":0,"message":{"role":"assistant","content":"from the stage"},"finish_reason":"stop"}]}`),
					pipeline.Usage{})}, nil
		}
	}
	rewrite := func(next pipeline.Handler) pipeline.Handler {
		return func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			f, err := req.Fields()
			if err != nil {
				return nil, err
			}
			f["user"] = []byte(`"tagged-by-stage"`)
			body, err := json.Marshal(f)
			if err != nil {
				return nil, err
			}
			if err := req.SetBody(body); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}
	}
	p, err := openai.New(openai.Options{Endpoints: []upstream.Endpoint{openaitest.SlowChecks(up.Endpoint(0))}, Logger: quiet(),
		Stages: func(model string) []pipeline.Interceptor {
			if model == "llama" {
				return []pipeline.Interceptor{answer, rewrite}
			}
			return nil
		}})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	e := &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}}
	ctx := context.Background()

	// HTTP, answered by the stage.
	res, body := e.Post(t, "/v1/chat/completions", `{"model":"llama","messages":[{"role":"user","content":"canned"}]}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Contains(t, body, "from the stage")
	assert.NotEmpty(t, res.Header.Get(openai.HeaderRequestID))
	assert.Empty(t, res.Header.Get(openai.HeaderEndpoint), "no endpoint answered")

	// The SDK's stream, answered by the stage.
	client := e.sdk()
	st := client.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{Model: "llama",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("canned")}})
	var text string
	for st.Next() {
		for _, c := range st.Current().Choices {
			text += c.Delta.Content
		}
	}
	require.NoError(t, st.Err())
	assert.Equal(t, "from the stage", text)
	assert.Zero(t, up.Requests(), "answered without the upstream")

	// Rewritten on the way upstream: HTTP, Call, and each RPC client.
	res, body = e.Post(t, "/v1/chat/completions", openaitest.ChatBody("llama"))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	assert.Contains(t, string(up.LastBody()), `"user":"tagged-by-stage"`)
	cr, err := p.Call(ctx, "/v1/completions", []byte(`{"model":"llama","prompt":"canned"}`))
	require.NoError(t, err)
	b, _ := io.ReadAll(cr)
	cr.Close()
	assert.Contains(t, string(b), "from the stage")
	clients := rpcClients(t, e)
	for _, c := range clients {
		out, err := c.chat(ctx, &openaiv1.CreateChatCompletionRequest{Model: "llama",
			Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("canned")}}})
		require.NoError(t, err, c.name)
		assert.Equal(t, "from the stage", out.GetChoices()[0].GetMessage().GetContent(), c.name)
	}
	assert.EqualValues(t, 4+len(clients), seen.Load())

	// A model without stages: forwarded byte for byte.
	const plain = `{"model":"qwen","messages":[{"role":"user","content":"hi"}] }`
	res, _ = e.Post(t, "/v1/chat/completions", plain)
	require.Equal(t, http.StatusOK, res.StatusCode)
	assert.Equal(t, plain, string(up.LastBody()))
	assert.EqualValues(t, 4+len(clients), seen.Load())
}

// TestStreamSendFailureReachesStages: when a streamed answer cannot reach an OpenAIService
// client (it went away after the first chunk), the stages' body is finished with that failure,
// not as a whole answer the client took: a session must not keep a turn its client never got,
// even when the stream had been read to its [DONE].
func TestStreamSendFailureReachesStages(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	stage, finished := openaitest.ClientGoneStage()
	p, err := openai.New(openai.Options{Endpoints: []upstream.Endpoint{openaitest.SlowChecks(up.Endpoint(0))}, Logger: quiet(),
		Stages: func(string) []pipeline.Interceptor { return []pipeline.Interceptor{stage} }})
	require.NoError(t, err)
	p.Start(context.Background())
	t.Cleanup(p.Close)
	srv := gatewaytest.Start(t, gateway.Config{Services: []func(*http.ServeMux, grpc.ServiceRegistrar){p.Mount}})
	g := rpcClients(t, &env{srv: srv, proxy: p, Client: openaitest.Client{URL: srv.URL}})[0]
	require.Equal(t, "grpc-go", g.name)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := g.g.StreamChatCompletion(ctx, &openaiv1.StreamChatCompletionRequest{Request: &openaiv1.CreateChatCompletionRequest{Model: "llama",
		Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("hi")}}}})
	require.NoError(t, err)
	first, err := st.Recv()
	require.NoError(t, err)
	assert.Equal(t, "Hel", first.GetChoices()[0].GetDelta().GetContent())
	cancel() // the client goes away after the first chunk; the rest, [DONE] included, is read after
	select {
	case err := <-finished:
		assert.Error(t, err, "the body is finished with the client's failure")
	case <-time.After(10 * time.Second):
		t.Fatal("the body was never finished")
	}
}
