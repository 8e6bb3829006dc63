package embed

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
)

func cosine(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// pairs are the wording changes the package doc reports, with whether each
// should pass the cache's default 0.95 threshold.
var pairs = []struct {
	kind, a, b string
	pass       bool
}{
	{"identical", "What is the capital of France?", "What is the capital of France?", true},
	{"case+punctuation", "What is the capital of France?", "what is the capital of france", true},
	{"spacing+punctuation", "How do I reverse a list in Python?", "how do i reverse a list in python ??", true},
	{"apostrophe", "Why doesn't my code compile?", "why doesnt my code compile", true},
	{"typo", "How do I reverse a list in Python?", "How do I revrese a list in Python?", false},
	{"one word changed", "How do I reverse a list in Python?", "How do I sort a list in Python?", false},
	{"one word changed (long)", "Explain the difference between a process and a thread in an operating system, with examples.", "Explain the difference between a process and a thread in an operating system, with an example.", false},
	{"one word added (long)", "Write a short poem about the sea at night, in the style of a sailor's song with four verses.", "Write a short poem about the sea at night, in the style of an old sailor's song with four verses.", false},
	{"one word changed (74 words)", long("The meeting"), long("The workshop"), true},
	{"negated (74 words)", long("It is safe"), long("It is not safe"), true},
	{"reordered", "Is coffee bad for your heart?", "Is for your heart coffee bad?", false},
	{"negated", "Is it safe to eat raw eggs?", "Is it not safe to eat raw eggs?", false},
	{"negated (short)", "is aspirin safe", "is aspirin not safe", false},
	{"paraphrase", "How do I reset my password?", "I forgot my password, what should I do?", false},
	{"unrelated", "What is the capital of France?", "How do I reverse a list in Python?", false},
	{"cjk identical", "日本の首都はどこですか", "日本の首都はどこですか？", true},
	{"cjk one char", "日本の首都はどこですか", "中国の首都はどこですか", false},
	{"accented case", "¿Dónde está la estación?", "¿DÓNDE ESTÁ LA ESTACIÓN?", true},
}

// long builds a 74-word prompt whose first words are head: in a long text
// one changed word is a small share of the features.
func long(head string) string {
	return head + " to review the quarterly budget before Friday. The draft covers staffing, travel, software " +
		"licences, office rent and the training plan for the new support team in Lisbon. Finance asked us to " +
		"cut ten percent without delaying the product launch, and the board wants a short written rationale " +
		"for every line we keep. Please read the attached spreadsheet, flag anything that looks duplicated " +
		"or overpriced, and summarise your recommendations in five bullet points."
}

func TestLexicalPairs(t *testing.T) {
	t.Parallel()
	e := NewLexical(0)
	var tab strings.Builder
	for _, p := range pairs {
		v, err := e.Embed(context.Background(), []string{p.a, p.b})
		if err != nil {
			t.Fatal(err)
		}
		c := cosine(v[0], v[1])
		fmt.Fprintf(&tab, "%-26s %.3f\n", p.kind, c)
		if (c >= 0.95) != p.pass {
			t.Errorf("%s: cosine %.3f, want pass(>=0.95)=%v\n%q\n%q", p.kind, c, p.pass, p.a, p.b)
		}
	}
	t.Logf("cosine similarities:\n%s", tab.String())
}

func TestLexicalVectors(t *testing.T) {
	t.Parallel()
	e := NewLexical(64)
	v, err := e.Embed(context.Background(), []string{"hello world", "", "?!...", "x"})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range v {
		if len(x) != 64 {
			t.Fatalf("vector %d has length %d", i, len(x))
		}
	}
	for _, i := range []int{0, 3} {
		if n := cosine(v[i], v[i]); math.Abs(n-1) > 1e-5 {
			t.Errorf("vector %d: squared norm %v, want 1", i, n)
		}
	}
	for _, i := range []int{1, 2} {
		if n := cosine(v[i], v[i]); n != 0 {
			t.Errorf("vector %d (no words): squared norm %v, want 0", i, n)
		}
	}
	if got := e.Name(); got != "lexical/lex1/64" {
		t.Errorf("Name() = %q", got)
	}
}

// TestLexicalStable pins a few vector components: they must not change
// across processes, platforms or releases without a LexicalVersion bump,
// because vectors are stored in Redis and compared across replicas.
func TestLexicalStable(t *testing.T) {
	t.Parallel()
	v, _ := NewLexical(0).Embed(context.Background(), []string{"Is it safe to eat raw eggs?"})
	var got []string
	for i, f := range v[0] {
		if f != 0 && len(got) < 6 {
			got = append(got, fmt.Sprintf("%d:%.4f", i, f))
		}
	}
	want := "26:0.0890 38:-0.2544 51:-0.2544 60:0.0890 77:0.0890 89:-0.0890"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("lexical vectors changed: got %s, want %s; bump LexicalVersion if intended", s, want)
	}
}

func TestLexicalContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := NewLexical(0).Embed(ctx, []string{"a"}); err == nil {
		t.Fatal("Embed with an ended context succeeded")
	}
}
