package openaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The rules quoted in the test names are those of issue 38's reference, openai_responses.md (§
// numbers are its sections).

func jsonValue(t *testing.T, s []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(s, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return v
}

func TestResponsesToChat(t *testing.T) {
	for _, c := range []struct {
		name string
		body string
		prev []string
		want string // the chat body
	}{
		{"§6.1 input:\"text\" is one user message",
			`{"model":"m","input":"Say hi"}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"Say hi"}]}`},
		{"§6.1 instructions are a leading system message",
			`{"model":"m","instructions":"Be brief.","input":"hi"}`,
			nil, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}`},
		{"§2.2 an object with role and no type is a message; §6.1 developer is written system, text parts joined",
			`{"model":"m","input":[{"role":"developer","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},{"type":"message","role":"system","content":"s"},{"role":"user","content":"u"}]}`,
			nil, `{"model":"m","messages":[{"role":"system","content":"a\nb"},{"role":"system","content":"s"},{"role":"user","content":"u"}]}`},
		{"§6.1 user parts: input_text to text, input_image to image_url{url,detail}",
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"what is this?"},{"type":"input_image","image_url":"data:image/png;base64,AAAA","detail":"low"},{"type":"input_image","image_url":"https://x/y.png"}]}]}`,
			nil, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`},
		{"§6.1 function_call (1..n consecutive) is one assistant message with tool_calls, folded into the preceding assistant text; function_call_output is a tool message in order right after its calls",
			`{"model":"m","input":[{"role":"user","content":"weather?"},` +
				`{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"Looking.","annotations":[]}]},` +
				`{"type":"function_call","id":"fc_1","call_id":"chatcmpl-tool-1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},` +
				`{"type":"function_call","call_id":"functions.get_time:1","name":"get_time","arguments":"{}"},` +
				`{"type":"function_call_output","call_id":"chatcmpl-tool-1","output":"{\"temp\":20}"},` +
				`{"type":"function_call_output","call_id":"functions.get_time:1","output":"noon"}]}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"weather?"},` +
				`{"role":"assistant","content":"Looking.","tool_calls":[{"id":"chatcmpl-tool-1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},{"id":"functions.get_time:1","type":"function","function":{"name":"get_time","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"chatcmpl-tool-1","content":"{\"temp\":20}"},{"role":"tool","tool_call_id":"functions.get_time:1","content":"noon"}]}`},
		{"§6.1 function_call_output array output: its input_text parts joined (strings stay strings)",
			`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"},{"type":"input_text","text":"y"}]}]}`,
			nil, `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"x\ny"}]}`},
		{"§6.1 a reasoning item's text goes with the next assistant message as reasoning; encrypted_content never forwarded",
			`{"model":"m","input":[{"role":"user","content":"q"},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"sum"}],"content":[{"type":"reasoning_text","text":"think"}],"encrypted_content":"xyz"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]},{"role":"user","content":"q2"}]}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning":"think"},{"role":"user","content":"q2"}]}`},
		{"§6.1 a reasoning item with only a summary gives the summary's text",
			`{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"sum"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}]}`,
			nil, `{"model":"m","messages":[{"role":"assistant","content":null,"reasoning":"sum","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"o"}]}`},
		{"§2.3 function tools are flat in Responses, nested under function in chat; §6.1 parameters default to an empty object schema",
			`{"model":"m","input":"x","tools":[{"type":"function","name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false},"strict":true,"defer_loading":false},{"type":"function","name":"noargs","strict":null}]}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false},"strict":true}},{"type":"function","function":{"name":"noargs","parameters":{"type":"object","properties":{}}}}]}`},
		{"§6.1 tool_choice {type:function,name} is {type:function,function:{name}}",
			`{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"}}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`},
		{"§6.1 tool_choice \"auto\"|\"none\"|\"required\" is the same string",
			`{"model":"m","input":"x","tool_choice":"required"}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`},
		{"§6.1 tool_choice allowed_tools filters tools to the list; tool_choice is its mode",
			`{"model":"m","input":"x","tools":[{"type":"function","name":"a"},{"type":"function","name":"b"}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"b"}]}}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"b","parameters":{"type":"object","properties":{}}}}],"tool_choice":"required"}`},
		{"§6.1 text.format json_schema {name,schema,strict,description} is response_format json_schema, nested",
			`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true,"description":"d"},"verbosity":"low"}}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"},"strict":true,"description":"d"}}}`},
		{"§6.1 text.format json_object is response_format json_object; text is nothing",
			`{"model":"m","input":"x","text":{"format":{"type":"json_object"}}}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`},
		{"§6.1 max_output_tokens is max_tokens; temperature, top_p, parallel_tool_calls pass; reasoning.effort is reasoning_effort; user is user",
			`{"model":"m","input":"x","max_output_tokens":64,"temperature":0.2,"top_p":0.9,"parallel_tool_calls":false,"reasoning":{"effort":"low","summary":"auto"},"user":"u1","safety_identifier":"s1"}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":64,"temperature":0.2,"top_p":0.9,"parallel_tool_calls":false,"reasoning_effort":"low","user":"u1"}`},
		{"§6.1 safety_identifier is user when user is absent",
			`{"model":"m","input":"x","safety_identifier":"s1"}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"user":"s1"}`},
		{"§6.1 stream:true is stream:true,stream_options:{include_usage:true}",
			`{"model":"m","input":"x","stream":true,"stream_options":{"include_obfuscation":true}}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`},
		{"§6.1 include logprobs + top_logprobs is logprobs:true,top_logprobs:n",
			`{"model":"m","input":"x","include":["reasoning.encrypted_content","message.output_text.logprobs"],"top_logprobs":3}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":3}`},
		{"§2.1 unknown and gateway-side members are ignored, not refused (store, metadata, previous_response_id, service_tier, truncation disabled, background false, nulls)",
			`{"model":"m","input":"x","store":false,"metadata":{"k":"v"},"previous_response_id":"resp_1","service_tier":"auto","truncation":"disabled","background":false,"prompt_cache_key":"k","max_tool_calls":3,"brand_new_field":{"a":[1]},"temperature":null,"conversation":null}`,
			nil, `{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{"§5 previous_response_id: the parent's items come first, a function_call_output may answer the parent's call, instructions are not inherited",
			`{"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"chatcmpl-tool-9","output":"20C"}]}`,
			[]string{`{"type":"message","role":"user","content":"weather?"}`,
				` {"type":"reasoning","id":"rs_1_0","summary":[],"content":[{"type":"reasoning_text","text":"call it"}]}`,
				`{"id":"fc_1_1","type":"function_call","status":"completed","arguments":"{}","call_id":"chatcmpl-tool-9","name":"w"}`},
			`{"model":"m","messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"reasoning":"call it","tool_calls":[{"id":"chatcmpl-tool-9","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"chatcmpl-tool-9","content":"20C"}]}`},
		{"§6.1 an assistant message's output_text and refusal parts are its content; escapes decoded and written again",
			`{"model":"m","input":[{"role":"assistant","content":[{"type":"output_text","text":"caf\u00e9 \"x\""},{"type":"refusal","refusal":"no"}]},{"role":"user","content":"é\n"}]}`,
			nil, `{"model":"m","messages":[{"role":"assistant","content":"café \"x\"\nno"},{"role":"user","content":"é\n"}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var prev []Raw
			for _, p := range c.prev {
				prev = append(prev, Raw(p))
			}
			chat, _, err := ResponsesToChat([]byte(c.body), prev)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := jsonValue(t, chat), jsonValue(t, []byte(c.want)); !reflect.DeepEqual(got, want) {
				t.Errorf("chat body\n got %s\nwant %s", chat, c.want)
			}
			// The members come in the documented order: model, messages, then the rest.
			if !bytes.HasPrefix(chat, []byte(`{"model":`)) || !bytes.Contains(chat, []byte(`,"messages":[`)) {
				t.Errorf("member order: %s", chat)
			}
		})
	}
}

// The input items are translated during the body's one scan: what that must not change.
func TestResponsesToChatOnePass(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"a repeated input: the last wins, as in encoding/json", `{"model":"m","input":[{"role":"user","content":"a"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}],"input":[{"role":"user","content":"b"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"b"}]}`},
		{"an array input replaced by a string", `{"model":"m","input":[{"role":"user","content":"a"}],"input":"b"}`, `{"model":"m","messages":[{"role":"user","content":"b"}]}`},
		{"a refused item replaced by a later input", `{"model":"m","input":[{"type":"web_search_call"}],"input":"b"}`, `{"model":"m","messages":[{"role":"user","content":"b"}]}`},
		{"instructions after input still come first", `{"input":"b","model":"m","instructions":"i"}`, `{"model":"m","messages":[{"role":"system","content":"i"},{"role":"user","content":"b"}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			chat, _, err := ResponsesToChat([]byte(c.body), nil)
			if err != nil || !reflect.DeepEqual(jsonValue(t, chat), jsonValue(t, []byte(c.want))) {
				t.Errorf("got %s, %v; want %s", chat, err, c.want)
			}
		})
	}
	t.Run("a body that is not JSON after a refused item is refused as not JSON", func(t *testing.T) {
		_, _, err := ResponsesToChat([]byte(`{"model":"m","input":[{"type":"web_search_call"}],"x":}`), nil)
		var re *ResponsesError
		if !errors.As(err, &re) || !strings.Contains(re.Message, "parse the JSON") || re.Param != "" {
			t.Errorf("%v", err)
		}
	})
	t.Run("a member's type error comes before an item's", func(t *testing.T) {
		_, _, err := ResponsesToChat([]byte(`{"model":"m","input":[{"type":"web_search_call"}],"temperature":"x"}`), nil)
		var re *ResponsesError
		if !errors.As(err, &re) || re.Param != "temperature" {
			t.Errorf("%v", err)
		}
	})
}

func TestResponsesToChatMeta(t *testing.T) {
	body := `{"model":"m\u00e9","input":"x","store":false,"stream":true,"previous_response_id":"resp_p","instructions":"i","tools":[ {"type":"function","name":"f"} ],"tool_choice":"auto","metadata":{"a":"b"},"temperature":0.5,"user":"u"}`
	_, m, err := ResponsesToChat([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Model != "mé" || m.Store || !m.Stream || m.PreviousResponseID != "resp_p" {
		t.Errorf("meta %+v", m)
	}
	for name, got := range map[string]Raw{`"i"`: m.Instructions, `[ {"type":"function","name":"f"} ]`: m.Tools, `"auto"`: m.ToolChoice,
		`{"a":"b"}`: m.Metadata, `0.5`: m.Temperature, `"u"`: m.User} {
		if string(got) != name {
			t.Errorf("echo %s: got %s", name, got)
		}
	}
	if m.TopP != nil || m.Text != nil {
		t.Errorf("absent members echoed: %+v", m)
	}
	if _, m, _ := ResponsesToChat([]byte(`{"model":"m","input":"x"}`), nil); !m.Store {
		t.Error("§2.1 store defaults to true")
	}
}

func TestResponsesToChatErrors(t *testing.T) {
	for _, c := range []struct {
		name, body, prev  string
		param, code, text string
	}{
		{"§2.3 built-in tool web_search refused, param naming it", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "", "tools[0].type", "unsupported_value", "Tool type 'web_search' is not supported by this gateway."},
		{"§2.3 file_search", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"file_search","vector_store_ids":["v"]}]}`, "", "tools[1].type", "unsupported_value", "file_search"},
		{"§2.3 computer_use_preview", `{"model":"m","input":"x","tools":[{"type":"computer_use_preview"}]}`, "", "tools[0].type", "unsupported_value", "computer_use_preview"},
		{"§2.3 code_interpreter", `{"model":"m","input":"x","tools":[{"type":"code_interpreter"}]}`, "", "tools[0].type", "unsupported_value", "code_interpreter"},
		{"§2.3 mcp", `{"model":"m","input":"x","tools":[{"type":"mcp","server_label":"s"}]}`, "", "tools[0].type", "unsupported_value", "mcp"},
		{"§2.3 image_generation", `{"model":"m","input":"x","tools":[{"type":"image_generation"}]}`, "", "tools[0].type", "unsupported_value", "image_generation"},
		{"§2.3 a tool_choice naming a built-in", `{"model":"m","input":"x","tool_choice":{"type":"web_search_preview"}}`, "", "tool_choice.type", "unsupported_value", "web_search_preview"},
		{"§7 a function_call_output without its call", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"nope","output":"o"}]}`, "", "input[1].call_id", "", "nope"},
		{"§7 a function_call_output answering a call of another stored conversation", `{"model":"m","input":[{"type":"function_call_output","call_id":"c2","output":"o"}]}`, `{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`, "input[0].call_id", "", "c2"},
		{"§2.2 function_call needs call_id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, "", "input[0].call_id", "missing_required_parameter", ""},
		{"§2.2 function_call needs arguments as a string", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":{}}]}`, "", "input[0].arguments", "missing_required_parameter", ""},
		{"§2.2 item_reference needs an item store", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "", "input[0].type", "unsupported_value", "item_reference"},
		{"§2.2 other item types", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"web_search_call","id":"w"}]}`, "", "input[1].type", "unsupported_value", ""},
		{"§6.1 input_file is refused", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`, "", "input[0].content[0].type", "unsupported_value", ""},
		{"§2.2 input_image by file_id needs a Files API", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`, "", "input[0].content[0].image_url", "unsupported_value", ""},
		{"§6.1 images in a tool output", `{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"https://x"}]}]}`, "", "input[1].output[0].type", "unsupported_value", ""},
		{"§2.2 a message role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "", "input[0].role", "unsupported_value", ""},
		{"§2.2 a message needs content", `{"model":"m","input":[{"role":"user"}]}`, "", "input[0].content", "missing_required_parameter", ""},
		{"§2.2 an item is an object", `{"model":"m","input":["x"]}`, "", "input[0]", "", ""},
		{"§2.2 an item has a type or a role", `{"model":"m","input":[{"content":"x"}]}`, "", "input[0].type", "missing_required_parameter", ""},
		{"§7 conversation is unsupported", `{"model":"m","input":"x","conversation":"conv_1"}`, "", "conversation", "unsupported_parameter", "Unsupported parameter: 'conversation'."},
		{"§7 prompt is unsupported", `{"model":"m","prompt":{"id":"p"}}`, "", "prompt", "unsupported_parameter", ""},
		{"§2.1 truncation is auto or disabled", `{"model":"m","input":"x","truncation":"middle"}`, "", "truncation", "unsupported_value", ""},
		{"§2.1 model is required", `{"input":"x"}`, "", "model", "missing_required_parameter", ""},
		{"§7 a wrong type names its field", `{"model":"m","input":"x","temperature":"hot"}`, "", "temperature", "", "Invalid type for 'temperature'"},
		{"§7 max_output_tokens is an integer", `{"model":"m","input":"x","max_output_tokens":1.5}`, "", "max_output_tokens", "", ""},
		{"§7 invalid JSON", `{"model":"m",`, "", "", "", "parse the JSON body"},
		{"§7 not an object", `[1]`, "", "", "", "JSON object"},
		{"§6.1 text.format types", `{"model":"m","input":"x","text":{"format":{"type":"grammar"}}}`, "", "text.format.type", "unsupported_value", ""},
		{"§6.1 json_schema needs a schema", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n"}}}`, "", "text.format.schema", "missing_required_parameter", ""},
		{"§6.1 tool_choice strings", `{"model":"m","input":"x","tool_choice":"any"}`, "", "tool_choice", "unsupported_value", ""},
		{"§6.1 no messages at all", `{"model":"m","input":[]}`, "", "input", "missing_required_parameter", ""},
		{"§2.3 a function tool needs a name", `{"model":"m","input":"x","tools":[{"type":"function"}]}`, "", "tools[0].name", "missing_required_parameter", ""},
		{"§5 a stored item that is not JSON", `{"model":"m","input":"x"}`, `{"type":`, "previous_response_id", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var prev []Raw
			if c.prev != "" {
				prev = []Raw{Raw(c.prev)}
			}
			chat, _, err := ResponsesToChat([]byte(c.body), prev)
			var re *ResponsesError
			if !errors.As(err, &re) {
				t.Fatalf("got %s, %v; want a *ResponsesError", chat, err)
			}
			if re.Type != "invalid_request_error" || re.Param != c.param || re.Code != c.code || !strings.Contains(re.Message, c.text) {
				t.Errorf("got %+v; want param %q code %q message with %q", re, c.param, c.code, c.text)
			}
			var body struct {
				Error map[string]any `json:"error"`
			}
			if err := json.Unmarshal(re.AppendJSON(nil), &body); err != nil || len(body.Error) != 4 {
				t.Errorf("§7 error body %s: all four members (message, type, param, code): %v", re.AppendJSON(nil), err)
			}
		})
	}
}

var testMeta = ResponsesMeta{ID: "resp_0123abcd", CreatedAt: 1767000000, CompletedAt: 1767000002, Model: "qwen3", Store: true}

// testResponse is a Response as the tests check it.
type testResponse struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	CompletedAt       *int64 `json:"completed_at"`
	Error             *struct{ Code, Message string }
	IncompleteDetails *struct{ Reason string } `json:"incomplete_details"`
	Output            []struct {
		ID, Type, Status, Role, Name, Arguments string
		CallID                                  string `json:"call_id"`
		Content                                 []struct{ Type, Text, Refusal string }
		Summary                                 []any
	} `json:"output"`
	Usage *struct {
		InputTokens        int64 `json:"input_tokens"`
		OutputTokens       int64 `json:"output_tokens"`
		TotalTokens        int64 `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"input_tokens_details"`
		OutputTokensDetails struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		} `json:"output_tokens_details"`
	} `json:"usage"`
}

func decodeResponse(t *testing.T, b []byte) testResponse {
	t.Helper()
	var r testResponse
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return r
}

func chatAnswerJSON(content, reasoning string, calls []ToolCall, finish string, usage string) []byte {
	msg := map[string]any{"role": "assistant", "content": content}
	if reasoning != "" {
		msg["reasoning"] = reasoning
	}
	if calls != nil {
		msg["tool_calls"] = calls
	}
	a := map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": "qwen3",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}}
	if usage != "" {
		a["usage"] = json.RawMessage(usage)
	}
	b, _ := json.Marshal(a)
	return b
}

func TestChatToResponse(t *testing.T) {
	usage := `{"prompt_tokens":84,"completion_tokens":19,"total_tokens":103,"prompt_tokens_details":{"cached_tokens":5},"completion_tokens_details":{"reasoning_tokens":7}}`
	t.Run("§6.2 content is a message item with one output_text part; usage renamed with details; status completed", func(t *testing.T) {
		b, err := ChatToResponse(chatAnswerJSON("Hello!", "", nil, "stop", usage), testMeta)
		if err != nil {
			t.Fatal(err)
		}
		r := decodeResponse(t, b)
		if r.ID != "resp_0123abcd" || r.Object != "response" || r.Status != "completed" || r.CompletedAt == nil || *r.CompletedAt != 1767000002 || r.Error != nil || r.IncompleteDetails != nil {
			t.Errorf("response %s", b)
		}
		if len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Role != "assistant" || r.Output[0].Status != "completed" ||
			r.Output[0].ID != "msg_0123abcd_0" || len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Type != "output_text" || r.Output[0].Content[0].Text != "Hello!" {
			t.Errorf("output %s", b)
		}
		if u := r.Usage; u == nil || u.InputTokens != 84 || u.OutputTokens != 19 || u.TotalTokens != 103 || u.InputTokensDetails.CachedTokens != 5 || u.OutputTokensDetails.ReasoningTokens != 7 {
			t.Errorf("usage %s", b)
		}
	})
	t.Run("§6.2 tool_calls are function_call items, call_id the upstream's id verbatim; white space before calls is no message", func(t *testing.T) {
		calls := []ToolCall{{ID: "chatcmpl-tool-7c", Type: "function", Function: Function{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{ID: "functions.get_time:1", Type: "function", Function: Function{Name: "get_time", Arguments: `{}`}}}
		b, _ := ChatToResponse(chatAnswerJSON("\n\n", "", calls, "tool_calls", `{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}`), testMeta)
		r := decodeResponse(t, b)
		if r.Status != "completed" || len(r.Output) != 2 {
			t.Fatalf("%s", b)
		}
		for i, c := range calls {
			o := r.Output[i]
			if o.Type != "function_call" || o.CallID != c.ID || o.Name != c.Function.Name || o.Arguments != c.Function.Arguments || o.Status != "completed" || o.ID != "fc_0123abcd_"+strconv.Itoa(i) {
				t.Errorf("output[%d] %+v", i, o)
			}
		}
		if r.Usage.InputTokensDetails.CachedTokens != 0 || r.Usage.OutputTokensDetails.ReasoningTokens != 0 {
			t.Errorf("§3 details present as zeros: %s", b)
		}
		if !bytes.Contains(b, []byte(`"input_tokens_details":{"cached_tokens":0}`)) {
			t.Errorf("§3 details objects are written: %s", b)
		}
	})
	t.Run("§6.2 an empty or repeated tool-call id gets a minted call_id", func(t *testing.T) {
		calls := []ToolCall{{ID: "", Function: Function{Name: "a", Arguments: "{}"}}, {ID: "x", Function: Function{Name: "b"}}, {ID: "x", Function: Function{Name: "c"}}}
		r := decodeResponse(t, must(ChatToResponse(chatAnswerJSON("", "", calls, "tool_calls", ""), testMeta)))
		if got := []string{r.Output[0].CallID, r.Output[1].CallID, r.Output[2].CallID}; !reflect.DeepEqual(got, []string{"call_0123abcd_0", "x", "call_0123abcd_2"}) {
			t.Errorf("call ids %q", got)
		}
		if r.Usage != nil {
			t.Error("§3 no usage from the upstream is null")
		}
	})
	t.Run("§6.2 reasoning (and the older reasoning_content) is a reasoning item first, summary an empty array, content reasoning_text", func(t *testing.T) {
		for _, answer := range [][]byte{
			chatAnswerJSON("42", "think", nil, "stop", ""),
			[]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"42","reasoning_content":"think"},"finish_reason":"stop"}]}`),
		} {
			b := must(ChatToResponse(answer, testMeta))
			r := decodeResponse(t, b)
			if len(r.Output) != 2 || r.Output[0].Type != "reasoning" || r.Output[0].ID != "rs_0123abcd_0" || r.Output[0].Summary == nil ||
				r.Output[0].Content[0].Type != "reasoning_text" || r.Output[0].Content[0].Text != "think" || r.Output[1].Type != "message" {
				t.Errorf("%s", b)
			}
			if !bytes.Contains(b, []byte(`"summary":[]`)) {
				t.Errorf("summary must be an array: %s", b)
			}
		}
	})
	for _, c := range []struct{ finish, status, reason string }{
		{"length", "incomplete", "max_output_tokens"}, {"content_filter", "incomplete", "content_filter"},
		{"abort", "cancelled", ""}, {"error", "failed", ""}, {"tool_calls", "completed", ""},
	} {
		t.Run("§6.2 finish_reason "+c.finish+" is status "+c.status, func(t *testing.T) {
			b := must(ChatToResponse(chatAnswerJSON("partial", "", nil, c.finish, ""), testMeta))
			r := decodeResponse(t, b)
			if r.Status != c.status {
				t.Errorf("%s", b)
			}
			if c.reason != "" && (r.IncompleteDetails == nil || r.IncompleteDetails.Reason != c.reason) {
				t.Errorf("incomplete_details: %s", b)
			}
			if (c.status != "completed") != (r.Output[0].Status == "incomplete") {
				t.Errorf("§6.4 the item's status follows the finish reason: %s", b)
			}
			if (c.status == "failed") != (r.Error != nil && r.Error.Code == "server_error") {
				t.Errorf("error: %s", b)
			}
			if r.CompletedAt != nil && c.status != "completed" {
				t.Errorf("completed_at only when completed: %s", b)
			}
		})
	}
	t.Run("§6.2 refusal is a refusal part", func(t *testing.T) {
		b := must(ChatToResponse([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't."},"finish_reason":"stop"}]}`), testMeta))
		r := decodeResponse(t, b)
		if len(r.Output[0].Content) != 1 || r.Output[0].Content[0].Type != "refusal" || r.Output[0].Content[0].Refusal != "I can't." {
			t.Errorf("%s", b)
		}
	})
	t.Run("§3 echoed parameters; absent ones with OpenAI's defaults", func(t *testing.T) {
		_, meta, err := ResponsesToChat([]byte(`{"model":"qwen3","input":"x","instructions":"i","tools":[{"type":"function","name":"f"}],"temperature":0.5,"metadata":{"k":"v"},"previous_response_id":"resp_p","store":false}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		meta.ID, meta.CreatedAt = "resp_1", 5
		var got map[string]any
		_ = json.Unmarshal(must(ChatToResponse(chatAnswerJSON("a", "", nil, "stop", ""), meta)), &got)
		want := map[string]any{"instructions": "i", "tools": []any{map[string]any{"type": "function", "name": "f"}}, "temperature": 0.5,
			"metadata": map[string]any{"k": "v"}, "previous_response_id": "resp_p", "store": false, "top_p": nil, "tool_choice": "auto",
			"text": map[string]any{"format": map[string]any{"type": "text"}}, "parallel_tool_calls": true, "truncation": "disabled",
			"reasoning": map[string]any{"effort": nil, "summary": nil}, "max_output_tokens": nil, "model": "qwen3", "created_at": 5.0,
			"completed_at": nil, "background": false, "user": nil}
		for k, v := range want {
			if !reflect.DeepEqual(got[k], v) {
				t.Errorf("%s: got %v, want %v", k, got[k], v)
			}
		}
	})
	t.Run("a chat answer that is not one", func(t *testing.T) {
		for _, a := range []string{`{`, `{"choices":[]}`, `{"error":{"message":"x"}}`} {
			if _, err := ChatToResponse([]byte(a), testMeta); err == nil {
				t.Errorf("%s: no error", a)
			}
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// streamEvent is one SSE event as a client reads it.
type streamEvent struct {
	typ  string
	data map[string]any
	raw  []byte
}

// checkEvents reads an event stream as the strictest clients do (§4.4: openai-node 7.x's
// responses.stream() accumulator, openai-go's top-level error rule, the Agents SDK's terminal
// event) and fails on anything they would refuse. With exact, it also holds every done event's
// text to its deltas (which late fragments of an already closed call break, by design). It
// returns the events and the terminal event's response.
func checkEvents(t testing.TB, b []byte, exact bool) ([]streamEvent, []byte) {
	t.Helper()
	if len(b) == 0 || !bytes.HasSuffix(b, []byte("\n\n")) {
		t.Fatalf("a stream ends with a blank line: %q", b)
	}
	var evs []streamEvent
	for i, block := range strings.Split(string(b[:len(b)-2]), "\n\n") {
		typ, data, ok := strings.Cut(block, "\ndata: ")
		if !ok || !strings.HasPrefix(typ, "event: ") || strings.Contains(data, "\n") {
			t.Fatalf("§4.1 event %d is not 'event: <type>\\ndata: <one-line JSON>': %q", i, block)
		}
		typ = strings.TrimPrefix(typ, "event: ")
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, data)
		}
		if m["type"] != typ {
			t.Fatalf("§4.1 data.type equals the event name: %q vs %v", typ, m["type"])
		}
		if m["sequence_number"] != float64(i) {
			t.Fatalf("§4.1 sequence_number from 0, +1 per event: event %d has %v", i, m["sequence_number"])
		}
		if _, has := m["error"]; has {
			t.Fatalf("§4.4 openai-go: no top-level error key: %s", data)
		}
		evs = append(evs, streamEvent{typ, m, []byte(data)})
	}
	if len(evs) < 3 || evs[0].typ != "response.created" || evs[1].typ != "response.in_progress" {
		t.Fatalf("§4.4 node: response.created first (then in_progress): %v", types(evs))
	}
	type item struct {
		id, callID, kind string
		parts            int
		text             string
		done             bool
	}
	var out []*item
	open := -1
	ids := map[string]bool{}
	for i, e := range evs[2:] {
		d := e.data
		idx := -1
		if f, ok := d["output_index"].(float64); ok {
			idx = int(f)
		}
		cur := func() *item {
			if idx < 0 || idx >= len(out) || idx != open {
				t.Fatalf("event %d %s: output_index %d is not the open item (%d)", i+2, e.typ, idx, open)
			}
			if id, ok := d["item_id"]; ok && id != out[idx].id {
				t.Fatalf("§4.4 node: item_id %v must match the item's id %s", id, out[idx].id)
			}
			return out[idx]
		}
		switch e.typ {
		case "response.output_item.added":
			if open >= 0 {
				t.Fatalf("§4.3 one open item at a time: %d still open at event %d", open, i+2)
			}
			if idx != len(out) {
				t.Fatalf("§4.4 node: output_item.added output_index %d must equal output.length %d", idx, len(out))
			}
			it := d["item"].(map[string]any)
			id, _ := it["id"].(string)
			callID, _ := it["call_id"].(string)
			kind, _ := it["type"].(string)
			if id == "" || ids[id] || (kind == "function_call" && callID == "") || it["status"] != "in_progress" {
				t.Fatalf("§4.4 node: a new item with a fresh non-empty id (and call_id): %s", e.raw)
			}
			ids[id] = true
			out = append(out, &item{id: id, callID: callID, kind: kind})
			open = idx
		case "response.content_part.added":
			it := cur()
			if d["content_index"] != float64(it.parts) || it.kind == "function_call" {
				t.Fatalf("§4.4 node: content_part.added appends: %s", e.raw)
			}
			it.parts++
		case "response.output_text.delta", "response.reasoning_text.delta":
			it := cur()
			if it.parts == 0 || d["content_index"] != float64(it.parts-1) {
				t.Fatalf("§6.4 content_part.added precedes the first delta: %s", e.raw)
			}
			it.text += d["delta"].(string)
		case "response.function_call_arguments.delta":
			it := cur()
			it.text += d["delta"].(string)
		case "response.output_text.done", "response.reasoning_text.done", "response.function_call_arguments.done":
			it := cur()
			got := d["text"]
			if e.typ == "response.function_call_arguments.done" {
				got = d["arguments"]
			}
			if exact && got != it.text {
				t.Fatalf("§8.7 the deltas concatenated are the done text: %q vs %q", it.text, got)
			}
		case "response.content_part.done":
			cur()
		case "response.output_item.done":
			it := cur()
			if d["item"].(map[string]any)["id"] != it.id {
				t.Fatalf("ids identical in every event: %s", e.raw)
			}
			it.done = true
			open = -1
		case "response.completed", "response.incomplete", "response.failed":
			if i+2 != len(evs)-1 {
				t.Fatalf("§4.1 the terminal event is the last: %v", types(evs))
			}
			if open >= 0 {
				t.Fatalf("§6.4 every item opened is closed before the end")
			}
			r := d["response"].(map[string]any)
			if "response."+r["status"].(string) != e.typ {
				t.Fatalf("§4.2 the status matches the event: %s", e.raw)
			}
			output := r["output"].([]any)
			if len(output) != len(out) {
				t.Fatalf("§4.4 Agents: the terminal event carries all items: %d, %d streamed", len(output), len(out))
			}
			for k, o := range output {
				o := o.(map[string]any)
				if o["id"] != out[k].id || (out[k].kind == "function_call" && o["call_id"] != out[k].callID) {
					t.Fatalf("§6.4 ids and call_ids identical in the terminal output: %v vs %+v", o, out[k])
				}
				text := ""
				switch out[k].kind {
				case "function_call":
					text = o["arguments"].(string)
				default:
					for _, c := range o["content"].([]any) {
						text += c.(map[string]any)["text"].(string)
					}
				}
				if exact && text != out[k].text {
					t.Fatalf("the terminal output's text is the deltas': %q vs %q", text, out[k].text)
				}
			}
			var raw struct{ Response json.RawMessage }
			_ = json.Unmarshal(e.raw, &raw)
			return evs, raw.Response
		default:
			t.Fatalf("§4.4 node: an event type outside the SDK's union: %s", e.typ)
		}
	}
	t.Fatalf("no terminal event: %v", types(evs))
	return nil, nil
}

func types(evs []streamEvent) []string {
	var s []string
	for _, e := range evs {
		s = append(s, e.typ)
	}
	return s
}

// runStream feeds chunks and finishes with err.
func runStream(t testing.TB, meta ResponsesMeta, chunks []string, err error) (events, response []byte) {
	t.Helper()
	s := NewResponsesStream(meta)
	var out []byte
	for _, c := range chunks {
		var cerr error
		out, cerr = s.Chunk(out, []byte(c))
		if cerr != nil && err == nil {
			err = cerr
		}
	}
	return s.Finish(out, err)
}

func chatChunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + f + `}]}`
}

const usageChunk = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13,"completion_tokens_details":{"reasoning_tokens":2}}}`

func TestResponsesStreamCanonicalOrder(t *testing.T) {
	t.Run("§4.3 text answer", func(t *testing.T) {
		events, _ := runStream(t, testMeta, []string{chatChunk(`{"role":"assistant","content":""}`, ""), chatChunk(`{"content":"Hel"}`, ""),
			chatChunk(`{"content":"lo"}`, ""), chatChunk(`{}`, "stop"), usageChunk, "[DONE]"}, nil)
		evs, _ := checkEvents(t, events, true)
		want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
			"response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
			"response.output_item.done", "response.completed"}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
	})
	t.Run("§4.3 two function calls, not interleaved, no content_part events", func(t *testing.T) {
		events, _ := runStream(t, testMeta, []string{
			chatChunk(`{"role":"assistant","tool_calls":[{"index":0,"id":"call_Y","type":"function","function":{"name":"search","arguments":""}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"q"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\":1}"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":1,"id":"call_Z","type":"function","function":{"name":"search","arguments":"{}"}}]}`, ""),
			chatChunk(`{}`, "tool_calls"), usageChunk}, nil)
		evs, final := checkEvents(t, events, true)
		want := []string{"response.created", "response.in_progress",
			"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
			"response.function_call_arguments.done", "response.output_item.done",
			"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
			"response.output_item.done", "response.completed"}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
		r := decodeResponse(t, final)
		if r.Output[0].CallID != "call_Y" || r.Output[1].CallID != "call_Z" || r.Output[0].Arguments != `{"q":1}` {
			t.Errorf("§8.7 call_id identical across added, done and completed: %s", final)
		}
	})
	t.Run("§4.3 reasoning then text: reasoning item at 0 with reasoning_text part, message at 1", func(t *testing.T) {
		events, _ := runStream(t, testMeta, []string{chatChunk(`{"reasoning":"hm"}`, ""), chatChunk(`{"reasoning_content":"m"}`, ""), chatChunk(`{"content":"A"}`, "stop")}, nil)
		evs, _ := checkEvents(t, events, true)
		want := []string{"response.created", "response.in_progress",
			"response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
			"response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
			"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.done",
			"response.content_part.done", "response.output_item.done", "response.completed"}
		if got := types(evs); !reflect.DeepEqual(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
		if p := evs[3].data["part"].(map[string]any); p["type"] != "reasoning_text" {
			t.Errorf("part %v", p)
		}
	})
}

// assemble builds the whole chat completion a stream's chunks make, as the gateway's chat
// stream assembler would: content and reasoning concatenated, tool calls by index.
func assemble(t *testing.T, chunks []string) []byte {
	t.Helper()
	var content, reasoning strings.Builder
	var calls []ToolCall
	byIndex := map[int]int{}
	var finish *string
	a := ChatCompletion{Header: Header{ID: "chatcmpl-1", Object: "chat.completion", Model: "qwen3"}}
	for _, s := range chunks {
		if s == "[DONE]" {
			continue
		}
		c, err := DecodeChunk([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		if c.Usage != nil {
			a.Usage = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				finish = ch.FinishReason
			}
			if ch.Delta == nil {
				continue
			}
			if ch.Delta.Content != nil {
				content.WriteString(*ch.Delta.Content)
			}
			if ch.Delta.ReasoningContent != nil {
				reasoning.WriteString(*ch.Delta.ReasoningContent)
			}
			for _, tc := range ch.Delta.ToolCalls {
				k, ok := byIndex[tc.Index]
				if !ok {
					k = len(calls)
					byIndex[tc.Index] = k
					calls = append(calls, ToolCall{ID: tc.ID, Type: "function", Function: Function{Name: tc.Function.Name}})
				}
				calls[k].Function.Arguments += tc.Function.Arguments
			}
		}
	}
	text, r := content.String(), reasoning.String()
	msg := Message{Role: "assistant", Content: &text, ToolCalls: calls}
	if r != "" {
		msg.ReasoningContent = &r
	}
	a.Choices = []ChatChoice{{Message: msg, FinishReason: finish}}
	return a.AppendJSON(nil, Options{})
}

func TestResponsesStreamMatchesWhole(t *testing.T) {
	for _, c := range []struct {
		name   string
		chunks []string
	}{
		{"reasoning, text, two calls, usage", []string{
			chatChunk(`{"role":"assistant","content":""}`, ""), chatChunk(`{"reasoning":"Let me "}`, ""), chatChunk(`{"reasoning":"check."}`, ""),
			chatChunk(`{"content":"Checking "}`, ""), chatChunk(`{"content":"the <weather> \u2028é."}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"id":"chatcmpl-tool-1","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":1,"id":"functions.get_time:1","type":"function","function":{"name":"get_time","arguments":"{}"}}]}`, ""),
			chatChunk(`{}`, "tool_calls"), usageChunk, "[DONE]"}},
		{"§6.2 length: incomplete, the message incomplete", []string{chatChunk(`{"content":"Once upon"}`, ""), chatChunk(`{"content":" a"}`, "length"), usageChunk}},
		{"§6.3 white space before a tool call is no message", []string{chatChunk(`{"content":"\n\n"}`, ""),
			chatChunk(`{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"}}]}`, "tool_calls")}},
		{"white space that leads text goes into the first delta", []string{chatChunk(`{"content":"\n "}`, ""), chatChunk(`{"content":"Hi"}`, "stop")}},
		{"an answer of white space only is a message", []string{chatChunk(`{"content":"  "}`, ""), chatChunk(`{}`, "stop")}},
		{"an empty answer is an empty message", []string{chatChunk(`{"role":"assistant"}`, ""), chatChunk(`{}`, "stop")}},
		{"reasoning only", []string{chatChunk(`{"reasoning":"hm"}`, "stop")}},
		{"§6.2 a call without an id gets a minted call_id; a repeated id too", []string{
			chatChunk(`{"tool_calls":[{"index":0,"function":{"name":"a","arguments":"{}"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":1,"id":"x","function":{"name":"b","arguments":"1"}}]}`, ""),
			chatChunk(`{"tool_calls":[{"index":2,"id":"x","function":{"name":"c","arguments":"2"}}]}`, "tool_calls")}},
		{"content_filter", []string{chatChunk(`{"content":"no"}`, "content_filter")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			events, final := runStream(t, testMeta, c.chunks, nil)
			_, terminal := checkEvents(t, events, true)
			if !bytes.Equal(terminal, final) {
				t.Errorf("Finish's response is the terminal event's:\n%s\n%s", terminal, final)
			}
			whole, err := ChatToResponse(assemble(t, c.chunks), testMeta)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(final, whole) {
				t.Errorf("§4.1 the terminal event's response is ChatToResponse of the assembled answer:\nstream %s\nwhole  %s", final, whole)
			}
		})
	}
}

func TestResponsesStreamEndings(t *testing.T) {
	text := []string{chatChunk(`{"content":"Hel"}`, "")}
	for _, c := range []struct {
		name   string
		chunks []string
		err    error
		status string
		msg    string
	}{
		{"§6.3 upstream error mid-stream: response.failed, the open item incomplete", text, errors.New("connection reset"), "failed", "connection reset"},
		{"a stream that ends with no finish_reason ended early", append(text, "[DONE]"), nil, "failed", "ended before"},
		{"an upstream error event", append(text, `{"error":{"message":"boom","type":"InternalServerError","code":500}}`), nil, "failed", "boom"},
		{"§8.17 length: response.incomplete, not response.completed", []string{chatChunk(`{"content":"a"}`, "length")}, nil, "incomplete", ""},
		{"abort is failed: no SDK knows a cancelled event", []string{chatChunk(`{"content":"a"}`, "abort")}, nil, "failed", "abort"},
		{"failure before any chunk", nil, errors.New("timeout"), "failed", "timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			events, final := runStream(t, testMeta, c.chunks, c.err)
			evs, _ := checkEvents(t, events, true)
			if last := evs[len(evs)-1].typ; last != "response."+c.status {
				t.Errorf("terminal %s", last)
			}
			r := decodeResponse(t, final)
			if r.Status != c.status {
				t.Errorf("status %s", final)
			}
			if c.status == "failed" && (r.Error == nil || r.Error.Code != "server_error" || !strings.Contains(r.Error.Message, c.msg)) {
				t.Errorf("§4.4 failed carries error{code:server_error,message}: %s", final)
			}
			for _, o := range r.Output {
				if o.Status != "incomplete" {
					t.Errorf("§6.4 the cut item is incomplete: %s", final)
				}
			}
		})
	}
	t.Run("an unreadable chunk is an error and changes nothing; a second Finish appends nothing", func(t *testing.T) {
		s := NewResponsesStream(testMeta)
		out, err := s.Chunk(nil, []byte(`{"choices":[`))
		if err == nil || len(out) != 0 {
			t.Fatalf("%q, %v", out, err)
		}
		out, _ = s.Chunk(out, []byte(chatChunk(`{"content":"x"}`, "stop")))
		out, r1 := s.Finish(out, nil)
		out2, r2 := s.Finish(out, nil)
		if len(out2) != len(out) || !bytes.Equal(r1, r2) {
			t.Error("a second Finish")
		}
		if after, _ := s.Chunk(out, []byte(chatChunk(`{"content":"y"}`, ""))); len(after) != len(out) {
			t.Error("chunks after the end")
		}
		checkEvents(t, out, true)
	})
	t.Run("Start once: the caller sends created and in_progress when the upstream answered", func(t *testing.T) {
		s := NewResponsesStream(testMeta)
		out := s.Start(nil)
		out = s.Start(out)
		if n := bytes.Count(out, []byte("event: ")); n != 2 {
			t.Errorf("%d events", n)
		}
		out, _ = s.Chunk(out, []byte(chatChunk(`{"content":"x"}`, "stop")))
		out, _ = s.Finish(out, nil)
		checkEvents(t, out, true)
	})
}

// §8.9 and §8.10 at the translation level: a function-tool round trip by previous_response_id,
// the stored turn's items replayed, its instructions not.
func TestResponsesTurnItems(t *testing.T) {
	turn1 := []byte(`{"model":"m","instructions":"Answer in French.","input":"weather in Paris?","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],"tool_choice":"required"}`)
	_, meta, err := ResponsesToChat(turn1, nil)
	if err != nil {
		t.Fatal(err)
	}
	meta.ID = "resp_1"
	resp1 := must(ChatToResponse(chatAnswerJSON("", "use the tool", []ToolCall{{ID: "chatcmpl-tool-9", Type: "function", Function: Function{Name: "get_weather", Arguments: `{"city":"Paris"}`}}}, "tool_calls", ""), meta))
	items, err := ResponsesTurnItems(turn1, resp1)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 3 {
		t.Fatalf("input message, reasoning, call: %q", items)
	}
	turn2 := []byte(`{"model":"m","previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"chatcmpl-tool-9","output":"{\"temp\":20}"}]}`)
	chat, _, err := ResponsesToChat(turn2, items)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","messages":[{"role":"user","content":"weather in Paris?"},` +
		`{"role":"assistant","content":null,"reasoning":"use the tool","tool_calls":[{"id":"chatcmpl-tool-9","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"chatcmpl-tool-9","content":"{\"temp\":20}"}]}`
	if !reflect.DeepEqual(jsonValue(t, chat), jsonValue(t, []byte(want))) {
		t.Errorf("turn 2\n got %s\nwant %s", chat, want)
	}
	// A third turn chains: the parent's prev, then the parent's own items.
	meta.ID = "resp_2"
	resp2 := must(ChatToResponse(chatAnswerJSON("Il fait 20 degrés.", "", nil, "stop", ""), meta))
	more, err := ResponsesTurnItems(turn2, resp2)
	if err != nil {
		t.Fatal(err)
	}
	chat, _, err = ResponsesToChat([]byte(`{"model":"m","input":"and tomorrow?"}`), append(items, more...))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(chat), `"role":`); n != 5 || !strings.HasSuffix(string(chat), `{"role":"assistant","content":"Il fait 20 degrés."},{"role":"user","content":"and tomorrow?"}]}`) {
		t.Errorf("turn 3: %s", chat)
	}
	for _, bad := range [][2]string{{`{"input":1}`, `{"output":[]}`}, {`{"input":"x"}`, `{}`}, {`{"input":"x"}`, `{"output":[]`}} {
		if _, err := ResponsesTurnItems([]byte(bad[0]), []byte(bad[1])); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A background request is translated as any other, its meta saying so; EmptyResponse is its
// Response before the answer (and when it ends without one), background echoed.
func TestResponsesBackgroundMeta(t *testing.T) {
	_, meta, err := ResponsesToChat([]byte(`{"model":"m","input":"x","background":true}`), nil)
	if err != nil || !meta.Background {
		t.Fatalf("background: %v, %+v", err, meta)
	}
	meta.ID, meta.CreatedAt = "resp_1", 7
	var r struct {
		ID         string          `json:"id"`
		Status     string          `json:"status"`
		Background bool            `json:"background"`
		Output     []any           `json:"output"`
		Error      json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(EmptyResponse(meta, "queued", ""), &r); err != nil {
		t.Fatal(err)
	}
	if r.ID != "resp_1" || r.Status != "queued" || !r.Background || r.Output == nil || string(r.Error) != "null" {
		t.Fatalf("queued: %+v", r)
	}
	if err := json.Unmarshal(EmptyResponse(meta, "failed", "boom"), &r); err != nil || !strings.Contains(string(r.Error), "boom") {
		t.Fatalf("failed: %v %+v", err, r)
	}
}

// ChunkOfCompletion says in one chunk what a whole answer says: the stream translation of it
// ends in the Response ChatToResponse makes of the whole.
func TestChunkOfCompletion(t *testing.T) {
	chat := []byte(`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"sunny","reasoning":"think","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	chunk, err := ChunkOfCompletion(chat)
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeChunk(chunk)
	if err != nil {
		t.Fatalf("%s: %v", chunk, err)
	}
	if len(c.Choices) != 1 || c.Choices[0].Delta == nil || *c.Choices[0].Delta.Content != "sunny" || *c.Choices[0].FinishReason != "tool_calls" || c.Usage == nil {
		t.Fatalf("chunk %s", chunk)
	}
	meta := ResponsesMeta{ID: "resp_x", Model: "m", Store: true}
	s := NewResponsesStream(meta)
	if _, err := s.Chunk(nil, chunk); err != nil {
		t.Fatal(err)
	}
	_, streamed := s.Finish(nil, nil)
	whole, err := ChatToResponse(chat, meta)
	if err != nil {
		t.Fatal(err)
	}
	if string(streamed) != string(whole) {
		t.Fatalf("streamed:\n%s\nwhole:\n%s", streamed, whole)
	}
	if _, err := ChunkOfCompletion([]byte(`{"choices":[]}`)); err == nil {
		t.Fatal("an answer without a choice")
	}
}
