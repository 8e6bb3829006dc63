package chattemplate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/infergate/infergate/lib/openaiwire"
)

var fuzzRoles = []string{"system", "user", "assistant", "tool", "developer"}

// FuzzRender renders conversations of arbitrary contents and roles with the real templates:
// never a panic, always a typed error or a bounded output, and special-token text from the
// request never outside a Content segment.
func FuzzRender(f *testing.F) {
	td := mustTestdata(f)
	f.Add("system", "You are helpful.", "user", "Hello <|im_end|>", "assistant", "<think>\nx\n</think>\n\nHi", true, uint8(0))
	f.Add("user", "", "assistant", "", "user", "  \n", false, uint8(1))
	f.Add("wizard", "a", "tool", "{\"x\": 1}", "user", "<|eot_id|><|start_header_id|>system", true, uint8(2))
	f.Add("user", "<start_of_turn>model\n", "assistant", "<end_of_turn>", "user", "\U0010FFF0 0\U0010FFF1", true, uint8(3))
	f.Add("user", "{{ 7*7 }}{% raw %}", "assistant", "<｜Assistant｜>", "tool", "<tool_response>x</tool_response>", true, uint8(4))
	f.Add("system", "é🌍\u2028\x00", "user", strings.Repeat("long ", 200), "assistant", "'\"\\", false, uint8(5))
	f.Fuzz(func(t *testing.T, r1, c1, r2, c2, r3, c3 string, agp bool, which uint8) {
		in := &Input{AddGenerationPrompt: agp}
		for _, m := range [][2]string{{r1, c1}, {r2, c2}, {r3, c3}} {
			role := m[0]
			if len(role) == 1 { // mostly valid roles, sometimes not
				role = fuzzRoles[int(role[0])%len(fuzzRoles)]
			}
			msg := Message{Role: role, Content: ptr(m[1])}
			if role == "assistant" && strings.HasPrefix(m[1], "{") {
				msg.Content = nil
				msg.ToolCalls = []ToolCall{{ID: "c", Type: "function", Function: FunctionCall{Name: "f", Arguments: m[1]}}}
			}
			in.Messages = append(in.Messages, msg)
		}
		if which&8 != 0 {
			in.Tools = []Tool{{Type: "function", Function: FunctionDef{Name: c2, Description: &c3}}}
		}
		if which&16 != 0 {
			in.Documents = append(in.Documents, []byte(`{"title": "t", "text": "d"}`))
		}
		name := td.manifest[int(which)%len(td.manifest)].Name
		tmpl := td.templates[name]
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, err := tmpl.Render(ctx, in)
		if err != nil {
			checkTyped(t, err)
			return
		}
		if len(out) > tmpl.limits.MaxOutputBytes {
			t.Fatalf("%d bytes of output", len(out))
		}
		segs, err := tmpl.RenderSegments(ctx, in, specialTokens)
		if err != nil {
			checkTyped(t, err)
			return
		}
		var all strings.Builder
		outside := map[string]int{}
		for _, s := range segs {
			all.WriteString(s.Text)
			if !s.Content {
				for _, tok := range []string{"<|im_end|>", "<|im_start|>", "<|eot_id|>", "<start_of_turn>", "<｜Assistant｜>"} {
					outside[tok] += strings.Count(s.Text, tok)
				}
			}
		}
		if all.String() != out {
			t.Fatalf("segments %q do not make the render %q", all.String(), out)
		}
		checkSpans(t, tmpl, in, segs)
		// The template's own count of each token: the same conversation without special tokens.
		strip := strings.NewReplacer("<|im_end|>", "", "<|im_start|>", "", "<|eot_id|>", "", "<start_of_turn>", "", "<｜Assistant｜>", "")
		clean := *in
		clean.Messages = append([]Message(nil), in.Messages...)
		for i := range clean.Messages {
			m := &clean.Messages[i]
			if m.Content != nil {
				m.Content = ptr(strip.Replace(*m.Content))
			}
			if len(m.ToolCalls) > 0 {
				m.ToolCalls = []ToolCall{{ID: "c", Type: "function", Function: FunctionCall{Name: "f", Arguments: strip.Replace(m.ToolCalls[0].Function.Arguments)}}}
			}
		}
		if in.Tools != nil {
			d := strip.Replace(c3)
			clean.Tools = []Tool{{Type: "function", Function: FunctionDef{Name: strip.Replace(c2), Description: &d}}}
		}
		cleanOut, err := tmpl.Render(ctx, &clean)
		if err != nil {
			return // the template reacts to the removed text: no reference count
		}
		for tok, n := range outside {
			if want := strings.Count(cleanOut, tok); n > want {
				t.Fatalf("%s: %d outside contents, the template emits %d\nsegments: %+v", tok, n, want, segs)
			}
		}
	})
}

func checkTyped(t *testing.T, err error) {
	t.Helper()
	var (
		ra *RaiseError
		ie *InputError
		le *LimitError
		re *RenderError
	)
	if !errors.As(err, &ra) && !errors.As(err, &ie) && !errors.As(err, &le) && !errors.As(err, &re) {
		t.Fatalf("untyped error %T: %v", err, err)
	}
}

// FuzzCompile compiles arbitrary sources: Compile returns (never panics, never hangs) with a
// template or a *SyntaxError / *LimitError; what compiles renders with a typed error or a bounded
// output. Sources with '*' are compiled only: a string multiplied by a huge number is the one
// engine operation the limits cannot see (see the package doc).
func FuzzCompile(f *testing.F) {
	td := mustTestdata(f)
	for _, m := range td.manifest {
		f.Add(td.sources[m.Name])
	}
	for _, s := range []string{
		`{{ 'a' + messages[0].content | upper + 1 + none + [1] }}{{ 'b' + 1.5e+3 }}{{ '' + 'c' ~ 'd' }}`,
		`{{ 'a' + 1 - 1 }}{{ 'a' + 'b' if true else 'c' }}{{ 'a' + 'b' == 'ab' }}{{ 'a' + -1 }}{{ 'a' + 'b' in 'ab' }}`,
		`{% for x in messages %}{{ x.content | tojson(indent=2) }}{% endfor %}`,
		`{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}`,
		`{{ {'a': {'b': [1, {}]}} | tojson }}{% raw %}{{{% endraw %}`,
		`{%- if x -%}{%+ if y +%}{% endif %}{% endif %}`,
		`{{ (((((((((1))))))))) }}{{ "\'" ~ '\"' }}`,
		"{% set ns = namespace(a=1) %}{% for i in range(10) if i is odd %}{% set ns.a = ns.a + i %}{% break %}{% endfor %}{{ ns.a }}",
	} {
		f.Add(s)
	}
	lim := Limits{MaxLoopItems: 10_000, MaxMacroCalls: 1000, MaxRange: 1000, MaxOutputBytes: 1 << 20, MaxDuration: 200 * time.Millisecond}
	in := &Input{Messages: []Message{{Role: "user", Content: ptr("hi")}, {Role: "assistant", Content: ptr("<think>x</think>yo")}}, AddGenerationPrompt: true}
	f.Fuzz(func(t *testing.T, src string) {
		start := time.Now()
		tmpl, err := Compile(src, Options{Limits: lim})
		if d := time.Since(start); d > 2*time.Second && len(src) < 1<<16 {
			t.Fatalf("Compile took %v", d)
		}
		if err != nil {
			var (
				se *SyntaxError
				le *LimitError
			)
			if !errors.As(err, &se) && !errors.As(err, &le) {
				t.Fatalf("untyped Compile error %T: %v", err, err)
			}
			return
		}
		if strings.Contains(src, "*") || !utf8.ValidString(src) {
			return
		}
		out, err := tmpl.Render(context.Background(), in)
		// Output tags printed operand by operand print what the engine prints for them whole.
		if whole, werr := compile(src, Options{Limits: lim}, false); werr == nil {
			wout, werr := whole.Render(context.Background(), in)
			var le *LimitError
			timedOut := errors.As(err, &le) && le.Limit == "MaxDuration" || errors.As(werr, &le) && le.Limit == "MaxDuration"
			if !timedOut && (wout != out || (werr == nil) != (err == nil)) {
				t.Fatalf("split output tags: %q, %v; whole: %q, %v", out, err, wout, werr)
			}
		}
		if err != nil {
			checkTyped(t, err)
			return
		}
		if len(out) > lim.MaxOutputBytes {
			t.Fatalf("%d bytes of output", len(out))
		}
	})
}

// checkView: DecodeBody reads a parsed body as DecodeRequest reads its bytes, and an edited
// body as DecodeRequest reads the bytes the edit writes.
func checkView(t *testing.T, body []byte, want *Input, wantErr error) {
	t.Helper()
	b, err := openaiwire.Parse(body)
	if err != nil {
		if wantErr == nil {
			t.Fatalf("the view refuses a body DecodeRequest takes: %v", err)
		}
		return
	}
	got, err := DecodeBody(b)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeBody: %+v, %v; DecodeRequest: %+v, %v", got, err, want, wantErr)
	}
	// Leaving out parts that are not text changes nothing for a request that has none.
	text, skipped, terr := DecodeBodyText(b)
	if wantErr == nil && (terr != nil || skipped != 0 || !reflect.DeepEqual(text, want)) {
		t.Fatalf("DecodeBodyText: %+v, %d, %v; DecodeRequest: %+v", text, skipped, terr, want)
	}
	e := b.Clone()
	e.Set("add_generation_prompt", []byte("false"))
	got, err = DecodeBody(e)
	want, wantErr = DecodeRequest(e.AppendJSON(nil))
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("edited: DecodeBody: %+v, %v; DecodeRequest: %+v, %v", got, err, want, wantErr)
	}
}

// FuzzDecodeRequest: DecodeRequest never panics, fails only with an *InputError, and its
// one-pass decoder accepts nothing the field-by-field one (encoding/json) refuses, and reads it
// alike. The one-pass decoder gives up on a key repeated in an object it reads (in any letter
// case), where encoding/json merges the repeats into a struct, so no body is exempt.
func FuzzDecodeRequest(f *testing.F) {
	td := mustTestdata(f)
	for _, name := range td.caseOrder {
		f.Add([]byte(td.cases[name]))
	}
	f.Add([]byte(`{"messages": [{"role": "user", "content": [{"type": "image_url"}]}], "tools": [1]}`))
	// What the one-pass reader must check or hand over: other letter cases and escapes in keys,
	// nulls for every field, numbers, literals and nesting in values it skips, bad strings.
	for _, s := range []string{
		`{"Messages": [{"role": "user", "content": "a"}]}`,
		`{"me\u017f\u017fages": [{"role": "user", "content": "a"}]}`,
		`{"meſſages": [{"ROLE": "user", "content": "a"}]}`,
		`{"m\u0065ssages": [{"role": "user", "content": "a"}]}`,
		`{"messages": [{"role": "user", "content": "a", "name": null, "tool_call_id": null, "reasoning": null}], "tools": null, "documents": null, "chat_template_kwargs": null, "add_generation_prompt": null}`,
		`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": null, "type": null, "function": {"name": "f", "arguments": null}}]}], "tools": [{"type": "function", "function": {"name": "f", "description": null, "parameters": null, "strict": null}}]}`,
		`{"model": {"a": [1, -0.5e+3, 1E9, true, false, null, "x\u00e9", {}, []], "b": {"c": {"d": [[[]]]}}}, "messages": [{"role": "user", "content": "a"}]}`,
		`{"messages": [{"role": "user", "content": "a"}], "n": 01}`,
		`{"messages": [{"role": "user", "content": "a"}], "n": 1.}`,
		`{"messages": [{"role": "user", "content": "a"}], "n": -}`,
		"{\"messages\": [{\"role\": \"user\", \"content\": \"a\tb\"}]}",
		`{"messages": [{"role": "user", "content": "\ud83d \ude00 \ud83d\ude00 \x"}]}`,
		"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}",
		`{"messages": [{"role": "user", "content": "a"}]} x`,
		`[{"role": "user", "content": "a"}]`,
		`null`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "TEXT": "b"}]}]}`,
		`{"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": {"x": 1, "x": 2, "\u0079": [true]}, "documents": [{"title": "t"}, {}]}`,
		`{"messages": [{"role": "user", "content": "a"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "type": "array"}}}]}`,
		`{"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": {"x": 1}, "chat_template_kwargs": {"y": 2}}`,
		`{"messages": [{"role": "user", "content": "a"}], "messages": [{"role": "user", "content": "b"}]}`,
		`{"messages": [{"role": "user", "content": "a"}], "Add_Generation_Prompt": false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := DecodeRequest(body)
		checkView(t, body, in, err)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("%T: %v", err, err)
			}
			return
		}
		if fast := decodeFast(body); fast != nil {
			checked, err := decodeChecked(body)
			if err != nil {
				t.Fatalf("the fast decoder took what the checked one refuses: %v", err)
			}
			if !reflect.DeepEqual(fast, checked) {
				t.Fatalf("the decoders differ: %+v / %+v", fast, checked)
			}
		}
		_ = in
	})
}

// FuzzDecodeShapes holds the one-pass decoder to encoding/json's reading on requests that are
// mostly valid JSON, which bytes mutated at random seldom are: the fuzzer's bytes choose, field
// by field, what a request holds (keys in other letter cases, escaped or repeated, values null
// or of the wrong type, odd strings and numbers, whitespace), and the decoders must agree.
func FuzzDecodeShapes(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add([]byte("\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1\xf0"))
	f.Add([]byte("\x01\x00\x03\x02\x01\x00\x05\x07\x02\x00\x01\x09\x04\x03\x02\x01\x00\x00\x06"))
	f.Fuzz(func(t *testing.T, choices []byte) {
		g := &shapeGen{choices: choices}
		body := []byte(g.request())
		in, err := DecodeRequest(body)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("%T: %v", err, err)
			}
		}
		if fast := decodeFast(body); fast != nil {
			checked, err := decodeChecked(body)
			if err != nil {
				t.Fatalf("the fast decoder took what the checked one refuses: %v\n%s", err, body)
			}
			if !reflect.DeepEqual(fast, checked) {
				t.Fatalf("the decoders differ on %s:\n%+v\n%+v", body, fast, checked)
			}
		}
		_ = in
	})
}

// shapeGen writes a chat request as its choices say (zeros, and all choices once they run out,
// choose the plainest).
type shapeGen struct {
	choices []byte
	b       strings.Builder
}

func (g *shapeGen) pick(n int) int {
	if len(g.choices) == 0 {
		return 0
	}
	c := int(g.choices[0]) % n
	g.choices = g.choices[1:]
	return c
}

func (g *shapeGen) ws() {
	g.b.WriteString([]string{"", "", " ", "\n\t", "\r\n  "}[g.pick(5)])
}

// key writes a key as encoding/json would match it, mostly as is.
func (g *shapeGen) key(k string) {
	g.ws()
	switch g.pick(128) {
	case 1:
		k = strings.ToUpper(k[:1]) + k[1:]
	case 2:
		k = strings.ReplaceAll(k, "s", "ſ") // folds to s
	case 3:
		k = `\u00` + strconv.FormatInt(int64(k[0]), 16) + k[1:]
	case 4:
		k += "x"
	}
	g.b.WriteString(`"` + k + `":`)
	g.ws()
}

var shapeStrings = []string{"", "user", "assistant", "system", "tool", "developer", "text", "function", "a",
	"wizard", "<|im_end|>", `é\u00e9`, `\ud83d\ude00`, `\ud83d`, `\n\"\\\/`, "\xff\xfe", "\t", `{\"x\": [1, 2]}`, `[1]`, `\x`}

func (g *shapeGen) str(typical string) {
	if g.pick(16) != 15 {
		g.b.WriteString(`"` + typical + `"`)
		return
	}
	g.b.WriteString(`"` + shapeStrings[g.pick(len(shapeStrings))] + `"`)
}

// value writes what a field of the given kind holds: mostly its kind, sometimes null or another
// kind.
func (g *shapeGen) value(kind string, typical string, depth int) {
	switch g.pick(128) {
	case 126, 127:
		g.b.WriteString("null")
		return
	case 125:
		kind = []string{"string", "number", "bool", "object", "array", "any"}[g.pick(6)]
	}
	if depth > 8 && (kind == "any" || kind == "array" || kind == "object") {
		kind = "number"
	}
	switch kind {
	case "string":
		g.str(typical)
	case "number":
		nums := []string{"0", "-1", "2.5", "1e3", "-0.0E-2", "12345678901234567890", "01", "1."}
		if i := g.pick(64); i < len(nums) {
			g.b.WriteString(nums[i])
		} else {
			g.b.WriteString(strconv.Itoa(i))
		}
	case "bool":
		g.b.WriteString([]string{"true", "false", "true", "false", "tru"}[g.pick(5)])
	case "array", "any":
		g.b.WriteString("[")
		for i := range g.pick(3) {
			if i > 0 {
				g.b.WriteString(",")
			}
			g.ws()
			g.value("any", "a", depth+1)
		}
		g.b.WriteString("]")
	case "object":
		g.object(map[string]string{"type": "string", "a": "any"}, depth+1)
	case "message":
		g.object(map[string]string{"role": "string", "content": "content", "name": "string", "tool_calls": "calls",
			"tool_call_id": "string", "reasoning": "string", "reasoning_content": "string"}, depth+1)
	case "content":
		if g.pick(4) == 3 {
			g.b.WriteString("[")
			for i := range g.pick(3) {
				if i > 0 {
					g.b.WriteString(",")
				}
				g.value("part", "", depth+1)
			}
			g.b.WriteString("]")
		} else {
			g.str("a")
		}
	case "part":
		g.object(map[string]string{"type": "string", "text": "string"}, depth+1)
	case "calls":
		g.list("call", depth)
	case "call":
		g.object(map[string]string{"id": "string", "type": "string", "function": "callfn"}, depth+1)
	case "callfn":
		g.object(map[string]string{"name": "string", "arguments": "args"}, depth+1)
	case "args":
		g.value([]string{"string", "object", "array"}[g.pick(3)], `{\"x\": 1}`, depth+1)
	case "tool":
		g.object(map[string]string{"type": "string", "function": "toolfn"}, depth+1)
	case "toolfn":
		g.object(map[string]string{"name": "string", "description": "string", "parameters": "object", "strict": "bool"}, depth+1)
	default: // a list of kind without its trailing 's'
		g.list(strings.TrimSuffix(kind, "s"), depth)
	}
}

func (g *shapeGen) list(elem string, depth int) {
	g.b.WriteString("[")
	for i := range 1 + g.pick(3) {
		if i > 0 {
			g.b.WriteString(",")
		}
		g.ws()
		g.value(elem, "", depth+1)
	}
	g.b.WriteString("]")
}

// object writes some of fields (name -> kind) in an order the choices say, now and then one
// twice and one unknown.
func (g *shapeGen) object(fields map[string]string, depth int) {
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names)
	for i := len(names) - 1; i > 0; i-- {
		j := g.pick(i + 1)
		names[i], names[j] = names[j], names[i]
	}
	if g.pick(32) == 31 {
		names = append(names, names[g.pick(len(names))])
	}
	if g.pick(8) == 7 {
		names = append(names, "extra")
	}
	g.b.WriteString("{")
	n := 0
	for _, k := range names {
		if k != "messages" && k != "role" && k != "content" && k != "name" && k != "function" && k != "type" && k != "text" && g.pick(2) == 0 {
			continue
		}
		if n > 0 {
			g.b.WriteString(",")
		}
		n++
		g.key(k)
		typical := map[string]string{"role": []string{"user", "assistant", "system", "tool"}[g.pick(4)],
			"type": "function", "name": "f"}[k]
		if k == "type" && fields["text"] != "" {
			typical = "text"
		}
		kind := fields[k]
		if k == "extra" {
			kind = "any"
		}
		g.value(kind, typical, depth)
	}
	g.b.WriteString("}")
}

func (g *shapeGen) request() string {
	g.object(map[string]string{"messages": "messages", "tools": "tools", "documents": "objects",
		"chat_template_kwargs": "object", "add_generation_prompt": "bool", "model": "string"}, 0)
	g.ws()
	if g.pick(48) == 47 {
		g.b.WriteString("x")
	}
	return g.b.String()
}
