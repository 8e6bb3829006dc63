package chattemplate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"
)

// engineDiffers lists the probes where the engine (github.com/ardanlabs/jinja v1.8.0) renders
// otherwise than Python's Jinja2, and why. None of them occurs in the real templates of
// testdata; each is a place a future template could trip on (see the package doc).
var engineDiffers = map[string]string{
	"startswith":      "str.startswith with a tuple of prefixes is False",
	"print_types":     "none prints as an empty string (Jinja2: None), 1.0 as 1",
	"string_ops":      "'a' ~ none is 'a' (Jinja2: 'aNone')",
	"is_tests":        "a string is not a sequence",
	"undefined_attr":  "an undefined variable's attribute is undefined, not an error (lenient, like @huggingface/jinja)",
	"str_concat_dict": "str + dict concatenates the dict's repr instead of failing",
	"int_str_add":     "int + str concatenates instead of failing",
	"string_format":   "no format filter (Compile rejects templates that use it)",
	"math_float":      "no exponent literals (1e3); 2.5|round prints 3 (Jinja2: 3.0)",
	"string_escape":   `'\u00e9' in a string literal is not decoded`,
	"tojson_floats":   "no exponent literals: 1e16 reads as 1 followed by an undefined name",
}

// TestJinja2Probes renders small templates, one feature each, and compares with Python's Jinja2
// set up as transformers sets it up (testdata/jinja2_probes.json, from testdata/gen/probes.py).
func TestJinja2Probes(t *testing.T) {
	b, err := os.ReadFile("testdata/jinja2_probes.json")
	if err != nil {
		t.Fatal(err)
	}
	var probes []struct {
		Name     string  `json:"name"`
		Template string  `json:"template"`
		Output   *string `json:"output"`
		Raise    *string `json:"raise"`
		Error    *string `json:"error"`
	}
	if err := json.Unmarshal(b, &probes); err != nil {
		t.Fatal(err)
	}
	in := &Input{Messages: []Message{{Role: "user", Content: ptr("hi é")}}}
	for _, p := range probes {
		t.Run(p.Name, func(t *testing.T) {
			var out string
			tmpl, err := Compile(p.Template, Options{Now: func() time.Time { return goldenNow }})
			if err == nil {
				out, err = tmpl.Render(context.Background(), in)
			}
			var ok bool
			var re *RaiseError
			switch {
			case p.Output != nil:
				ok = err == nil && out == *p.Output
			case p.Raise != nil:
				ok = errors.As(err, &re) && re.Message == *p.Raise
			default:
				ok = err != nil
			}
			why, known := engineDiffers[p.Name]
			switch {
			case ok && known && why != "":
				t.Errorf("now renders as Jinja2 does (%q): drop it from engineDiffers", why)
			case !ok && !known:
				want := p.Error
				if p.Output != nil {
					want = p.Output
				} else if p.Raise != nil {
					want = p.Raise
				}
				t.Errorf("got %q, %v\nJinja2: %q", out, err, *want)
			}
		})
	}
}

// TestGenerationTag: transformers' {% generation %} block (training masks) renders its body.
func TestGenerationTag(t *testing.T) {
	tmpl := mustCompile(t, "{% for m in messages %}\n  {%- generation %}[{{ m.content }}]{% endgeneration %}\n{% endfor %}", Options{})
	out, err := tmpl.Render(context.Background(), hi)
	if err != nil || out != "[hi]" {
		t.Fatalf("got %q, %v", out, err)
	}
}

// TestSplitConcat: an output tag 'literal' + a + b ... is printed operand by operand (see
// splitConcat), which must print what the engine prints for the whole expression; the same
// expression in parentheses is left whole and gives the reference.
func TestSplitConcat(t *testing.T) {
	for _, c := range []struct {
		expr  string
		parts int
	}{
		{`'a' + 'b'`, 2},
		{`'<|im_start|>' + messages[0].role + '\n' + messages[0].content + '<|im_end|>' + '\n'`, 6},
		{`'a' + 1 + 2`, 3},
		{`'a' + 1.5`, 2},
		{`'a' + none + true`, 3},
		{`'a' + [1, 'x'] + {'k': [2]}`, 3},
		{`'a' + messages[0].content | upper + 'c'`, 3},
		{`'a' + messages | length * 2 + 'b'`, 3},
		{`'a' + (1 + 2) + 'b'`, 3},
		{`'a' + messages[0]['role'] + x.y + undefined_name`, 4},
		{`'a' + messages[0].content.split('e')[0] + 'b' % ()`, 3},
		{"'a'\n+\nmessages[0].role", 2},
		// Left whole.
		{`'a' ~ 'b' + 'c'`, 1},
		{`'a' + 'b' if true else 'c'`, 1},
		{`'a' + 'b' == 'ab'`, 1},
		{`'a' + 1 - 1`, 1},
		{`'a' + 1.5e+3`, 1},
		{`'a' + -1`, 1},
		{`'a' + 'b' and 'c'`, 1},
		{`'a' + 'b' in 'xab'`, 1},
		{`'a' + 'b' is string`, 1},
		{`messages[0].role + 'a'`, 1},
		{`('a' + 'b') + 'c'`, 1},
	} {
		if got := len(splitConcat(c.expr)); got != c.parts {
			t.Errorf("%s: %d parts, want %d", c.expr, got, c.parts)
		}
		split := mustCompile(t, "{{ "+c.expr+" }}", Options{})
		whole := mustCompile(t, "{{ ("+c.expr+") }}", Options{})
		in := &Input{Messages: []Message{{Role: "user", Content: ptr("héllo <|x|>")}}}
		got, gerr := split.Render(context.Background(), in)
		want, werr := whole.Render(context.Background(), in)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Errorf("%s: split %q, %v; whole %q, %v", c.expr, got, gerr, want, werr)
		}
	}
}
