package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/adapters/kserve/shm"
	"github.com/infergate/infergate/adapters/openai/openaitest"
	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGraniteProcessor: models.<name>.processor serves chat completions through a Granite
// processor: the upstream gets Granite 3.3's prompt at /v1/completions, the client a chat
// completion; an unknown processor fails start-up naming the known ones.
func TestGraniteProcessor(t *testing.T) {
	up := openaitest.Start(t, "up", "granite")
	addr := startModels(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: up, url: %s, type: vllm, check_interval: 1h}
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

	_, err = parseConfig("test", []byte("models:\n  g: {processor: granite9}\n"))
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
