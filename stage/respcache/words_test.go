package respcache

import (
	"fmt"
	"strings"
	"testing"
)

func TestWordsOf(t *testing.T) {
	for in, want := range map[string]string{
		"What is the capital of France?":             "what is the capital of france",
		"  what\tis the\n\ncapital of  France ?":     "what is the capital of france",
		"What's it? Don’t guess!":                    "whats it dont guess",
		"I do not know":                              "i do not know",
		"“Quoted” (bracketed) «guillemets» 'single'": "quoted bracketed guillemets single",
		"well-known state-of-the-art — and – so":     "well known state of the art and so",
		"¿Dónde está? ¡Aquí!":                        "dónde está aquí",
		"ΛΟΓΟΣ λόγος":                                "λογοσ λόγοσ",
		"这个季度的收入？":                                   "这 个 季 度 的 收 入",
		"カタカナ、ひらがな。":                                 "カ タ カ ナ ひ ら が な",
		"zero\u200bwidth soft\u00adhyphen":           "zerowidth softhyphen",
		"3.5 3,000 1:30 .5 -5 5 - 3 5-3":             "3 . 5 3 , 000 1 : 30 . 5 - 5 5 - 3 5 - 3",
		"2+2? 2-2. x != 1, x!=1":                     "2 + 2 ? 2 - 2 x ! = 1 x ! = 1", // "?" between numbers counts
		"2*(3+4) (a+b)*c f(x)":                       "2 * ( 3 + 4 ) a + b ) * c f x",
		"5% of $5, C++ and C# a/b x > y x < y":       "5 % of $ 5 c + + and c # a / b x > y x < y",
		"It costs $5. Is it 5%?":                     "it costs $ 5 is it 5 %",
		"-x and - item":                              "- x and item",
		"covid-19 5'11":                              "covid - 19 5 ' 11",
		"e.g. U.S.A.":                                "e g u s a",
		"x²":                                         "x²",
		"?!...":                                      "",
		"":                                           "",
	} {
		if got := wordsOf(in); got != want {
			t.Errorf("wordsOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSameWords(t *testing.T) {
	long := strings.Repeat("the board expects a short summary and a clear recommendation ", 4) // 40 words
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"what is it", "what is it", true},
		{"", "", false},
		{"what is it", "what is", false},
		{"is it safe", "is it not safe", false},
		{"why do they", "why dont they", false},
		{"What, is IT?", "what is it", true},
		// A one-letter slip is often another word: no typo is forgiven, at any length.
		{"the quarterly summary", "the quartelry summary", false},
		{long + "quarterly definitely", long + "quartelry definitley", false},
		{long + "write a complaint letter", long + "write a compliant letter", false},
		{long + "stop scraping the site", long + "stop scrapping the site", false},
		{"ราคาเท่าไหร่", "ราคาเท่าไห่ร", false},
	} {
		a, b := wordsOf(c.a), wordsOf(c.b)
		if got := sameWords(a, b); got != c.same {
			t.Errorf("sameWords(%q, %q) = %v", c.a, c.b, got)
		}
		if got := sameWords(b, a); got != c.same {
			t.Errorf("sameWords(%q, %q) = %v", c.b, c.a, got)
		}
	}
}

// BenchmarkSameWords is the check a lexical semantic hit adds: the asked text's words, compared
// with the stored ones.
func BenchmarkSameWords(b *testing.B) {
	sentence := "The board expects a short summary, a clear recommendation and a list of risks. "
	for _, n := range []int{10, 60, 200} {
		text := strings.Join(strings.Fields(strings.Repeat(sentence, n/14+1))[:n], " ") + "?"
		stored := wordsOf(text)
		asked := strings.ToUpper(text)
		b.Run(fmt.Sprintf("words=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(asked)))
			b.ReportAllocs()
			for range b.N {
				if !sameWords(stored, wordsOf(asked)) {
					b.Fatal("not the same")
				}
			}
		})
	}
}
