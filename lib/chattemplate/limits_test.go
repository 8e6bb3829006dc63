package chattemplate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

var hi = &Input{Messages: []Message{{Role: "user", Content: ptr("hi")}}}

// TestLimits: templates that loop, recurse or grow without end are stopped by a limit, as a
// *LimitError that maps to a 400, with memory and time bounded.
func TestLimits(t *testing.T) {
	lim := Limits{MaxLoopItems: 10_000, MaxMacroCalls: 1000, MaxRange: 5000, MaxOutputBytes: 1 << 20}
	for _, c := range []struct {
		name, src, limit string
	}{
		{"huge range", `{% for i in range(1000000000000) %}x{% endfor %}`, "MaxRange"},
		{"negative huge range", `{{ range(9223372036854775807, -9223372036854775807, -1) | length }}`, "MaxRange"},
		{"nested loops", `{% for i in range(5000) %}{% for j in range(5000) %}x{% endfor %}{% endfor %}`, "MaxLoopItems"},
		{"loop over a growing list", `{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% for x in ns.l %}{% endfor %}{% endfor %}`, "MaxLoopItems"},
		{"unbounded recursion", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, "MaxMacroCalls"},
		{"mutual recursion", `{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, "MaxMacroCalls"},
		{"output", `{% for i in range(5000) %}{{ 'x' * 1000 }}{% endfor %}`, "MaxOutputBytes"},
		{"tojson of a big value", `{% set ns = namespace(s='x' * 100000) %}{% for i in range(20) %}{{ [ns.s, ns.s, ns.s, ns.s, ns.s, ns.s, ns.s, ns.s, ns.s, ns.s, ns.s] | tojson }}{% endfor %}`, "MaxOutputBytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tmpl := mustCompile(t, c.src, Options{Limits: lim})
			start := time.Now()
			_, err := tmpl.Render(context.Background(), hi)
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != c.limit {
				t.Fatalf("got %v, want the %s limit", err, c.limit)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("took %v to stop", d)
			}
		})
	}
}

// TestDeadline: a render that outlives its context or MaxDuration stops at the next loop or
// macro call.
func TestDeadline(t *testing.T) {
	src := `{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}`
	tmpl := mustCompile(t, src, Options{Limits: Limits{MaxLoopItems: 1 << 40, MaxDuration: 50 * time.Millisecond}})
	_, err := tmpl.Render(context.Background(), hi)
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != "MaxDuration" {
		t.Fatalf("got %v, want MaxDuration", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tmpl = mustCompile(t, src, Options{Limits: Limits{MaxLoopItems: 1 << 40}})
	_, err = tmpl.Render(ctx, hi)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestEngineFailuresAreErrors: what makes the engine panic or fail is an error of the render,
// never a panic of the caller.
func TestEngineFailuresAreErrors(t *testing.T) {
	for _, src := range []string{
		`{{ 'x' * -1 }}`,
		`{{ 'x' * 9223372036854775807 }}`,
		`{{ messages[0].content.nope() }}`,
		`{{ namespace(a=1).a.b.c() }}`,
		`{{ range('a') }}`,
		`{{ raise_exception() }}`,
		`{{ [1] | tojson(indent=[1]) }}`,
		`{{ tojson }}{{ strftime_now(1) }}`,
	} {
		tmpl, err := Compile(src, Options{})
		if err != nil {
			continue // refused at Compile: fine too
		}
		out, err := tmpl.Render(context.Background(), hi)
		if err == nil {
			continue // lenient: fine as long as it is bounded
		}
		var (
			re *RenderError
			ra *RaiseError
			le *LimitError
		)
		if !errors.As(err, &re) && !errors.As(err, &ra) && !errors.As(err, &le) {
			t.Errorf("%s: got %q, %T %v; want a typed error", src, out, err, err)
		}
	}
}

// TestCompileErrors: a template that does not parse, or uses what the engine lacks, fails at
// Compile with a *SyntaxError; an oversized or over-nested one with a *LimitError.
func TestCompileErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`{% if x %}unclosed`, ""},
		{`{{ x `, "unclosed tag"},
		{`{{ x | format('a') }}`, `unknown filter "format"`},
		{`{% if x is divisibleby(3) %}{% endif %}`, `unknown test "divisibleby"`},
		{`{% filter center %}x{% endfilter %}`, `unknown filter "center"`},
		{`{% for %}{% endfor %}`, ""},
		{`{% raw %}never ends`, "raw block without endraw"},
	} {
		_, err := Compile(c.src, Options{})
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, c.want) {
			t.Errorf("%q: got %v, want a SyntaxError with %q", c.src, err, c.want)
		}
	}
	for _, c := range []struct {
		src   string
		limit string
	}{
		{strings.Repeat("x", 2<<20), "MaxTemplateBytes"},
		{strings.Repeat("{% if x %}", 100) + strings.Repeat("{% endif %}", 100), "MaxNesting"},
		{"{{ " + strings.Repeat("(", 100) + "1" + strings.Repeat(")", 100) + " }}", "MaxNesting"},
	} {
		_, err := Compile(c.src, Options{})
		var le *LimitError
		if !errors.As(err, &le) || le.Limit != c.limit {
			t.Errorf("got %v, want the %s limit", err, c.limit)
		}
	}
}
