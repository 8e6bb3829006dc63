package jsonscan

import "testing"

// slow is the byte-at-a-time scan the word-at-a-time ones must agree with: SkipPlain's, with
// ascii SkipPlainASCII's, with html too SkipPlainHTML's.
func slow(b []byte, i int, ascii, html bool) int {
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || ascii && c >= 0x80 || html && (c == '<' || c == '>' || c == '&') {
			break
		}
	}
	return i
}

// TestEveryByteEverywhere: each skip stops where the byte-at-a-time scan does, for every byte
// value at every offset of two words and a tail, from every start, in bytes and in a string.
func TestEveryByteEverywhere(t *testing.T) {
	for c := range 256 {
		for at := range 19 {
			b := []byte("abcdefghijklmnopqrs")
			b[at] = byte(c)
			for from := range 4 {
				if got, want := SkipPlain(b, from), slow(b, from, false, false); got != want {
					t.Fatalf("SkipPlain: byte %#x at %d from %d: %d, want %d", c, at, from, got, want)
				}
				if got, want := SkipPlainASCII(b, from), slow(b, from, true, false); got != want {
					t.Fatalf("SkipPlainASCII: byte %#x at %d from %d: %d, want %d", c, at, from, got, want)
				}
				if got, want := SkipPlainHTML(b, from), slow(b, from, true, true); got != want {
					t.Fatalf("SkipPlainHTML: byte %#x at %d from %d: %d, want %d", c, at, from, got, want)
				}
				if SkipPlain(string(b), from) != SkipPlain(b, from) || SkipPlainASCII(string(b), from) != SkipPlainASCII(b, from) ||
					SkipPlainHTML(string(b), from) != SkipPlainHTML(b, from) {
					t.Fatalf("byte %#x at %d from %d: a string and its bytes stop apart", c, at, from)
				}
			}
		}
	}
}

func FuzzSkip(f *testing.F) {
	for _, s := range []string{"", "plain text of more than eight bytes", `a"b`, "ab\\cdefghij", "\xff\xfe\x80 \x1f", "caf\xc3\xa9 \"q\""} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, b []byte, from int) {
		if from < 0 || from > len(b) {
			from = 0
		}
		if got, want := SkipPlain(b, from), slow(b, from, false, false); got != want {
			t.Fatalf("SkipPlain(%q, %d) = %d, want %d", b, from, got, want)
		}
		if got, want := SkipPlainASCII(b, from), slow(b, from, true, false); got != want {
			t.Fatalf("SkipPlainASCII(%q, %d) = %d, want %d", b, from, got, want)
		}
		if got, want := SkipPlainHTML(b, from), slow(b, from, true, true); got != want {
			t.Fatalf("SkipPlainHTML(%q, %d) = %d, want %d", b, from, got, want)
		}
	})
}

// BenchmarkSkipPlain: 4 KB of string contents, word at a time against byte at a time.
func BenchmarkSkipPlain(b *testing.B) {
	text := []byte("The gateway renders the chat template and counts the prompt's tokens before it forwards anything. ")
	for len(text) < 4096 {
		text = append(text, text...)
	}
	text = append(text, '"')
	var base float64
	b.Run("bytes", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if slow(text, 0, false, false) != len(text)-1 {
				b.Fatal("bad")
			}
		}
		base = float64(b.Elapsed()) / float64(b.N)
	})
	b.Run("words", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			if SkipPlain(text, 0) != len(text)-1 {
				b.Fatal("bad")
			}
		}
		if base > 0 {
			b.ReportMetric(base/(float64(b.Elapsed())/float64(b.N)), "x-faster")
		}
	})
}
