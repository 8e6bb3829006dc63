package main

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"github.com/infergate/infergate/internal/logtest"
	"github.com/infergate/infergate/surface/openai/openaitest"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// The example's stage logs every request, from the OpenAI SDK (plain and streaming) and from a
// Connect client alike, with its status, endpoint and usage; and a request for a model nothing
// serves, which the gateway answers itself.
func TestRequestLog(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	var sink logtest.Sink
	gw, p, err := newGateway(up.URL, sink.JSON())
	require.NoError(t, err)
	p.Start(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
		<-done
		p.Close()
	})
	base := "http://" + ln.Addr().String()
	ctx := context.Background()

	sdk := oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	_, err = sdk.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "llama",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	require.NoError(t, err)
	st := sdk.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{Model: "llama",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	for st.Next() {
	}
	require.NoError(t, st.Err())
	_, err = openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, base).CreateChatCompletion(ctx,
		&openaiv1.CreateChatCompletionRequest{Model: "llama", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("hi")}}})
	require.NoError(t, err)
	_, err = sdk.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "nope",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
	require.Error(t, err)

	var lines []map[string]any
	require.Eventually(t, func() bool {
		lines = nil
		for _, r := range sink.Records(t) {
			if r["msg"] == "llm request" {
				lines = append(lines, r)
			}
		}
		return len(lines) == 3 // the unknown model is answered before any stage
	}, 5*time.Second, 10*time.Millisecond)
	for _, l := range lines {
		assert.Equal(t, "llama", l["model"])
		assert.Equal(t, "/v1/chat/completions", l["path"])
		assert.EqualValues(t, 200, l["status"])
		assert.Equal(t, "upstream", l["endpoint"])
		assert.NotEmpty(t, l["id"])
	}
	assert.EqualValues(t, 7, lines[0]["prompt_tokens"], "the upstream's usage")
	assert.EqualValues(t, 4, lines[0]["completion_tokens"])
	// The stream's line is written when its body is finished, which may come after the next
	// request's: it is found by what it holds, not by its place.
	streams := 0
	for _, l := range lines[1:] {
		if l["chunks"] != nil {
			streams++
		}
	}
	assert.Equal(t, 1, streams, "a stream without a usage chunk counts its events")
}
