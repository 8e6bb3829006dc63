package bridge

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"unicode/utf8"

	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/stage/granitestage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChatResultJSON: a whole answer's message and a stream's deltas give the same element;
// tool call deltas merge by index; the stage's parse-error header lands on its choice.
func TestChatResultJSON(t *testing.T) {
	whole := newAccumulator(1, true)
	_, err := whole.add([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"r",
		"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}],"citations":null},"finish_reason":"tool_calls"}]}`))
	require.NoError(t, err)
	streamed := newAccumulator(1, true)
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":"r"}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	} {
		_, err := streamed.add([]byte(c))
		require.NoError(t, err, c)
	}
	want := `{"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`
	for _, a := range []*accumulator{whole, streamed} {
		els, err := tensor.SplitBytes(a.response(true).Outputs[2].Data)
		require.NoError(t, err)
		assert.Equal(t, want, string(els[0]))
	}

	h := http.Header{}
	h.Add(granitestage.ParseErrorHeader, "choice 1: no citations <here>")
	h.Add(granitestage.ParseErrorHeader, "choice 9: out of range of the answer")
	h.Add(granitestage.ParseErrorHeader, "choice -1: bad")
	h.Add(granitestage.ParseErrorHeader, "garbage")
	a := newAccumulator(2, true)
	a.parseErrors(h)
	res := a.response(true)
	els, err := tensor.SplitBytes(res.Outputs[2].Data)
	require.NoError(t, err)
	assert.Equal(t, []string{`{"role":"assistant","content":""}`, `{"role":"assistant","content":"","parse_error":"no citations <here>"}`},
		[]string{string(els[0]), string(els[1])})

	for _, bad := range []string{
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1024}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":-1}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":{}}}]}`,
		`{"choices":[{"index":0,"delta":{"reasoning_content":1}}]}`,
	} {
		_, err := newAccumulator(1, true).add([]byte(bad))
		assert.Error(t, err, bad)
		_, err = newAccumulator(1, false).add([]byte(bad))
		assert.NoError(t, err, "a model without chat_result reads %s as before", bad)
	}
}

// FuzzChatResult: any answer or chunks (split at 0xff bytes) give an error or one chat_result
// element per choice, each one JSON object with role assistant; never a panic.
func FuzzChatResult(f *testing.F) {
	for _, s := range []string{
		"{\"choices\":[{\"index\":0,\"message\":{\"documents\":[{\"text\":\"\xfe\"}]}}]}",
		`{"choices":[{"index":0,"message":{"content":"a","reasoning_content":"b","citations":[{"x":1}],"documents":[],"hallucinations":null}}]}`,
		"{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{\"}}]}}]}\xff{\"choices\":[{\"index\":1,\"delta\":{\"parse_error\":\"p\"},\"finish_reason\":\"stop\"}]}",
		`{"choices":[{"index":0,"delta":{"citations":"x","content":"<\u2028>\ud800"}}]}`,
		`{"choices":[{"index":2,"text":"t"}]}`, `{"error":{"message":"m"}}`, `{`, ``,
	} {
		f.Add([]byte(s), "choice 0: bad")
	}
	f.Fuzz(func(t *testing.T, data []byte, header string) {
		a := newAccumulator(1, true)
		for _, c := range bytes.Split(data, []byte{0xff}) {
			if _, err := a.add(c); err != nil {
				return
			}
		}
		if utf8.ValidString(header) {
			a.parseErrors(http.Header{granitestage.ParseErrorHeader: {header}})
		}
		res := a.response(true)
		els, err := tensor.SplitBytes(res.Outputs[2].Data)
		if err != nil || len(els) != len(a.texts) {
			t.Fatalf("%d elements for %d choices (%v)", len(els), len(a.texts), err)
		}
		for _, el := range els {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(el, &m); err != nil || string(m["role"]) != `"assistant"` || !utf8.Valid(el) {
				t.Fatalf("element %q: %v", el, err)
			}
		}
	})
}
