package bridge

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRequestBody(t *testing.T) {
	b, n, err := requestBody("m\"x", false, []byte("caf\xc3\xa9 \xff\n"), true, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, `{"model":"m\"x","prompt":"café \ufffd\n","stream":true}`, string(b), "invalid UTF-8 in the prompt becomes U+FFFD")

	b, n, err = requestBody("m", true, []byte("hi"), false, []byte(" {\n \"n\" : 3, \"stop\": [ \"a\" ], \"t\\u0065mp\": null } "), nil)
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"n":3,"stop":["a"],"temp":null}`, string(b))

	b, n, err = requestBody("m", false, nil, false, []byte(`{}`), nil)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, `{"model":"m","prompt":"","stream":false}`, string(b))

	for _, bad := range []string{"", " ", "null", "{", `{"a"}`, `{"a":}`, `{"a":1,}`, "{\"a\":\"\xff\"}", `{"n":1.5}`, `{"n":2000}`} {
		_, _, err := requestBody("m", false, nil, false, []byte(bad), nil)
		var ce *connect.Error
		require.True(t, errors.As(err, &ce), "%q: %v", bad, err)
		assert.Equal(t, connect.CodeInvalidArgument, ce.Code(), "%q", bad)
	}

	// chat_template_kwargs: one JSON object, written compacted; sampling_parameters may then not
	// set it too (without the input it may).
	b, _, err = requestBody("m", true, []byte("hi"), false, []byte(`{"max_tokens":4}`), []byte(` { "thinking" : true,"documents":[{"text":"<d>"}] } `))
	require.NoError(t, err)
	assert.Equal(t, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"chat_template_kwargs":{"thinking":true,"documents":[{"text":"<d>"}]},"max_tokens":4}`, string(b))
	_, _, err = requestBody("m", true, []byte("hi"), false, []byte(`{"chat_template_kwargs":{}}`), nil)
	require.NoError(t, err)
	for _, bad := range []string{"", " ", "null", "[]", `"x"`, "{", `{"a":1} {"b":2}`, `{"a":1}x`, "{\"a\":\"\xff\"}"} {
		_, _, err := requestBody("m", true, nil, false, nil, []byte(bad))
		var ce *connect.Error
		require.True(t, errors.As(err, &ce), "%q: %v", bad, err)
		assert.Equal(t, connect.CodeInvalidArgument, ce.Code(), "%q", bad)
		assert.Contains(t, ce.Message(), "chat_template_kwargs", "%q", bad)
	}
	_, _, err = requestBody("m", true, nil, false, []byte(`{"chat_template_kwargs":{}}`), []byte(`{}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sampling_parameters must not set 'chat_template_kwargs' when the input 'chat_template_kwargs' does")
}

// FuzzSamplingParameters: any sampling_parameters and chat_template_kwargs bytes give an
// INVALID_ARGUMENT error or a body that is one valid JSON object whose model, prompt and stream
// are the bridge's (and chat_template_kwargs an object when given), never a panic.
func FuzzSamplingParameters(f *testing.F) {
	for _, s := range []string{
		`{"temperature":0.5,"max_tokens":16,"stop":["\n"],"n":2}`,
		`{"prompt":"x"}`, `{"pr\u006fmpt":"x"}`, `{"a":1,"a":2}`, `[1]`, `"s"`, `{"a":{"b":[1,{"c":null}]}}`,
		`{"a":1} {"b":2}`, "{\"a\":\"\xff\"}", `{"n":1e3}`, ``, `{`, `{"\u0000":"\ud800"}`,
	} {
		f.Add([]byte(s), false, []byte(nil))
	}
	for _, kw := range []string{`{"documents":[{"doc_id":1,"text":"x"}],"controls":{"citations":true},"thinking":true}`,
		``, ` {} `, `[1]`, `{"a":1} {}`, "{\"a\":\"\xff\"}", `{"a":1}x`, `{`} {
		f.Add([]byte(`{"chat_template_kwargs":{}}`), true, []byte(kw))
	}
	f.Fuzz(func(t *testing.T, sampling []byte, chat bool, kwargs []byte) {
		if len(kwargs) == 0 {
			kwargs = nil // the input absent
		}
		body, n, err := requestBody("model", chat, []byte("prompt"), true, sampling, kwargs)
		if err != nil {
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
				t.Fatalf("error %v is not INVALID_ARGUMENT", err)
			}
			if !utf8.ValidString(ce.Message()) {
				t.Fatalf("error message is not UTF-8: %q", ce.Message())
			}
			return
		}
		if !utf8.Valid(body) || !json.Valid(body) {
			t.Fatalf("body is not valid UTF-8 JSON: %q", body)
		}
		if n < 1 || n > maxChoices {
			t.Fatalf("n = %d", n)
		}
		var m map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("body is not an object: %v: %q", err, body)
		}
		if string(m["model"]) != `"model"` || string(m["stream"]) != "true" {
			t.Fatalf("model or stream overridden: %q", body)
		}
		if kwargs != nil && (len(m["chat_template_kwargs"]) == 0 || m["chat_template_kwargs"][0] != '{') {
			t.Fatalf("chat_template_kwargs is not an object: %q", body)
		}
		if chat {
			if string(m["messages"]) != `[{"role":"user","content":"prompt"}]` || m["prompt"] != nil {
				t.Fatalf("messages overridden: %q", body)
			}
		} else if string(m["prompt"]) != `"prompt"` || m["messages"] != nil {
			t.Fatalf("prompt overridden: %q", body)
		}
	})
}
