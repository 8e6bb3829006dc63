package granite

import (
	"reflect"
	"regexp"
	"testing"
)

// The regular expressions the hand-written 3.2 matchers stand for (cite.go).
var (
	reCo32       = regexp.MustCompile(`<co>(\d+)</co>`)
	reCiteLine32 = regexp.MustCompile(`(?s)<co>(\d+)</co>\s*Document (\d+): "(.+)$`)
	reHallucHead = regexp.MustCompile(`(\d+)\.\s*Risk (low|high|unanswerable):`)
	reHallucItem = regexp.MustCompile(`(?s)(\d+)\.\s*Risk (low|high|unanswerable): (.+)$`)
)

// matchesRegexps fails t where the hand-written matchers differ from the regular expressions
// on text: the hallucination heads, and each chunk's item and citation line.
func matchesRegexps(t *testing.T, text string) {
	t.Helper()
	var want []int
	for _, l := range reHallucHead.FindAllStringIndex(text, -1) {
		want = append(want, l[0])
	}
	if got := hallucHeads(text); !reflect.DeepEqual(got, want) {
		t.Fatalf("hallucHeads(%q) = %v, regexp %v", text, got, want)
	}
	for _, c := range chunks(text, reHallucHead) {
		var want []string
		for _, m := range reHallucItem.FindAllStringSubmatch(c, -1) {
			want = append(want, m[1:]...)
		}
		var got []string
		if id, risk, rest, ok := hallucItem(c); ok {
			got = []string{id, risk, rest}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("hallucItem(%q) = %q, regexp %q", c, got, want)
		}
	}
	for _, c := range chunks(text, reCo32) {
		var want []string
		for _, m := range reCiteLine32.FindAllStringSubmatch(c, -1) {
			want = append(want, m[1:]...)
		}
		var got []string
		if cid, did, rest, ok := citeLine32(c); ok {
			got = []string{cid, did, rest}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("citeLine32(%q) = %q, regexp %q", c, got, want)
		}
	}
}

func TestHandMatchersAreRegexps(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "1. Risk low: a", "1.Risk high:x", "12. \t\n\f\rRisk unanswerable: b\n2. Risk low: c", "1. \vRisk low: v",
		"a1. Risk low:2. Risk high: z", "x. Risk low: y", ". Risk low: y", "1. Risk medium: q 3. Risk low: ", "1. Risk low: ",
		"1. Risk low:  ", "Risk Risk 1. Risk Risk low: 9. Risk high: é\n", "123.. Risk low: a", "9.  Risk lowest: a",
		"<co>1</co> Document 0: \"quote\"\n<co>2</co>\tDocument 12: \"q2", "<co>1</co>Document 0: \"", "<co>1</co>Document 0: \"x",
		"<co>1</co><co>2</co> Document 1: \"a\"", "<co>x</co> Document 1: \"a\"", "<co>1</co> Document : \"a\"", "<co>1</co> Document 1:\"a\"",
		"pre <co>3</co>\n\nDocument 4: \"multi\nline\"\n", "<co>1</co> Document 1: \"\xff\"",
	} {
		matchesRegexps(t, s)
	}
}
