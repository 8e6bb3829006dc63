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
