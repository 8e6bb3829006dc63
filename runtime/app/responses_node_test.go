package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/stage/guard"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nodeRequireEnv makes TestResponsesNode fail, not skip, without node or the SDKs (set by .ci/run
// after testdata/responses-node/install.sh).
const nodeRequireEnv = "INFERGATE_REQUIRE_NODE"

// nodeSDKs is node's path and testdata/responses-node's, where install.sh put the official Node
// SDKs (openai, @openai/agents, zod) in node_modules; it skips the test without them, unless
// INFERGATE_REQUIRE_NODE=1.
func nodeSDKs(t *testing.T) (node, dir string) {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		if os.Getenv(nodeRequireEnv) == "1" {
			t.Fatalf("%s (%s=1)", why, nodeRequireEnv)
		}
		t.Skip(why)
	}
	dir, err := filepath.Abs(filepath.Join("testdata", "responses-node"))
	require.NoError(t, err)
	node, err = exec.LookPath("node")
	if err != nil {
		missing("no node on PATH: the Node SDK tests need Node.js 20 or later")
	}
	for _, pkg := range []string{"openai", "@openai/agents", "zod"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			missing(fmt.Sprintf("%s is not installed in %s/node_modules: run bash %s/install.sh", pkg, dir, dir))
		}
	}
	return node, dir
}

// runNode runs a script of testdata/responses-node with env added to the test's and returns the
// JSON summary it printed; a non-zero exit fails the test with the checks that failed.
func runNode(t *testing.T, node, dir, script string, env ...string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	// Tracing would export to api.openai.com; agent.mjs turns it off too.
	cmd.Env = append(os.Environ(), append([]string{"OPENAI_AGENTS_DISABLE_TRACING=1", "NO_COLOR=1"}, env...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("node %s: %s", script, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("node %s: %v\n-- stderr:\n%s\n-- stdout:\n%s", script, err, stderr.String(), stdout.String())
	}
	var summary map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &summary), "node %s printed:\n%s\n-- stderr:\n%s", script, stdout.String(), stderr.String())
	assert.Equal(t, true, summary["ok"], "node %s: %s", script, stdout.String())
	return summary
}

// nodeStep is the summary that a script's named step returned.
func nodeStep(t *testing.T, summary map[string]any, name string) map[string]any {
	t.Helper()
	steps, _ := summary["steps"].(map[string]any)
	s, ok := steps[name].(map[string]any)
	require.True(t, ok, "no step %q in the summary: %v", name, summary)
	return s
}

// TestResponsesNode: the official Node SDKs over real sockets against the gateway in front of the
// scripted upstreams of TestResponsesTranslated and TestResponsesNative. sdk.mjs (openai): a
// response whole, streamed raw (every event checked as the strict clients need it) and through
// the stream helper's accumulator (finalResponse), retrieve, input_items, delete, the errors; and,
// translated only (the native fake has no tools), a function tool's round trip by
// previous_response_id and by input items, whole and streamed. agent.mjs (@openai/agents): an
// Agent with a get_weather tool run whole and streamed, in both modes (the native fake calls the
// tool in the Responses API's own items). The scripts' checks are in
// testdata/responses-node; this test asserts their summaries and what reached the upstream.
func TestResponsesNode(t *testing.T) {
	node, dir := nodeSDKs(t)
	t.Parallel()
	const key = "sk-resp-node-4b7a"
	for _, mode := range []string{"translated", "native"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			up, url := startScripted(t, mode == "native")
			addr := serveYAML(t, fmt.Sprintf(`
builtin_models: false
upstreams:
  - {name: scripted, url: %s, type: vllm, check_interval: 1h}
auth:
  keys:
    - {name: node, sha256: %s}
`, url, guard.HashKey(key)), io.Discard)
			require.Eventually(t, func() bool {
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/models/agent-model", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					return false
				}
				res.Body.Close()
				return res.StatusCode == http.StatusOK
			}, 10*time.Second, 10*time.Millisecond, "agent-model is routed")
			env := []string{"BASE_URL=http://" + addr + "/v1", "API_KEY=" + key, "MODE=" + mode}

			t.Run("sdk", func(t *testing.T) {
				summary := runNode(t, node, dir, "sdk.mjs", env...)
				assert.Equal(t, mode, summary["mode"])
				create := nodeStep(t, summary, "create")
				helper := nodeStep(t, summary, "stream helper finalResponse")
				if mode == "native" {
					assert.Equal(t, "native: 1 input items", create["text"])
					assert.Equal(t, "native: 3 input items", helper["text"])
					_, chats := up.last("/v1/chat/completions")
					assert.Zero(t, chats, "nothing translated")
					return
				}
				assert.Equal(t, "1 messages; last: Hello", create["text"])
				assert.Equal(t, "3 messages; last: And again", helper["text"])
				tool := nodeStep(t, summary, "function tool round trip (previous_response_id)")
				assert.Equal(t, "The weather: sunny, 21C", tool["text"])
				streamed := nodeStep(t, summary, "function tool streamed (raw and stream helper)")
				assert.JSONEq(t, `{"city":"Paris"}`, streamed["arguments"].(string))
				up.mu.Lock()
				chats := strings.Join(up.bodies["/v1/chat/completions"], "\n")
				up.mu.Unlock()
				assert.Contains(t, chats, `"content":[{"type":"text","text":"first"}]`, "an input_text part as a chat text part")
				assert.Contains(t, chats, `{"role":"system","content":"Be brief."}`, "instructions as the system message")
			})
			t.Run("agent", func(t *testing.T) {
				summary := runNode(t, node, dir, "agent.mjs", env...)
				for _, name := range []string{"run", "run streamed"} {
					s := nodeStep(t, summary, name)
					assert.Equal(t, "The weather: sunny in Paris, 21C", s["finalOutput"], name)
					assert.True(t, strings.HasPrefix(fmt.Sprint(s["lastResponseId"]), "resp_"), name)
				}
				if mode == "native" {
					last, _ := up.last("/v1/responses")
					assert.Contains(t, last, `"type":"function_call_output"`, "the tool's output reached the model")
					assert.Contains(t, last, "sunny in Paris, 21C")
					return
				}
				chat, _ := up.last("/v1/chat/completions")
				assert.Contains(t, chat, `"tool_call_id":"call_w1"`, "the tool's output reached the model")
				assert.Contains(t, chat, "sunny in Paris, 21C")
			})
		})
	}
}
