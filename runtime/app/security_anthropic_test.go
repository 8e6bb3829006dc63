package app

// Issue 35, the Anthropic Messages surface: what a request may make the gateway allocate, and how
// deep the JSON it accepts may nest.

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/surface/openai/openaitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// anthropicMaxBlocks is surface/anthropic's cap on the content blocks of one request.
const anthropicMaxBlocks = 100_000

// oneLetterBlocks is a Messages request of n one-letter text blocks and the OpenAI chat body the
// gateway translates it to (block for block the same bytes).
func oneLetterBlocks(n int) (messages, chat []byte) {
	blocks := strings.Repeat(`{"type":"text","text":"a"},`, n)
	blocks = blocks[:len(blocks)-1]
	messages = []byte(`{"model":"llama","max_tokens":8,"messages":[{"role":"user","content":[` + blocks + `]}]}`)
	chat = []byte(`{"model":"llama","messages":[{"role":"user","content":[` + blocks + `]}],"max_tokens":8}`)
	return messages, chat
}

// A Messages request of many tiny content blocks costs the gateway a small multiple of its bytes.
// Before, every block became a 232-byte struct in storage that doubled as it grew, and the body was
// copied once more for the decoder's strings: 100,000 one-letter blocks (2.7 MB) allocated 132 MB
// more than the same request sent as OpenAI chat, 49 times the body, and 300,000 (8.1 MB) added
// 213 MB of RSS. The fake upstream runs in the test's process, so what the gateway allocates for the
// translation is told apart from the rest (the chat handler, the upstream reading and decoding the
// body) by sending the translated body to /v1/chat/completions too: the Messages request's
// allocations less those are the Anthropic surface's (reading the body, decoding, writing the
// OpenAI body, translating the answer), held to 3 times the body. One block more than the cap is
// a 400 that names it.
func TestSecurityAnthropicMemory(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	base := "http://" + startInProcess(t, secureConfig(t, up.URL, ""))
	hdr := []string{"Authorization", "Bearer " + secUserKey, "Content-Type", "application/json"}
	messages, chat := oneLetterBlocks(anthropicMaxBlocks)

	// The least of three tries each, so that a background allocation (a health check) or a pool
	// refilled does not count.
	spent := func(path string, body []byte) uint64 {
		least := uint64(1 << 62)
		for range 3 {
			before := allocated()
			r := send(t, http.DefaultClient, http.MethodPost, base+path, body, hdr...)
			n := allocated() - before
			require.Equal(t, http.StatusOK, r.status, "%s: %.300s", path, r.body)
			least = min(least, n)
		}
		return least
	}
	asChat := spent("/v1/chat/completions", chat)
	sent := up.LastBody()
	asMessages := spent("/v1/messages", messages)
	require.True(t, bytes.Equal(sent, up.LastBody()), "the upstream gets the same body both ways")
	extra := int64(asMessages) - int64(asChat)
	t.Logf("%d blocks, %d bytes: as OpenAI chat %.1f MB, as Anthropic Messages %.1f MB, the translation %.1f MB (%.2fx the body)",
		anthropicMaxBlocks, len(messages), float64(asChat)/1e6, float64(asMessages)/1e6, float64(extra)/1e6, float64(extra)/float64(len(messages)))
	assert.LessOrEqual(t, extra, 3*int64(len(messages)), "the Anthropic surface allocated %.1fx the body", float64(extra)/float64(len(messages)))

	over, _ := oneLetterBlocks(anthropicMaxBlocks + 1)
	r := send(t, http.DefaultClient, http.MethodPost, base+"/v1/messages", over, hdr...)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.body, `"type":"invalid_request_error"`)
	assert.Contains(t, r.body, "more than "+strconv.Itoa(anthropicMaxBlocks)+" content blocks", r.body)
}

// deepSchema is a request with a tool whose input_schema nests depth levels (the schema object
// is the first; arrays the rest). The request itself is three levels more: its object, tools and
// the tool.
func deepSchema(depth int) []byte {
	inner := depth - 1
	return []byte(`{"model":"llama","max_tokens":8,"messages":[{"role":"user","content":"hi"}],` +
		`"tools":[{"name":"f","input_schema":{"type":"object","x":` + strings.Repeat("[", inner) + strings.Repeat("]", inner) + `}}]}`)
}

// A tool's input_schema nested 66 levels deep (one past the old limit) or 500 is valid JSON, and
// taken: before, the Messages surface refused anything nested deeper than 65 levels as "not valid
// JSON" while /v1/chat/completions took it. Past the documented 10,000 levels (encoding/json's
// limit, the chat surface's), counted from the request's top, it is a 400 that says so.
func TestSecurityAnthropicDepth(t *testing.T) {
	up := openaitest.Start(t, "up", "llama")
	base := "http://" + startInProcess(t, secureConfig(t, up.URL, ""))
	hdr := []string{"Authorization", "Bearer " + secUserKey, "Content-Type", "application/json"}
	for _, depth := range []int{66, 500} {
		r := send(t, http.DefaultClient, http.MethodPost, base+"/v1/messages", deepSchema(depth), hdr...)
		assert.Equal(t, http.StatusOK, r.status, "%d levels: %.300s", depth, r.body)
		assert.Contains(t, string(up.LastBody()), `"parameters":{"type":"object","x":[[[`, "%d levels", depth)
	}
	r := send(t, http.DefaultClient, http.MethodPost, base+"/v1/messages", deepSchema(10_000-3+1), hdr...)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, r.body, `"type":"invalid_request_error"`)
	assert.Contains(t, r.body, "nested deeper than 10000 levels", r.body)
}
