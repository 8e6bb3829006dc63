package pipeline

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScanRouting(t *testing.T) {
	for _, tc := range []struct {
		body   string
		model  string
		stream bool
		err    bool
	}{
		{`{"model":"m","stream":true}`, "m", true, false},
		{` { "stream" : false , "model" : "a/b-c" } `, "a/b-c", false, false},
		{`{"messages":[{"content":"\"model\":\"x\""}],"model":"y"}`, "y", false, false},
		{`{"model":"a","model":"b"}`, "b", false, false},
		{`{"mod\u0065l":"esc","str\u0065am":true}`, "esc", true, false},
		{`{"model":"caf\u00e9"}`, "café", false, false},
		{`{"Model":"x"}`, "", false, false}, // case matters, as for vLLM's pydantic models
		{`{"model":null,"stream":null}`, "", false, false},
		{`{"nested":{"model":"no"},"model":"yes","n":-1.5e+3}`, "yes", false, false},
		{`{}`, "", false, false},
		{`{"model":"m"} x`, "", false, true},
		{`{"model":"m",}`, "", false, true},
		{`{"model":1}`, "", false, true},
		{`{"stream":"yes","model":"m"}`, "", false, true},
		{`{"a":01,"model":"m"}`, "", false, true},
		{`{"a":"` + "\x01" + `"}`, "", false, true},
		{`[]`, "", false, true},
		{``, "", false, true},
		{strings.Repeat("[", 2000), "", false, true},
	} {
		r, err := scanRouting([]byte(tc.body))
		if tc.err {
			assert.Error(t, err, tc.body)
			continue
		}
		require.NoError(t, err, tc.body)
		assert.Equal(t, tc.model, r.Model, tc.body)
		assert.Equal(t, tc.stream, r.Stream, tc.body)
		if r.Model != "" {
			var m string
			require.NoError(t, json.Unmarshal([]byte(tc.body[r.ModelStart:r.ModelEnd]), &m))
			assert.Equal(t, r.Model, m, "offsets delimit the model's string")
		}
	}
	r, err := scanRouting([]byte(`{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"model":"deep"}`))
	require.NoError(t, err)
	assert.Equal(t, "deep", r.Model)
}

// TestScanRoutingErrors pins what a client is told of a malformed body (the 400's message is
// "We could not parse the JSON body of your request: " and this), word for word and offset for
// offset, at every kind of fault: in a key, a value, a nested value, at the end of the input.
func TestScanRoutingErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"", "request body must be a JSON object"},
		{"[]", "request body must be a JSON object"},
		{" x", "request body must be a JSON object"},
		{"{", "malformed JSON at byte 1: expected a string"},
		{"{\"a\"", "malformed JSON at byte 4: expected ':' after object key"},
		{"{\"a\" 1}", "malformed JSON at byte 5: expected ':' after object key"},
		{"{\"a\":", "malformed JSON at byte 5: unexpected end of input"},
		{"{\"a\":1", "malformed JSON at byte 6: expected ',' or '}' in object"},
		{"{\"a\":1 \"b\":2}", "malformed JSON at byte 7: expected ',' or '}' in object"},
		{"{\"a\":1,", "malformed JSON at byte 7: expected a string"},
		{"{\"a\":1,}", "malformed JSON at byte 7: expected a string"},
		{"{1:2}", "malformed JSON at byte 1: expected a string"},
		{"{\"model\":1}", "malformed JSON at byte 9: \"model\" must be a string"},
		{"{\"model\":", "malformed JSON at byte 9: \"model\" must be a string"},
		{"{\"model\":\"m", "malformed JSON at byte 11: unterminated string"},
		{"{\"stream\":\"yes\"}", "malformed JSON at byte 10: \"stream\" must be a boolean"},
		{"{\"stream\":", "malformed JSON at byte 10: \"stream\" must be a boolean"},
		{"{\"stream\":tru}", "malformed JSON at byte 10: \"stream\" must be a boolean"},
		{"{\"a\":1} x", "malformed JSON at byte 8: unexpected data after the top-level object"},
		{"{\"a\":[1,", "malformed JSON at byte 8: unexpected end of input"},
		{"{\"a\":[1 2]}", "malformed JSON at byte 8: expected ',' or ']'"},
		{"{\"a\":[1,]}", "malformed JSON at byte 8: unexpected character ']'"},
		{"{\"a\":{", "malformed JSON at byte 6: expected a string"},
		{"{\"a\":{\"b\"", "malformed JSON at byte 9: expected ':' after object key"},
		{"{\"a\":{\"b\" 1}}", "malformed JSON at byte 10: expected ':' after object key"},
		{"{\"a\":{\"b\":1,}}", "malformed JSON at byte 12: expected a string"},
		{"{\"a\":{\"b\":1 \"c\"}}", "malformed JSON at byte 12: expected ',' or '}'"},
		{"{\"a\":{\"b\":1", "malformed JSON at byte 11: expected ',' or '}'"},
		{"{\"a\":\"x\\", "malformed JSON at byte 7: unterminated string"},
		{"{\"a\":\"x\\\\", "malformed JSON at byte 9: unterminated string"},
		{"{\"a\":\"\\q\"}", "malformed JSON at byte 6: bad escape"},
		{"{\"a\":\"\\u12\"}", "malformed JSON at byte 6: bad \\u escape"},
		{"{\"a\":\"\\u12", "malformed JSON at byte 6: short \\u escape"},
		{"{\"a\":\"\x01\"}", "malformed JSON at byte 6: control character in string"},
		{"{\"a\":nul}", "malformed JSON at byte 5: unexpected character 'n'"},
		{"{\"a\":-}", "malformed JSON at byte 6: bad number"},
		{"{\"a\":1.}", "malformed JSON at byte 7: bad number fraction"},
		{"{\"a\":1e}", "malformed JSON at byte 7: bad number exponent"},
		{"{\"a\":1e+}", "malformed JSON at byte 8: bad number exponent"},
		{"{\"a\":01}", "malformed JSON at byte 6: expected ',' or '}' in object"},
		{"{\"a\":]}", "malformed JSON at byte 5: unexpected character ']'"},
		{"{\"a\":\x00}", "malformed JSON at byte 5: unexpected character '\\x00'"},
		{"{\"a\":\xff}", "malformed JSON at byte 5: unexpected character 'ÿ'"},
	} {
		_, err := scanRouting([]byte(tc.body))
		require.Error(t, err, "%q", tc.body)
		assert.Equal(t, tc.want, err.Error(), "%q", tc.body)
	}
	_, err := NewRequest("/v1/chat/completions", []byte(`{"model":"m","a":[1,]}`))
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "We could not parse the JSON body of your request: malformed JSON at byte 20: unexpected character ']'", e.Message)
}

// TestScanRoutingDepth: nesting is bounded where encoding/json bounds it, 10,000 levels with
// the top object, the fault at the bracket that goes deeper.
func TestScanRoutingDepth(t *testing.T) {
	body := func(n int) []byte { // the top object and n arrays in it
		return []byte(`{"model":"m","x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
	}
	r, err := scanRouting(body(9999))
	require.NoError(t, err)
	assert.Equal(t, "m", r.Model)
	assert.True(t, json.Valid(body(9999)))
	_, err = scanRouting(body(10000))
	require.EqualError(t, err, "malformed JSON at byte 10016: nesting deeper than 10000")
	assert.False(t, json.Valid(body(10000)))
}

// oracle decodes what scanRouting should find with encoding/json: exact (case-sensitive) keys,
// last duplicate wins, null leaves the field unset.
func oracle(b []byte) (model string, stream bool, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) != nil || m == nil {
		return "", false, false
	}
	if raw, found := m["model"]; found {
		var s *string
		if json.Unmarshal(raw, &s) != nil {
			return "", false, false
		}
		if s != nil {
			model = *s
		}
	}
	if raw, found := m["stream"]; found {
		var v *bool
		if json.Unmarshal(raw, &v) != nil {
			return "", false, false
		}
		if v != nil {
			stream = *v
		}
	}
	return model, stream, true
}

// FuzzScanRouting checks the scanner against encoding/json on arbitrary bytes: same verdict on
// valid JSON, same model and stream, and offsets that delimit the model's string.
func FuzzScanRouting(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true}`, `{"messages":[{"role":"user","content":"hi"}],"model":"llama","top_k":5,"guided_json":{"a":[1,2.5e-3,null]}}`,
		`{"mod\u0065l":"x"}`, `{"model":"\ud83d\ude00"}`, `{"model":"a","model":null}`, `{"stream":false}`, `[1]`, `{"a":-0.0E+1}`, "{\"model\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := scanRouting(b)
		model, stream, ok := oracle(b)
		if !json.Valid(b) {
			if err == nil {
				t.Fatalf("accepted invalid JSON %q", b)
			}
			return
		}
		if ok != (err == nil) {
			t.Fatalf("scanner err=%v, encoding/json ok=%v for %q", err, ok, b)
		}
		if !ok {
			return
		}
		if r.Model != model || r.Stream != stream {
			t.Fatalf("scanner (%q,%v) != encoding/json (%q,%v) for %q", r.Model, r.Stream, model, stream, b)
		}
		if r.Model != "" {
			var m string
			if json.Unmarshal(b[r.ModelStart:r.ModelEnd], &m) != nil || m != r.Model {
				t.Fatalf("offsets [%d,%d) do not delimit %q in %q", r.ModelStart, r.ModelEnd, r.Model, b)
			}
		}
	})
}

// BenchmarkScanRouting compares the scanner with decoding the two fields by encoding/json, on a
// typical chat body with vLLM extras.
func BenchmarkScanRouting(b *testing.B) {
	body := []byte(`{"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` +
		strings.Repeat("Tell me about the weather in Paris. ", 20) + `"}],"model":"meta-llama/Llama-3.1-8B-Instruct",` +
		`"temperature":0.7,"top_k":40,"max_tokens":256,"stream":true,"guided_json":{"type":"object","properties":{"city":{"type":"string"}}}}`)
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if r, err := scanRouting(body); err != nil || !r.Stream {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var r struct {
				Model  string `json:"model"`
				Stream bool   `json:"stream"`
			}
			if err := json.Unmarshal(body, &r); err != nil || !r.Stream {
				b.Fatal(err)
			}
		}
	})
}

// The token estimate reads max_completion_tokens, else max_tokens, at the top level only: a
// nested decoy does not shrink it, and a value that is not a plain integer is ignored.
func TestScanMaxTokens(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"model":"m"}`, -1},
		{`{"model":"m","max_tokens":200}`, 200},
		{`{"max_tokens":200,"max_completion_tokens":50,"model":"m"}`, 50},
		{`{"metadata":{"max_tokens":1},"model":"m","messages":[{"max_tokens":2}]}`, -1},
		{`{"model":"m","max_tokens":1.5}`, -1},
		{`{"model":"m","max_tokens":-3}`, -1},
		{`{"model":"m","max_tokens":"9"}`, -1},
		{`{"model":"m","max_tokens":null}`, -1},
		{`{"model":"m","max_tokens":99999999999999999999}`, -1},
	} {
		r, err := scanRouting([]byte(tc.body))
		require.NoError(t, err, tc.body)
		assert.Equal(t, tc.want, r.MaxTokens, tc.body)
	}
}
