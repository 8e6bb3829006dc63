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
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/surface/openai/openaitest"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// sessionCall is one request to the sessions API (or any path) with key ("" for none).
func sessionCall(t *testing.T, addr, key, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func newSession(t *testing.T, addr, key, model string) string {
	t.Helper()
	status, body := sessionCall(t, addr, key, http.MethodPost, "/v1/sessions", `{"model":"`+model+`"}`)
	require.Equal(t, http.StatusCreated, status, body)
	var s struct{ ID, Object string }
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	require.Equal(t, "chat.session", s.Object)
	return s.ID
}

// upstreamMessages is the messages of the last request the upstream got.
func upstreamMessages(t *testing.T, up *openaitest.Upstream) []string {
	t.Helper()
	var body struct {
		Messages []struct{ Role, Content string }
	}
	require.NoError(t, json.Unmarshal(up.LastBody(), &body), string(up.LastBody()))
	var out []string
	for _, m := range body.Messages {
		out = append(out, m.Role+": "+m.Content)
	}
	return out
}

// TestSessions: a conversation kept by the gateway. The OpenAI SDK sends only the new turn
// (with X-Infergate-Session-Id); the upstream gets the whole conversation, whole and streamed
// answers alike; the session sticks to the endpoint that served it; GET shows it, DELETE ends
// it; an unknown id is OpenAI's 404.
func TestSessions(t *testing.T) {
	t.Parallel()
	a, b := openaitest.Start(t, "a", "m"), openaitest.Start(t, "b", "m")
	a.SetReply("Nice to meet you.")
	b.SetReply("Nice to meet you.")
	addr := startModels(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: a, url: %s, type: vllm, check_interval: 1h}
  - {name: b, url: %s, type: vllm, check_interval: 1h}
models:
  m: {session: {context_window: 4096}}
`, a.URL, b.URL), "m")
	id := newSession(t, addr, "", "m")
	ctx := context.Background()
	var endpoint string
	sdk := oai.NewClient(option.WithBaseURL("http://"+addr+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0),
		option.WithHeader("X-Infergate-Session-Id", id))
	turn := func(q string, stream bool) string {
		t.Helper()
		params := oai.ChatCompletionNewParams{Model: "m", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(q)}}
		var res *http.Response
		if !stream {
			got, err := sdk.Chat.Completions.New(ctx, params, option.WithResponseInto(&res))
			require.NoError(t, err)
			endpoint = res.Header.Get("X-Infergate-Endpoint")
			assert.Equal(t, id, res.Header.Get("X-Infergate-Session-Id"))
			return got.Choices[0].Message.Content
		}
		s := sdk.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&res))
		var text strings.Builder
		for s.Next() {
			for _, ch := range s.Current().Choices {
				text.WriteString(ch.Delta.Content)
			}
		}
		require.NoError(t, s.Err())
		endpoint = res.Header.Get("X-Infergate-Endpoint")
		return text.String()
	}
	last := func() []string {
		if endpoint == "a" {
			return upstreamMessages(t, a)
		}
		return upstreamMessages(t, b)
	}
	turn("My name is Ada.", false)
	first := endpoint
	assert.Equal(t, []string{"user: My name is Ada."}, last())
	answer := turn("What is my name?", true)
	assert.Equal(t, []string{"user: My name is Ada.", "assistant: Nice to meet you.", "user: What is my name?"}, last(),
		"the upstream gets the conversation; the client sent one message")
	turn("And again?", false)
	assert.Equal(t, []string{"user: My name is Ada.", "assistant: Nice to meet you.", "user: What is my name?",
		"assistant: " + answer, "user: And again?"}, last(), "the streamed answer was stored whole")
	assert.Equal(t, first, endpoint, "every turn went to the endpoint holding the conversation's prefix")
	for range 3 { // and so on, while the other endpoint is just as free
		turn("More?", false)
		assert.Equal(t, first, endpoint)
	}

	status, body := sessionCall(t, addr, "", http.MethodGet, "/v1/sessions/"+id, "")
	require.Equal(t, http.StatusOK, status, body)
	assert.Contains(t, body, `"My name is Ada."`)
	assert.Equal(t, 12, strings.Count(body, `"role"`), "six turns, each a question and an answer: %s", body)

	status, body = sessionCall(t, addr, "", http.MethodDelete, "/v1/sessions/"+id, "")
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, `{"id":"`+id+`","object":"chat.session.deleted","deleted":true}`, body)
	_, err := sdk.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "m",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Hello?")}})
	var apiErr *oai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, "a deleted session is gone")
	status, body = sessionCall(t, addr, "", http.MethodGet, "/v1/sessions/sess_doesnotexist", "")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Contains(t, body, `"error"`)
}

// TestSessionsKeysAndReplicas: with API keys a session is its key's alone (another key gets the
// same 404 as for an id that does not exist); with redis.addr two gateways continue one
// conversation.
func TestSessionsKeysAndReplicas(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "llama")
	up.SetReply("Noted.")
	rdb := redistest.Start(t)
	cfg := secureConfig(t, up.URL, "redis: {addr: "+rdb.Addr+"}\nregistry: {disabled: true}\nmodels:\n  llama: {session: {}}\n")
	g1, g2 := startInProcess(t, cfg), startInProcess(t, cfg)
	id := newSession(t, g1, secUserKey, "llama")
	turn := func(addr, key, q string) (int, string) {
		return sessionCall(t, addr, key, http.MethodPost, "/v1/chat/completions",
			`{"model":"llama","session_id":"`+id+`","messages":[{"role":"user","content":"`+q+`"}]}`)
	}
	status, body := turn(g1, secUserKey, "Remember 42.")
	require.Equal(t, http.StatusOK, status, body)
	status, body = turn(g2, secUserKey, "What did I say?")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, []string{"user: Remember 42.", "assistant: Noted.", "user: What did I say?"}, upstreamMessages(t, up),
		"the other replica continued the conversation")
	assert.NotContains(t, string(up.LastBody()), "session_id", "the gateway's own field is not passed on")

	status, other := turn(g2, secControlKey, "Let me in.")
	assert.Equal(t, http.StatusNotFound, status, "another key's session does not exist for it")
	_, unknown := sessionCall(t, g1, secControlKey, http.MethodGet, "/v1/sessions/"+strings.Replace(id, id[len(id)-4:], "xxxx", 1), "")
	var e1, e2 struct{ Error struct{ Code string } }
	require.NoError(t, json.Unmarshal([]byte(other), &e1))
	require.NoError(t, json.Unmarshal([]byte(unknown), &e2))
	assert.Equal(t, e2.Error.Code, e1.Error.Code, "the same answer as for an unknown id")
	status, _ = sessionCall(t, g1, secControlKey, http.MethodDelete, "/v1/sessions/"+id, "")
	assert.Equal(t, http.StatusNotFound, status)
	status, _ = sessionCall(t, g1, "", http.MethodGet, "/v1/sessions/"+id, "")
	assert.Equal(t, http.StatusUnauthorized, status, "the sessions API needs a key")
	status, body = sessionCall(t, g2, secUserKey, http.MethodGet, "/v1/sessions/"+id, "")
	assert.Equal(t, http.StatusOK, status, body)
}

// TestStreamWholeAtDone: a streamed answer is whole at its [DONE] event. A server may end the
// body well after it (its last chunk travels apart), and the surfaces that decode the events
// (OpenAIService over Connect and gRPC, the KServe bridge) stop reading at the [DONE]. Such a
// session turn is stored before the client can send its next one, and such an answer is
// cached, whichever surface streamed it.
func TestStreamWholeAtDone(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "m", "c")
	up.SetReply("Noted.")
	up.HoldEnd(10 * time.Second) // a body that ends long after its [DONE]
	addr := startModels(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, kind: chat, check_interval: 1h}
models:
  m: {session: {context_window: 4096}}
  c: {cache: {mode: exact}}
`, up.URL), "m")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := dial(t, addr)
	g := openaiv1.NewOpenAIServiceClient(conn)
	cc := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, "http://"+addr)
	kc := inference.NewGRPCInferenceServiceClient(conn)
	chat := func(model, q string) *openaiv1.StreamChatCompletionRequest {
		return &openaiv1.StreamChatCompletionRequest{Request: &openaiv1.CreateChatCompletionRequest{Model: model, Temperature: proto.Float64(0),
			Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String(q)}}}}
	}
	connectStream := func(id string, req *openaiv1.StreamChatCompletionRequest) {
		t.Helper()
		cctx, ci := connect.NewClientContext(ctx)
		if id != "" {
			ci.RequestHeader().Set("X-Infergate-Session-Id", id)
		}
		cs, err := cc.StreamChatCompletion(cctx, req)
		require.NoError(t, err)
		for cs.Receive() {
		}
		require.NoError(t, cs.Err())
	}
	grpcStream := func(ctx context.Context, req *openaiv1.StreamChatCompletionRequest) {
		t.Helper()
		st, err := g.StreamChatCompletion(ctx, req)
		require.NoError(t, err)
		for {
			_, err := st.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
		}
	}
	bridgeStream := func(ctx context.Context, model, q string) {
		t.Helper()
		s, err := kc.ModelStreamInfer(ctx)
		require.NoError(t, err)
		require.NoError(t, s.Send(&inference.ModelInferRequest{ModelName: model, Inputs: []*inference.ModelInferRequest_InferInputTensor{
			{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}, Contents: &inference.InferTensorContents{BytesContents: [][]byte{[]byte(q)}}},
			{Name: "stream", Datatype: "BOOL", Shape: []int64{1}, Contents: &inference.InferTensorContents{BoolContents: []bool{true}}}}}))
		require.NoError(t, s.CloseSend())
		for {
			m, err := s.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			require.Empty(t, m.GetErrorMessage())
		}
	}

	id := newSession(t, addr, "", "m")
	withID := metadata.AppendToOutgoingContext(ctx, "x-infergate-session-id", id)
	var want []string
	turn := func(surface, q string) {
		t.Helper()
		want = append(want, "user: "+q)
		assert.Equal(t, want, upstreamMessages(t, up), "%s: the upstream got every turn before this one", surface)
		want = append(want, "assistant: Noted.")
	}
	connectStream(id, chat("m", "One, streamed over Connect."))
	turn("Connect", "One, streamed over Connect.")
	grpcStream(withID, chat("m", "Two, streamed over gRPC."))
	turn("gRPC", "Two, streamed over gRPC.")
	bridgeStream(withID, "m", "Three, streamed through the KServe bridge.")
	turn("KServe bridge", "Three, streamed through the KServe bridge.")
	connectStream(id, chat("m", "Four."))
	turn("Connect", "Four.")

	for _, c := range []struct {
		surface string
		send    func(q string)
	}{
		{"Connect", func(q string) { connectStream("", chat("c", q)) }},
		{"gRPC", func(q string) { grpcStream(ctx, chat("c", q)) }},
	} {
		q := "Is this cached, over " + c.surface + "?"
		c.send(q)
		n := up.Requests()
		c.send(q)
		assert.Equal(t, n, up.Requests(), "%s: the repeat of a streamed answer was served from the cache", c.surface)
	}
}
