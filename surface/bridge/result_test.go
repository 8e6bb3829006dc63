package bridge

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func strings2(b [][]byte) []string {
	out := make([]string, len(b))
	for i, x := range b {
		out[i] = string(x)
	}
	return out
}

// fold reads a whole answer as Execute does, for a model without chat_result.
func fold(b []byte, n int) ([][]byte, []string, error) {
	acc := newAccumulator(n, false)
	if _, err := acc.add(b); err != nil {
		return nil, nil, err
	}
	texts, reasons, _ := acc.take(true)
	return texts, reasons, nil
}

// TestFoldOrdersChoices: one element per choice, by choice index whatever the order in the
// answer, completions and chat alike; a null finish_reason is "".
func TestFoldOrdersChoices(t *testing.T) {
	texts, reasons, err := fold([]byte(`{"choices":[{"index":2,"text":"c","finish_reason":"length"},{"index":0,"text":"a","finish_reason":"stop"},{"index":1,"text":"b","finish_reason":null}]}`), 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, strings2(texts))
	assert.Equal(t, []string{"stop", "", "length"}, reasons)

	texts, reasons, err = fold([]byte(`{"object":"chat.completion","choices":[{"index":1,"message":{"role":"assistant","content":"y"},"finish_reason":"stop"},{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{}]},"finish_reason":"tool_calls"}]}`), 3)
	require.NoError(t, err)
	assert.Equal(t, []string{"", "y", ""}, strings2(texts), "n=3 asked: three elements even when fewer came")
	assert.Equal(t, []string{"tool_calls", "stop", ""}, reasons)

	for _, bad := range []string{`nope`, `{"choices":[{"index":-1}]}`, `{"choices":[{"index":1024}]}`, `{"choices":{}}`} {
		_, _, err := fold([]byte(bad), 1)
		require.Error(t, err, bad)
	}
	_, _, err = fold([]byte(`{"error":{"message":"boom","code":503}}`), 1)
	var ce *connect.Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, connect.CodeUnavailable, ce.Code())
	assert.Equal(t, "boom", ce.Message())
}

// TestAccumulatorStream: deltas go out per chunk with finish_reason ""; the finish reasons of
// choices that end early are held for the final response; the chunk that ends the last choice
// is held back (done).
func TestAccumulatorStream(t *testing.T) {
	acc := newAccumulator(2, false)
	step := func(chunk string) (bool, []string, []string) {
		ok, err := acc.add([]byte(chunk))
		require.NoError(t, err)
		if !ok || acc.done() {
			return ok, nil, nil
		}
		texts, reasons, _ := acc.take(false)
		return ok, strings2(texts), reasons
	}
	ok, texts, reasons := step(`{"choices":[{"index":1,"delta":{"role":"assistant","content":"B"}}]}`)
	assert.True(t, ok)
	assert.Equal(t, []string{"", "B"}, texts)
	assert.Equal(t, []string{"", ""}, reasons)
	_, texts, reasons = step(`{"choices":[{"index":0,"delta":{"content":"A"},"finish_reason":"length"}]}`)
	assert.Equal(t, []string{"A", ""}, texts)
	assert.Equal(t, []string{"", ""}, reasons, "choice 0's finish_reason waits for the final response")
	ok, texts, _ = step(`{"choices":[{"index":1,"delta":{"content":"b"},"finish_reason":"stop"}]}`)
	assert.True(t, ok)
	assert.Nil(t, texts, "the chunk ending the last choice is held back")
	assert.True(t, acc.done())
	ok, _, _ = step(`{"choices":[],"usage":{"prompt_tokens":1}}`)
	assert.False(t, ok, "a usage chunk carries no choices")
	final, finalReasons, isFinal := acc.take(true)
	assert.True(t, isFinal)
	assert.Equal(t, []string{"", "b"}, strings2(final))
	assert.Equal(t, []string{"length", "stop"}, finalReasons)
}

// TestUpstreamMessage: the message of an upstream's error body is httpapi.ParseBody's (tested
// there); a body without one is quoted itself, clipped and valid UTF-8, an empty one named by its
// status.
func TestUpstreamMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"bad key","type":"invalid_request_error"}}`: "bad key",
		`{"object":"error","message":"vllm says no","code":400}`:         "vllm says no",
		`{"error":"plain"}`:                     "plain",
		`{"detail":"Not Found"}`:                "Not Found",
		`{"detail":[{"msg":"field required"}]}`: `[{"msg":"field required"}]`,
		"  not json \xff ":                      "not json \ufffd",
		"":                                      "Bad Request",
	} {
		assert.Equal(t, want, upstreamMessage(http.StatusBadRequest, []byte(body)), body)
	}
	assert.Len(t, upstreamMessage(http.StatusBadGateway, []byte(strings.Repeat("x", 2000))), 512+len("..."))
}

// TestAnswerError: an error object in an answer or chunk (OpenAI's, or vLLM's flat one) is the
// error, with its code's status's code.
func TestAnswerError(t *testing.T) {
	for data, want := range map[string]connect.Code{
		`{"error":{"message":"oops","code":400}}`:                   connect.CodeInvalidArgument,
		`{"object":"error","message":"engine dead","code":503}`:     connect.CodeUnavailable,
		`{"error":{"message":"slow down","code":429}}`:              connect.CodeUnavailable,
		`{"error":"plain"}`:                                         connect.CodeInternal,
		`{"choices":[{"index":0,"text":"x"}],"error":{"code":404}}`: connect.CodeNotFound,
	} {
		_, err := decodeAnswer([]byte(data))
		var ce *connect.Error
		require.ErrorAs(t, err, &ce, data)
		assert.Equal(t, want, ce.Code(), data)
		assert.NotEmpty(t, ce.Message(), data)
	}
	_, err := decodeAnswer([]byte(`{"choices":[],"error":null}`))
	assert.NoError(t, err)
}
