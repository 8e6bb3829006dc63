package chattemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func mustCompile(tb testing.TB, src string, opts Options) *Template {
	tb.Helper()
	t, err := Compile(src, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

func render(tb testing.TB, t *Template, body string) (string, error) {
	tb.Helper()
	in, err := DecodeRequest([]byte(body))
	if err != nil {
		return "", err
	}
	return t.Render(context.Background(), in)
}

// TestBadRequests: each request the template cannot take is an *InputError that names the field
// and maps to an OpenAI 400 a user can act on.
func TestBadRequests(t *testing.T) {
	td := mustTestdata(t)
	qwen := td.templates["qwen3"]
	for _, c := range []struct {
		name, body, param, msg string
	}{
		{"not json", `{"messages": [`, "", "not a chat completion request"},
		{"no messages", `{"messages": []}`, "messages", "at least one message"},
		{"messages not a list", `{"messages": {"role": "user"}}`, "", "array"},
		{"message not an object", `{"messages": ["hi"]}`, "messages[0]", "JSON object"},
		{"no role", `{"messages": [{"content": "hi"}]}`, "messages[0].role", "needs a role"},
		{"unknown role", `{"messages": [{"role": "wizard", "content": "hi"}]}`, "messages[0].role", `unknown role "wizard"`},
		{"role not a string", `{"messages": [{"role": 7, "content": "hi"}]}`, "messages[0]", "role must be of type string"},
		{"image part", `{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}`, "messages[0].content[0].type", `"image_url" are not supported`},
		{"part without text", `{"messages": [{"role": "user", "content": [{"type": "text"}]}]}`, "messages[0].content[0].text", "needs its text"},
		{"content a number", `{"messages": [{"role": "user", "content": 42}]}`, "messages[0].content", "string, a list of text parts or null"},
		{"user without content", `{"messages": [{"role": "user"}]}`, "messages[0].content", "needs a content"},
		{"tool call without name", `{"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"arguments": "{}"}}]}]}`, "messages[0].tool_calls[0].function.name", "name of the function"},
		{"tool not an object", `{"messages": [{"role": "user", "content": "hi"}], "tools": ["get_weather"]}`, "tools[0]", "must be a JSON object"},
		{"tool schema not an object", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": [1, 2]}}]}`, "tools[0].function.parameters", "JSON Schema object"},
		{"tool schema a string", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]}`, "tools[0].function.parameters", "JSON Schema object"},
		{"tool of another type", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "code_interpreter"}]}`, "tools[0].type", `"code_interpreter"`},
		{"tool without name", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {}}]}`, "tools[0].function.name", "needs a name"},
		{"document not an object", `{"messages": [{"role": "user", "content": "hi"}], "documents": ["text"]}`, "documents[0]", "JSON object"},
		{"kwargs not an object", `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": [true]}`, "chat_template_kwargs", "JSON object"},
		{"kwargs override messages", `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"messages": []}}`, "chat_template_kwargs", `"messages" cannot be set`},
		{"kwargs override bos", `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"bos_token": "<x>"}}`, "chat_template_kwargs", `"bos_token" cannot be set`},
		{"kwargs override raise", `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"raise_exception": 1}}`, "chat_template_kwargs", `"raise_exception" cannot be set`},
		{"kwargs too deep", `{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`, "chat_template_kwargs.x", "nested too deeply"},
		{"schema too deep", `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}}]}`, "tools[0].function.parameters", "nested too deeply"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := render(t, qwen, c.body)
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("got %q, %v; want an *InputError", out, err)
			}
			if ie.Param != c.param || !strings.Contains(ie.Msg, c.msg) {
				t.Errorf("InputError{Param: %q, Msg: %q}, want param %q and a message with %q", ie.Param, ie.Msg, c.param, c.msg)
			}
		})
	}
}

// TestRaise: a template's raise_exception is a *RaiseError carrying the template's own message
// (stage/prompt answers it with a 400).
func TestRaise(t *testing.T) {
	td := mustTestdata(t)
	_, err := render(t, td.templates["gemma3"], `{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}`)
	var re *RaiseError
	if !errors.As(err, &re) || re.Message != "Conversation roles must alternate user/assistant/user/assistant/..." {
		t.Fatalf("got %v, want gemma3's raise", err)
	}
	_, err = render(t, td.templates["features"], `{"messages": [{"role": "tool", "content": "42"}]}`)
	if !errors.As(err, &re) || re.Message != "A tool message must follow an assistant tool call" {
		t.Fatalf("got %v, want the features template's raise", err)
	}
}

// TestKwargs: chat_template_kwargs reach the template as top-level variables (Qwen3's
// enable_thinking), in any JSON type, and cannot replace the template's own.
func TestKwargs(t *testing.T) {
	tmpl := mustCompile(t, `{{ enable_thinking is defined }}|{{ enable_thinking }}|{{ opts | tojson }}|{{ messages | length }}|{{ add_generation_prompt }}`, Options{})
	out, err := render(t, tmpl, `{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": false,
		"chat_template_kwargs": {"enable_thinking": false, "opts": {"z": 1, "a": [true, null, 1.5, "é"]}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := `True|False|{"z": 1, "a": [true, null, 1.5, "é"]}|1|False`; out != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	// Go values given directly.
	out, err = tmpl.Render(context.Background(), &Input{
		Messages: []Message{{Role: "user", Content: ptr("hi")}},
		Kwargs:   map[string]any{"enable_thinking": true, "opts": map[string]any{"b": 2, "a": []any{int64(1), "x"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := `True|True|{"a": [1, "x"], "b": 2}|1|False`; out != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	// add_generation_prompt defaults to true, as in vLLM.
	out, _ = render(t, tmpl, `{"messages": [{"role": "user", "content": "hi"}]}`)
	if !strings.HasSuffix(out, "|True") {
		t.Errorf("add_generation_prompt absent: got %s, want it true", out)
	}
}

func ptr[T any](v T) *T { return &v }

// TestMessageVariables: what the template sees of each message, as vLLM passes it.
func TestMessageVariables(t *testing.T) {
	src := `{% for m in messages %}{{ m | tojson }}
{% endfor %}{{ tools | tojson }}|{{ documents | tojson }}`
	body := `{"messages": [
		{"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "extra": 1},
		{"role": "user", "name": "ann", "content": "hi"},
		{"role": "assistant", "content": null, "reasoning_content": "think", "tool_calls": [
			{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1, \"a\": [2.50, 1e2]}"}},
			{"id": "c2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
			{"id": "c3", "type": "function", "function": {"name": "h", "arguments": {"k": "v"}}}]},
		{"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r1"}, {"type": "text", "text": "r2"}]},
		{"role": "assistant", "content": "done", "tool_calls": []}],
		"tools": [{"function": {"parameters": {"type": "object", "properties": {}}, "description": "d", "name": "f"}, "type": "function"}],
		"documents": [{"title": "t", "text": "x"}]}`
	want := map[ContentFormat]string{
		FormatString: `{"role": "system", "content": "a\nb"}
{"role": "user", "content": "hi", "name": "ann"}
{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1, "a": [2.5, 100.0]}}}, {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {}}}, {"id": "c3", "type": "function", "function": {"name": "h", "arguments": {"k": "v"}}}], "reasoning": "think", "reasoning_content": "think"}
{"role": "tool", "content": "r1\nr2", "tool_call_id": "c1"}
{"role": "assistant", "content": "done"}
[{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}]|[{"title": "t", "text": "x"}]`,
		FormatOpenAI: `{"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
{"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ann"}
{"role": "assistant", "content": [], "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1, "a": [2.5, 100.0]}}}, {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {}}}, {"id": "c3", "type": "function", "function": {"name": "h", "arguments": {"k": "v"}}}], "reasoning": "think", "reasoning_content": "think"}
{"role": "tool", "content": "r1\nr2", "tool_call_id": "c1"}
{"role": "assistant", "content": [{"type": "text", "text": "done"}]}
[{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}]|[{"title": "t", "text": "x"}]`,
	}
	for format, w := range want {
		out, err := render(t, mustCompile(t, src, Options{ContentFormat: format}), body)
		if err != nil {
			t.Fatal(err)
		}
		if out != w {
			t.Errorf("%s:\n got %s\nwant %s", format, out, w)
		}
	}
	// No tools, no documents: both none, as transformers passes them.
	out, err := render(t, mustCompile(t, `{{ tools is none }}{{ documents is none }}{{ bos_token is defined }}`, Options{}), `{"messages": [{"role": "user", "content": "x"}]}`)
	if err != nil || out != "TrueTrueFalse" {
		t.Errorf("got %q, %v", out, err)
	}
}

// TestDecodeKeepsOrder: tool schemas and documents keep their key order into tojson, the thing
// Go maps would lose.
func TestDecodeKeepsOrder(t *testing.T) {
	in, err := DecodeRequest([]byte(`{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "y": {"b": 2, "a": 1}, "x": 0}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := mustCompile(t, `{{ tools[0].function.parameters | tojson }}`, Options{}).Render(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"z": 1, "y": {"b": 2, "a": 1}, "x": 0}`; out != want {
		t.Errorf("got %s, want %s", out, want)
	}
}

// TestDecodePaths: the one-pass decoder and the field-by-field one read every valid request of
// the corpus alike, and the fast one gives up on every bad request of TestBadRequests.
func TestDecodePaths(t *testing.T) {
	td := mustTestdata(t)
	for name, body := range td.cases {
		fast := decodeFast(body)
		checked, err := decodeChecked(body)
		if fast == nil || err != nil {
			t.Fatalf("%s: fast %v, checked %v", name, fast, err)
		}
		if !reflect.DeepEqual(fast, checked) {
			fb, _ := json.Marshal(fast)
			cb, _ := json.Marshal(checked)
			t.Errorf("%s: the decoders differ\nfast:    %s\nchecked: %s", name, fb, cb)
		}
	}
}

// TestUnquote: the fast decoder's string reading is encoding/json's.
func TestUnquote(t *testing.T) {
	for _, lit := range []string{`""`, `"plain"`, `"a\nb\t\"c\"\\d\/e"`, `"\u00e9\u4e16\ud83d\ude00"`, `"\ud83d"`, `"\ude00x"`,
		`"\ud83d\u0041"`, "\"\xff\xfe bad utf8 \xc3\"", `"\b\f\r"`, "\"raw é 🌍\""} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		if got, ok := unquote([]byte(lit)); !ok || got != want {
			t.Errorf("unquote(%s) = %q, %v; want %q", lit, got, ok, want)
		}
	}
}

// TestDictsLentPerRender: the messages' dicts a render borrows come back empty, so a later
// render of other messages sees none of an earlier one's keys, also when renders run at once
// (-race) and when RenderSpans renders more than once.
func TestDictsLentPerRender(t *testing.T) {
	tmpl := mustCompile(t, `{% for m in messages %}[{{ m.role }}:{{ m.content }}`+
		`{% if m.reasoning_content is defined %} thought {{ m.reasoning_content }}{% endif %}`+
		`{% if m.name is defined %} by {{ m.name }}{% endif %}]{% endfor %}`, Options{})
	special := NewSpecialTokens([]string{"<|x|>"})
	thought, plain := "hm", "hi"
	busy := &Input{Messages: []Message{{Role: "assistant", Content: &plain, Reasoning: &thought}, {Role: "user", Content: &plain, Name: "ann"}}}
	bare := &Input{Messages: []Message{{Role: "assistant", Content: &plain}, {Role: "user", Content: &plain}}}
	marked := "a <|x|> b"
	spans := &Input{Messages: []Message{{Role: "user", Content: &marked, Name: "bob"}, {Role: "assistant", Content: &plain}}}
	want := map[*Input]string{
		busy:  "[assistant:hi thought hm][user:hi by ann]",
		bare:  "[assistant:hi][user:hi]",
		spans: "[user:a <|x|> b by bob][assistant:hi]",
	}
	done := make(chan error)
	for range 4 {
		go func() {
			var err error
			for i := range 200 {
				in := []*Input{busy, bare, spans}[i%3]
				var out string
				if i%2 == 0 {
					out, _, err = tmpl.RenderSpans(context.Background(), in, special)
				} else {
					out, err = tmpl.Render(context.Background(), in)
				}
				if err == nil && out != want[in] {
					err = fmt.Errorf("render %d: %q, want %q", i, out, want[in])
				}
				if err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
