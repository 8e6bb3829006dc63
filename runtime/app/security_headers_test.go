package app

import (
	"context"
	"encoding/base64"
	"encoding/binary"
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
	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestSecuritySessionHeaderEverySurface: X-Infergate-Session-Id names a chat session's turn on
// every surface, not only over HTTP: as gRPC metadata (OpenAIService, whole and streamed, and
// the KServe bridge's ModelInfer) and as a Connect request's header. Each turn reaches the
// upstream with the turns before it, whichever surface sent them, and the answer's metadata
// names the session back. A binary x-infergate-*-bin key is refused naming it, not ignored.
func TestSecuritySessionHeaderEverySurface(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "m")
	up.SetReply("Noted.")
	addr := startModels(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, kind: chat, check_interval: 1h}
models:
  m: {session: {context_window: 4096}}
`, up.URL), "m")
	id := newSession(t, addr, "", "m")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := dial(t, addr)
	g := openaiv1.NewOpenAIServiceClient(conn)
	cc := openaiv1connect.NewOpenAIServiceClient(http.DefaultClient, "http://"+addr)
	chat := func(q string) *openaiv1.CreateChatCompletionRequest {
		return &openaiv1.CreateChatCompletionRequest{Model: "m", Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String(q)}}}
	}
	var want []string
	turn := func(surface, q string) {
		t.Helper()
		want = append(want, "user: "+q)
		assert.Equal(t, want, upstreamMessages(t, up), "%s: the upstream got the conversation, the client one message", surface)
		want = append(want, "assistant: Noted.")
	}
	withID := metadata.AppendToOutgoingContext(ctx, "x-infergate-session-id", id)

	var md metadata.MD
	_, err := g.CreateChatCompletion(withID, chat("One, over gRPC."), grpc.Header(&md))
	require.NoError(t, err)
	turn("gRPC", "One, over gRPC.")
	assert.Equal(t, []string{id}, md.Get("x-infergate-session-id"), "gRPC: the session named back")

	cctx, ci := connect.NewClientContext(ctx)
	ci.RequestHeader().Set("X-Infergate-Session-Id", id)
	_, err = cc.CreateChatCompletion(cctx, chat("Two, over Connect."))
	require.NoError(t, err)
	turn("Connect", "Two, over Connect.")
	assert.Equal(t, id, ci.ResponseHeader().Get("X-Infergate-Session-Id"), "Connect: the session named back")

	st, err := g.StreamChatCompletion(withID, &openaiv1.StreamChatCompletionRequest{Request: chat("Three, streamed over gRPC.")})
	require.NoError(t, err)
	for {
		if _, err := st.Recv(); err != nil {
			break
		}
	}
	turn("gRPC stream", "Three, streamed over gRPC.")

	cctx, ci = connect.NewClientContext(ctx)
	ci.RequestHeader().Set("X-Infergate-Session-Id", id)
	cs, err := cc.StreamChatCompletion(cctx, &openaiv1.StreamChatCompletionRequest{Request: chat("Four, streamed over Connect.")})
	require.NoError(t, err)
	for cs.Receive() {
	}
	require.NoError(t, cs.Err())
	turn("Connect stream", "Four, streamed over Connect.")

	text := binary.LittleEndian.AppendUint32(nil, uint32(len("Five, through the KServe bridge.")))
	_, err = inference.NewGRPCInferenceServiceClient(conn).ModelInfer(withID, &inference.ModelInferRequest{ModelName: "m",
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{{Name: "text_input", Datatype: "BYTES", Shape: []int64{1}}},
		RawInputContents: [][]byte{append(text, "Five, through the KServe bridge."...)}})
	require.NoError(t, err)
	turn("KServe bridge", "Five, through the KServe bridge.")

	// KServe REST: the header on generate and infer, or the sampling parameter.
	rest := func(path, body string, header ...string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	}
	rest("/v2/models/m/generate", `{"text_input":"Six, over KServe REST."}`, "X-Infergate-Session-Id", id)
	turn("KServe REST generate", "Six, over KServe REST.")
	rest("/v2/models/m/infer", `{"inputs":[{"name":"text_input","datatype":"BYTES","shape":[1],"data":["Six and a half, REST infer."]}]}`,
		"X-Infergate-Session-Id", id)
	turn("KServe REST infer", "Six and a half, REST infer.")
	rest("/v2/models/m/generate", `{"text_input":"Six and three quarters.","sampling_parameters":"{\"session_id\":\"`+id+`\"}"}`)
	turn("KServe REST, sampling parameter", "Six and three quarters.")

	requests := up.Requests()
	bin := metadata.AppendToOutgoingContext(ctx, "x-infergate-session-id-bin", "x")
	_, err = g.CreateChatCompletion(bin, chat("Seven?"))
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "x-infergate-session-id-bin")
	assert.Equal(t, requests, up.Requests(), "refused before any upstream call")
}

// TestSecurityGraniteStreamIsWholeOverRPC: a Granite model's malformed output (a section header
// written twice, after a 100 KB answer) reaches an OpenAIService client whole, streamed or not:
// the streamed content is the whole answer's, all of the model's text. X-Infergate-Debug: prompt
// as gRPC metadata is honoured as the HTTP header is: the rendered prompt comes back in the
// answer's metadata, with the parse error.
func TestSecurityGraniteStreamIsWholeOverRPC(t *testing.T) {
	t.Parallel()
	up := openaitest.Start(t, "up", "granite")
	reply := "Mad about dog! <co>1</co> " + strings.Repeat("It barks at strangers. ", 100<<10/23) +
		"\n\n# Citations:\n<co>1</co> Document 0: \"Dog info\"\n\n# Citations:\n<co>1</co> Document 0: \"Dog\""
	up.SetReply(reply)
	up.SetStream(500, 0) // the fake cuts its reply in as many pieces, each from the whole
	addr := startModels(t, fmt.Sprintf(`builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, kind: chat, check_interval: 1h}
models:
  granite: {processor: granite3.2}
`, up.URL), "granite")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-infergate-debug", "prompt")
	extra, err := structpb.NewStruct(map[string]any{"documents": []any{map[string]any{"text": "Dog info"}},
		"controls": map[string]any{"citations": true}})
	require.NoError(t, err)
	req := &openaiv1.CreateChatCompletionRequest{Model: "granite", Extra: extra,
		Messages: []*openaiv1.ChatMessage{{Role: "user", Content: proto.String("Tell me about dogs.")}}}
	g := openaiv1.NewOpenAIServiceClient(dial(t, addr))

	var md metadata.MD
	whole, err := g.CreateChatCompletion(ctx, req, grpc.Header(&md))
	require.NoError(t, err)
	content := whole.GetChoices()[0].GetMessage().GetContent()
	assert.True(t, strings.HasPrefix(content, "Mad about dog!") && strings.HasSuffix(content, "# Citations:\n<co>1</co> Document 0: \"Dog\""),
		"the whole answer carries all of the model's text: %.100q...%.100q", content, content[max(0, len(content)-100):])
	assert.NotEmpty(t, md.Get("x-infergate-granite-parse-error"), "the parse error, in metadata")
	if prompt := md.Get("x-infergate-granite-prompt"); assert.Len(t, prompt, 1, "X-Infergate-Debug as metadata is honoured: %v", md) {
		rendered, err := base64.StdEncoding.DecodeString(prompt[0])
		require.NoError(t, err)
		assert.Contains(t, string(rendered), "Dog info", "the rendered prompt, documents included")
	}

	st, err := g.StreamChatCompletion(ctx, &openaiv1.StreamChatCompletionRequest{Request: req})
	require.NoError(t, err)
	var streamed strings.Builder
	for {
		c, err := st.Recv()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		for _, ch := range c.GetChoices() {
			streamed.WriteString(ch.GetDelta().GetContent())
		}
	}
	assert.True(t, streamed.String() == content, "streamed %d bytes, whole %d: the stream carries the whole answer's text", streamed.Len(), len(content))
	smd, err := st.Header()
	require.NoError(t, err)
	assert.Len(t, smd.Get("x-infergate-granite-prompt"), 1, "the stream's metadata has the prompt too")
}
