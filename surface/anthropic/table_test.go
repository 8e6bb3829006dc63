package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The translator's conformance table: Anthropic requests and the OpenAI chat bodies they become,
// one or more per content block type and request field; the requests refused, with why; OpenAI
// answers and the Anthropic messages they become; OpenAI streams and the Anthropic event
// sequences they become.

const head = `"model":"m","max_tokens":10`

var requestPairs = []struct{ name, in, out string }{
	{"string content", `{` + head + `,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
	{"text block", `{` + head + `,"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`},
	{"text blocks", `{` + head + `,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`},
	{"system string", `{` + head + `,"system":"be nice","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"system","content":"be nice"},{"role":"user","content":"hi"}]}`},
	{"system blocks", `{` + head + `,"system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"system","content":"a\nb"},{"role":"user","content":"hi"}]}`},
	{"system role message", `{` + head + `,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"system","content":"now be brief"},{"role":"user","content":"go"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"system","content":"now be brief"},{"role":"user","content":"go"}]}`},
	{"image base64", `{` + head + `,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/4A=="}}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4A=="}}]}]}`},
	{"image url", `{` + head + `,"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`},
	{"document text", `{` + head + `,"messages":[{"role":"user","content":[{"type":"document","title":"T","context":"C","source":{"type":"text","media_type":"text/plain","data":"body"}}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"T"},{"type":"text","text":"C"},{"type":"text","text":"body"}]}]}`},
	{"document content", `{` + head + `,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"content","content":[{"type":"text","text":"p1"},{"type":"image","source":{"type":"url","url":"u"}}]}}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"p1"},{"type":"image_url","image_url":{"url":"u"}}]}]}`},
	{"document pdf", `{` + head + `,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"file","file":{"filename":"document.pdf","file_data":"data:application/pdf;base64,JVBERi0="}}]}]}`},
	{"tool_use and tool_result", `{` + head + `,"messages":[{"role":"user","content":"w?"},` +
		`{"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"tool_use","id":"t1","name":"f","input":{"a": 1}},{"type":"tool_use","id":"t2","name":"g","input":{}}]},` +
		`{"role":"user","content":[{"type":"text","text":"here"},{"type":"tool_result","tool_use_id":"t2","content":"two"},{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"one"}]}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"w?"},` +
			`{"role":"assistant","content":"checking","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"t2","type":"function","function":{"name":"g","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"t2","content":"two"},{"role":"tool","tool_call_id":"t1","content":"one"},{"role":"user","content":"here"}]}`},
	{"tool_use only, tool_result error", `{` + head + `,"messages":[{"role":"user","content":"w?"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"boom","is_error":true}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"w?"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"t1","content":"Error: boom"}]}`},
	{"tool_result error with blocks", `{` + head + `,"messages":[{"role":"user","content":"w?"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":[{"type":"text","text":"boom"}]}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"w?"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"t1","content":[{"type":"text","text":"Error: "},{"type":"text","text":"boom"}]}]}`},
	{"tool_result with image, no content", `{` + head + `,"messages":[{"role":"user","content":"w?"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_use","id":"t2","name":"f","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"pic"},{"type":"image","source":{"type":"url","url":"u"}}]},{"type":"tool_result","tool_use_id":"t2"}]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"w?"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"t2","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"t1","content":[{"type":"text","text":"pic"},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"tool","tool_call_id":"t2","content":""}]}`},
	{"thinking blocks not sent", `{` + head + `,"messages":[{"role":"user","content":"q"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"redacted_thinking","data":"xx"},{"type":"text","text":"a"}]},{"role":"user","content":"more"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"user","content":"more"}]}`},
	{"prefill", `{` + head + `,"messages":[{"role":"user","content":"json please"},{"role":"assistant","content":"{"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"json please"},{"role":"assistant","content":"{"}],"continue_final_message":true,"add_generation_prompt":false}`},
	{"empty final assistant", `{` + head + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[]}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"q"}]}`},
	{"sampling and metadata", `{` + head + `,"temperature":0.2,"top_p":0.5,"top_k":7,"stop_sequences":["a","\n"],"metadata":{"user_id":"u1"},"stream":true,"service_tier":"auto","cache_control":{"type":"ephemeral"},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"q"}],"stream":true,"stream_options":{"include_usage":true},"temperature":0.2,"top_p":0.5,"top_k":7,"stop":["a","\n"],"user":"u1"}`},
	{"tools and choice any", `{` + head + `,"tools":[{"name":"f","description":"d","input_schema":{"type":"object"},"strict":true},{"type":"custom","name":"g","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"},"strict":true}},{"type":"function","function":{"name":"g","parameters":{"type":"object","properties":{}}}}],"tool_choice":"required"}`},
	{"tool choice tool", `{` + head + `,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"q"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}`},
	{"tool choice none", `{` + head + `,"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"q"}],"tool_choice":"none"}`},
	{"thinking and output format", `{` + head + `,"thinking":{"type":"enabled","budget_tokens":20000},"output_config":{"format":{"type":"json_schema","schema":{"type":"object"}}},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":{"type":"object"}}},"reasoning_effort":"high"}`},
	{"effort, adaptive thinking", `{` + head + `,"thinking":{"type":"adaptive"},"output_config":{"effort":"medium"},"messages":[{"role":"user","content":"q"}]}`,
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"q"}],"reasoning_effort":"medium"}`},
	{"escapes", `{"model":"m\"1","max_tokens":10,"messages":[{"role":"user","content":"tab\there \u2028 \ud83d\ude00 <>&"}]}`,
		`{"model":"m\"1","max_tokens":10,"messages":[{"role":"user","content":"tab\there \u2028 😀 <>&"}]}`},
}

var refusals = []struct{ name, in, msg string }{
	{"not json", `{`, "not valid JSON"},
	// The byte named is the malformed number's first, and the backslash that cuts a string short.
	{"bad number", `{"model":"m","max_tokens":12.}`, "not valid JSON (at byte 26)"},
	{"cut escape", `{"model":"m\`, "not valid JSON (at byte 11)"},
	{"two objects", `{` + head + `,"messages":[{"role":"user","content":"q"}]} {}`, "one JSON object"},
	{"a NUL after the object", `{` + head + `,"messages":[{"role":"user","content":"q"}]}` + "\x00", "one JSON object"},
	{"no model", `{"max_tokens":1,"messages":[{"role":"user","content":"q"}]}`, "model: Field required"},
	{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"q"}]}`, "max_tokens: Field required"},
	{"max_tokens 0", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"q"}]}`, "max_tokens: must be at least 1"},
	{"no messages", `{` + head + `}`, "messages: Field required"},
	{"empty messages", `{` + head + `,"messages":[]}`, "at least one message"},
	{"assistant first", `{` + head + `,"messages":[{"role":"assistant","content":"a"},{"role":"user","content":"q"}]}`, `first message must use the "user" role`},
	{"bad role", `{` + head + `,"messages":[{"role":"tool","content":"q"}]}`, `role: Input should be "user" or "assistant"`},
	{"empty content", `{` + head + `,"messages":[{"role":"user","content":""}]}`, "non-empty content"},
	{"empty blocks", `{` + head + `,"messages":[{"role":"user","content":[]}]}`, "non-empty content"},
	{"empty text block", `{` + head + `,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "text content blocks must be non-empty"},
	{"null content", `{` + head + `,"messages":[{"role":"user","content":null}]}`, "messages.0.content: Field required"},
	{"missing content", `{` + head + `,"messages":[{"role":"user"}]}`, "content: Field required"},
	{"empty middle assistant", `{` + head + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":""},{"role":"user","content":"q"}]}`, "non-empty content"},
	{"unknown field", `{` + head + `,"frobnicate":1,"messages":[{"role":"user","content":"q"}]}`, "frobnicate: Extra inputs are not permitted"},
	{"unknown block field", `{` + head + `,"messages":[{"role":"user","content":[{"type":"text","text":"q","bogus":1}]}]}`, "bogus: Extra inputs"},
	{"unknown block type", `{` + head + `,"messages":[{"role":"user","content":[{"type":"search_result","text":"q"}]}]}`, `"search_result" cannot be translated`},
	{"server tool block", `{` + head + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]}]}`, `"server_tool_use" cannot be translated`},
	{"wrong type", `{"model":"m","max_tokens":"ten","messages":[{"role":"user","content":"q"}]}`, "max_tokens: Input should be a valid integer"},
	{"unanswered tool_use", `{` + head + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},{"role":"user","content":"no result"}]}`, "tool_use ids were found without tool_result blocks immediately after: t1"},
	{"final unanswered tool_use", `{` + head + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]}`, "without tool_result"},
	{"stray tool_result", `{` + head + `,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"zz","content":"x"}]}]}`, "unexpected tool_use_id found in tool_result blocks: zz"},
	{"tool_use input not object", `{` + head + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":[1]}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"}]}]}`, "input: Input should be an object"},
	{"tool_use in user turn", `{` + head + `,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]}`, "tool_use blocks belong in assistant messages"},
	{"image in assistant turn", `{` + head + `,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"image","source":{"type":"url","url":"u"}}]}]}`, "image blocks belong in user messages"},
	{"image bad media type", `{` + head + `,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"x"}}]}]}`, "media_type"},
	{"image file", `{` + head + `,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`, "Files API"},
	{"document url", `{` + head + `,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://x/a.pdf"}}]}]}`, "not a URL"},
	{"citations", `{` + head + `,"messages":[{"role":"user","content":[{"type":"document","citations":{"enabled":true},"source":{"type":"text","media_type":"text/plain","data":"d"}}]}]}`, "cannot cite"},
	{"server tool", `{` + head + `,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"q"}]}`, "server tool"},
	{"tool without schema", `{` + head + `,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"q"}]}`, "input_schema: Field required"},
	{"mcp servers", `{` + head + `,"mcp_servers":[{"type":"url","url":"u","name":"n"}],"messages":[{"role":"user","content":"q"}]}`, "mcp_servers: not supported"},
	{"container", `{` + head + `,"container":"c1","messages":[{"role":"user","content":"q"}]}`, "container: not supported"},
	{"temperature range", `{` + head + `,"temperature":1.5,"messages":[{"role":"user","content":"q"}]}`, "temperature: must be between 0 and 1"},
	{"thinking budget", `{` + head + `,"thinking":{"type":"enabled","budget_tokens":10},"messages":[{"role":"user","content":"q"}]}`, "budget_tokens: must be at least 1024"},
	{"tool choice type", `{` + head + `,"tool_choice":{"type":"sometimes"},"messages":[{"role":"user","content":"q"}]}`, "tool_choice.type"},
	{"system image", `{` + head + `,"system":[{"type":"image","source":{"type":"url","url":"u"}}],"messages":[{"role":"user","content":"q"}]}`, "system prompt holds text blocks only"},
}

func TestTranslateRequests(t *testing.T) {
	for _, tc := range requestPairs {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := translate([]byte(tc.in), false)
			require.Nil(t, err, "%v", err)
			require.True(t, json.Valid(tr.body), "%s", tr.body)
			assert.JSONEq(t, tc.out, string(tr.body))
			assert.Equal(t, strings.Contains(tc.in, `"stream":true`), tr.stream)
			assert.Positive(t, tr.estimate)
		})
	}
}

func TestTranslateRefusals(t *testing.T) {
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, err := translate([]byte(tc.in), false)
			require.NotNil(t, err, "accepted")
			assert.Equal(t, 400, err.status)
			assert.Equal(t, "invalid_request_error", err.typ)
			assert.Contains(t, err.msg, tc.msg)
		})
	}
}

func TestCountRequest(t *testing.T) {
	tr, err := translate([]byte(`{"model":"m","messages":[{"role":"user","content":"12345678"}],"tools":[{"name":"f","input_schema":{"type":"object"}}]}`), true)
	require.Nil(t, err)
	assert.NotContains(t, string(tr.body), "max_tokens")
	assert.Equal(t, (len("12345678")+len("f")+len(`{"type":"object"}`)+3)/4, tr.estimate)
	_, err = translate([]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}`), true)
	require.NotNil(t, err)
}

var responsePairs = []struct{ name, in, out string }{
	{"text", `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`,
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
	{"empty", `{"choices":[{"message":{"content":null},"finish_reason":"length"}]}`,
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
	{"reasoning, text, tools", `{"choices":[{"message":{"reasoning":"r","content":"t","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":" {\"x\": [1]} "}},{"function":{"name":"g","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}`,
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"thinking","thinking":"r","signature":""},{"type":"text","text":"t"},{"type":"tool_use","id":"c1","name":"f","input":{"x": [1]}},{"type":"tool_use","id":"toolu_1","name":"g","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":6,"output_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":4}}`},
	{"refusal", `{"choices":[{"message":{"content":null,"refusal":"no"},"finish_reason":"stop"}]}`,
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"no"}],"stop_reason":"refusal","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
	{"vllm stop string", `{"choices":[{"message":{"content":"a"},"finish_reason":"stop","stop_reason":"###"}]}`,
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"a"}],"stop_reason":"stop_sequence","stop_sequence":"###","usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
	{"vllm stop token", `{"choices":[{"message":{"content":"a"},"finish_reason":"stop","stop_reason":128001}]}`,
		`{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"a"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
}

func TestTranslateResponses(t *testing.T) {
	for _, tc := range responsePairs {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodeCompletion([]byte(tc.in))
			require.Nil(t, err, "%v", err)
			assert.JSONEq(t, tc.out, string(appendMessage(nil, "msg_1", "m", m)))
		})
	}
	for _, bad := range []string{`[]`, `{"choices":[]}`, `{"choices":[{"message":{"tool_calls":[{"function":{"name":"f","arguments":"{oops"}}]}}]}`,
		`{"choices":[{"message":{"tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}}]}`} {
		_, err := decodeCompletion([]byte(bad))
		require.NotNil(t, err, bad)
		assert.Equal(t, 502, err.status)
	}
}

// events runs chunks (each an SSE data payload, "" for none) through the stream translator and
// returns the event names and data.
func events(t testing.TB, raw string) (names []string, datas []string) {
	t.Helper()
	s := newStreamer("msg_1", "m", 7)
	s.start()
	// Feed byte by byte: events must not depend on how the stream is cut.
	for i := 0; i < len(raw); i++ {
		s.write([]byte{raw[i]})
	}
	s.end()
	for _, ev := range strings.Split(strings.TrimSuffix(string(s.out), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(ev, "\ndata: ")
		require.True(t, ok, "event %q", ev)
		require.True(t, strings.HasPrefix(name, "event: "))
		require.True(t, json.Valid([]byte(data)), "data %q", data)
		names = append(names, strings.TrimPrefix(name, "event: "))
		datas = append(datas, data)
	}
	return names, datas
}

func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	return b.String()
}

var streamPairs = []struct {
	name  string
	in    string
	names string // event names, space separated
	datas []string
}{
	{"text", sse(`{"choices":[{"delta":{"role":"assistant","content":""}}]}`, `{"choices":[{"delta":{"content":"He"}}]}`,
		`{"choices":[{"delta":{"content":"llo\n"},"finish_reason":"stop"}]}`, `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}`, `[DONE]`),
		"message_start ping content_block_start content_block_delta content_block_delta content_block_stop message_delta message_stop",
		[]string{
			`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":7,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`,
			`{"type":"ping"}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"He"}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"llo\n"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":9,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
			`{"type":"message_stop"}`,
		}},
	{"thinking, text, two tools with early arguments", sse(
		`{"choices":[{"delta":{"reasoning_content":"hm"}}]}`,
		`{"choices":[{"delta":{"content":"ok"}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\""}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c0","type":"function","function":{"name":"f","arguments":":1}"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c1","function":{"name":"g","arguments":"{}"}}]}}]}`,
		`{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`, `[DONE]`),
		"message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop " +
			"content_block_start content_block_delta content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop",
		[]string{2: `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
			3:  `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}`,
			8:  `{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"c0","name":"f","input":{}}}`,
			9:  `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}`,
			10: `{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":":1}"}}`,
			12: `{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"c1","name":"g","input":{}}}`,
			15: `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":7,"output_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`,
		}},
	{"empty answer", sse(`{"choices":[{"delta":{},"finish_reason":"length"}]}`, `[DONE]`),
		"message_start ping message_delta message_stop", nil},
	{"cut short", sse(`{"choices":[{"delta":{"content":"a"}}]}`), "message_start ping content_block_start content_block_delta error",
		[]string{4: `{"type":"error","error":{"type":"api_error","message":"The upstream's stream ended before the answer did."}}`}},
	{"in-band error", sse(`{"choices":[{"delta":{"content":"a"}}]}`, `{"error":{"message":"boom","type":"server_error","code":503}}`, `{"choices":[{"delta":{"content":"b"}}]}`),
		"message_start ping content_block_start content_block_delta error",
		[]string{4: `{"type":"error","error":{"type":"overloaded_error","message":"boom"}}`}},
	{"error event", "event: error\ndata: {\"x\":1}\n\n", "message_start ping error", nil},
	{"malformed chunk", sse(`{"choices":[{"delta":{"content":"a\u00"}}]}`), "message_start ping error", nil},
	{"interleaved tool arguments", sse(
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c0","function":{"name":"f","arguments":"{"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"c1","function":{"name":"g","arguments":"{"}}]}}]}`,
		`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}`),
		"message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta error", nil},
	{"comments, CRLF and [DONE] then junk", ": keep-alive\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\r\n\r\ndata: [DONE]\r\n\r\ndata: junk\n\n",
		"message_start ping content_block_start content_block_delta content_block_stop message_delta message_stop", nil},
}

func TestTranslateStreams(t *testing.T) {
	for _, tc := range streamPairs {
		t.Run(tc.name, func(t *testing.T) {
			names, datas := events(t, tc.in)
			assert.Equal(t, tc.names, strings.Join(names, " "))
			for i, want := range tc.datas {
				if want != "" && assert.Less(t, i, len(datas)) {
					assert.JSONEq(t, want, datas[i], "event %d", i)
				}
			}
		})
	}
}

// TestDecoderReuse: a pooled decoder keeps nothing of one request in the next, whatever the
// sizes (a request past maxPooled drops its storage; smaller ones reuse it).
func TestDecoderReuse(t *testing.T) {
	var big strings.Builder
	big.WriteString(`{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"},"strict":true}],"messages":[`)
	for i := range maxPooled + 10 {
		if i > 0 {
			big.WriteString(",")
		}
		if i%2 == 0 {
			big.WriteString(`{"role":"user","content":[{"type":"text","text":"u` + strings.Repeat("x", i%7) + `"},{"type":"image","source":{"type":"url","url":"i"}}]}`)
		} else {
			big.WriteString(`{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"a"}]}`)
		}
	}
	big.WriteString(`]}`)
	inputs := []string{big.String()}
	for _, tc := range requestPairs {
		inputs = append(inputs, tc.in)
	}
	for _, tc := range refusals {
		inputs = append(inputs, tc.in)
	}
	want := map[string]string{}
	for round := range 3 {
		for i, in := range inputs {
			if round == 1 {
				in = inputs[len(inputs)-1-i] // another order: other leftovers
			}
			tr, err := translate([]byte(in), false)
			got := ""
			if err != nil {
				got = "error " + err.msg
			} else {
				got = fmt.Sprintf("%s %s %v %d", tr.body, tr.model, tr.stream, tr.estimate)
			}
			if w, ok := want[in]; ok {
				require.Equal(t, w, got, "round %d", round)
			}
			want[in] = got
		}
	}
	_, err := translate([]byte(inputs[0]), false)
	require.Nil(t, err)
}
