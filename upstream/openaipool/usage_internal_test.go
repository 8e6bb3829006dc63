package openaipool

import (
	"bytes"
	"testing"
)

func TestJSONCount(t *testing.T) {
	for _, tc := range []struct {
		obj  string
		want int64
	}{
		{`{"prompt_tokens":7,"total_tokens":11}`, 7},
		{`{"total_tokens": 11, "prompt_tokens" :  12 ,`, 12},
		{`{"prompt_tokens":null}`, -1},
		{`{"prompt_tokens":"7"}`, -1},
		{`{"prompt_tokens"7}`, -1},
		{`{"completion_tokens":4}`, -1},
		{`{"prompt_tokens":`, -1},
	} {
		if got := jsonCount([]byte(tc.obj), `"prompt_tokens"`); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.obj, got, tc.want)
		}
	}
}

// A count too large for any real usage stops growing instead of overflowing into a negative.
func TestJSONCountHuge(t *testing.T) {
	if got := jsonCount([]byte(`{"prompt_tokens":99999999999999999999999999}`), `"prompt_tokens"`); got <= 1<<50 {
		t.Fatalf("got %d", got)
	}
}

// FuzzLastIndexUsage: lastIndexUsage finds what bytes.LastIndex finds, for any bytes.
func FuzzLastIndexUsage(f *testing.F) {
	for _, s := range []string{"", "g", `"usage":`, `x"usage":`, `"usage":{"a":1},"usage":{}`, `"usag"usage":gg`,
		`ggggg"usage":ggg`, `"usage"`, `sage":`,
		`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4},"prompt_logprobs":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, tail []byte) {
		if got, want := lastIndexUsage(tail), bytes.LastIndex(tail, usageKey); got != want {
			t.Fatalf("%q: %d, want %d", tail, got, want)
		}
	})
}
