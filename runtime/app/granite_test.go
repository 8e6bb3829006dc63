package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/adapters/guard"
	"github.com/infergate/infergate/adapters/kserve/shm"
	"github.com/infergate/infergate/adapters/openai/openaitest"
	openaiv1 "github.com/infergate/infergate/gen/infergate/openai/v1"
	"github.com/infergate/infergate/gen/infergate/openai/v1/openaiv1connect"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	// upstream is of kind chat, so the bridge sends chat) and a Batch API line.
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
