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
	b, n, err := requestBody("m\"x", false, []byte("caf\xc3\xa9 \xff\n"), true, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, `{"model":"m\"x","prompt":"café \ufffd\n","stream":true}`, string(b), "invalid UTF-8 in the prompt becomes U+FFFD")

	b, n, err = requestBody("m", true, []byte("hi"), false, []byte(" {\n \"n\" : 3, \"stop\": [ \"a\" ], \"t\\u0065mp\": null } "))
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	assert.Equal(t, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"n":3,"stop":["a"],"temp":null}`, string(b))

	b, n, err = requestBody("m", false, nil, false, []byte(`{}`))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, `{"model":"m","prompt":"","stream":false}`, string(b))

	for _, bad := range []string{"", " ", "null", "{", `{"a"}`, `{"a":}`, `{"a":1,}`, "{\"a\":\"\xff\"}", `{"n":1.5}`, `{"n":2000}`} {
		_, _, err := requestBody("m", false, nil, false, []byte(bad))
		var ce *connect.Error
		require.True(t, errors.As(err, &ce), "%q: %v", bad, err)
		assert.Equal(t, connect.CodeInvalidArgument, ce.Code(), "%q", bad)
	}
}

// FuzzSamplingParameters: any sampling_parameters bytes give an INVALID_ARGUMENT error or a body
// that is one valid JSON object whose model, prompt and stream are the bridge's, never a panic.
func FuzzSamplingParameters(f *testing.F) {
	for _, s := range []string{
		`{"temperature":0.5,"max_tokens":16,"stop":["\n"],"n":2}`,
		`{"prompt":"x"}`, `{"pr\u006fmpt":"x"}`, `{"a":1,"a":2}`, `[1]`, `"s"`, `{"a":{"b":[1,{"c":null}]}}`,
		`{"a":1} {"b":2}`, "{\"a\":\"\xff\"}", `{"n":1e3}`, ``, `{`, `{"\u0000":"\ud800"}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, sampling []byte, chat bool) {
		body, n, err := requestBody("model", chat, []byte("prompt"), true, sampling)
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
		if chat {
			if string(m["messages"]) != `[{"role":"user","content":"prompt"}]` || m["prompt"] != nil {
				t.Fatalf("messages overridden: %q", body)
			}
		} else if string(m["prompt"]) != `"prompt"` || m["messages"] != nil {
			t.Fatalf("prompt overridden: %q", body)
		}
	})
}
