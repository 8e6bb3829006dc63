package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The example's processor answers a chat request with the majority of five samples the fake
// upstream gave in one /v1/completions call, through the gateway, to the official OpenAI SDK;
// its alias resolves to the same entry, and granite-io's own names are still there.
func TestGraniteProc(t *testing.T) {
	t.Parallel()
	fake := &fakeUpstream{}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	upSrv := &http.Server{Handler: fake}
	go func() { _ = upSrv.Serve(upLn) }()
	t.Cleanup(func() { _ = upSrv.Close() })

	gw, p, err := newGateway("http://"+upLn.Addr().String(), slog.New(slog.DiscardHandler))
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

	sdk := oai.NewClient(option.WithBaseURL("http://"+ln.Addr().String()+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	out, err := sdk.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: model,
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("What is 6 times 7?")}})
	require.NoError(t, err)
	require.Len(t, out.Choices, 1)
	assert.Equal(t, "42", out.Choices[0].Message.Content)
	assert.Equal(t, int64(1), fake.calls.Load(), "five samples in one call")
	assert.Equal(t, int64(5), fake.choices.Load())

	reg, err := newRegistry()
	require.NoError(t, err)
	for _, name := range []string{"math", "granite3.3", "ibm-granite/granite-3.2-8b-instruct"} {
		_, ok := reg.Lookup(name)
		assert.True(t, ok, name)
	}
	var msg map[string]any
	require.NoError(t, json.Unmarshal([]byte(out.Choices[0].Message.RawJSON()), &msg))
	assert.Equal(t, "assistant", msg["role"])
}
