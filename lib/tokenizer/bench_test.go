package tokenizer

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	tiktoken "github.com/tiktoken-go/tokenizer"
)

// mixedText returns about n bytes of mixed-language text, the same for every n: English prose,
// code, Chinese, Japanese, Russian, Arabic, Hindi, emoji, numbers and whitespace runs, in
// paragraphs of words drawn at random from samples of each.
func mixedText(n int) string {
	samples := []struct {
		weight int
		words  []string
		sep    string
	}{
		{40, strings.Fields(`The gateway receives a request, checks the API key, renders the chat template and
			counts the prompt tokens before it forwards anything upstream. Tokenization must be exact:
			a single different id changes what the model sees. It's the byte-level BPE that GPT-2
			introduced, with merges learned from data; they'll differ per model, and we've tested
			both Llama and Qwen files. Don't forget the whitespace runs, the contractions, or
			numbers such as 1234567 and 3.14159.`), " "},
		{15, strings.Fields(`func (t *Tokenizer) Encode(text string) []int { for i := 0; i < len(text); i++ {
			if x, ok := m[k]; ok && x > 0 { return nil } } } def f(x): return [y ** 2 for y in x
			if y % 2 == 0] SELECT id, name FROM users WHERE created_at >= '2024-01-01'; {"a": [1, 2,
			3], "b": {"c": null}} #include <stdio.h> x += 1; // comment /* block */`), " "},
		{15, strings.Split("我们|的|推理|网关|在|转发|请求|之前|会|计算|提示词|的|令牌|数量|。|分词|必须|完全|准确|，|否则|模型|看到|的|内容|就|不同|了|！|中文|文本|测试", "|"), ""},
		{5, strings.Split("日本語|の|テキスト|を|正しく|トークン|に|分割|できる|か|どう|か|を|確認|します|。|カタカナ|と|ひらがな|、|漢字", "|"), ""},
		{10, strings.Fields(`Шлюз получает запрос, проверяет ключ и считает токены запроса. Съешь же ещё этих
			мягких французских булок, да выпей чаю. Токенизация должна быть точной.`), " "},
		{5, strings.Fields(`يستقبل البوابة الطلب ويحسب عدد الرموز قبل إرساله إلى النموذج. नमस्ते दुनिया यह
			एक परीक्षण वाक्य है जिसमें हिंदी पाठ है।`), " "},
		{10, []string{"😀", "🚀", "👨‍👩‍👧‍👦", "🇯🇵", "👍🏽", "🎉", "2024", "42", "1,000,000", "3.14", "   ", "\t", "\n\n", "café", "naïve", "Ünïcödé", "—", "…", "«»"}, " "},
	}
	total := 0
	for _, s := range samples {
		total += s.weight
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.Grow(n + 1024)
	for b.Len() < n {
		r := rng.IntN(total)
		k := 0
		for r >= samples[k].weight {
			r -= samples[k].weight
			k++
		}
		s := samples[k]
		for range 10 + rng.IntN(40) {
			b.WriteString(s.words[rng.IntN(len(s.words))])
			b.WriteString(s.sep)
		}
		b.WriteString([]string{"\n", "\n\n", " ", "  "}[rng.IntN(4)])
	}
	return b.String()
}

// BenchmarkEncode encodes 1 MB of mixed-language text with this package (Qwen 3's, Llama 3.1's
// and cl100k_base's tokenizer.json) and, in the same loop, with github.com/tiktoken-go/tokenizer's
// cl100k_base (the fastest Go BPE we found; it cannot load tokenizer.json files). The cl100k rows
// are the like-for-like comparison (the same vocabulary and ids), and also report the share of
// the golden corpus on which tiktoken-go gives the reference's ids. It reports MB/s, tokens/s
// and allocations per encode of each, ours/tiktoken as x-tiktoken, and our MB/s with an empty
// piece cache (cold-cache-MB/s: the first time a text's words are seen).
func BenchmarkEncode(b *testing.B) {
	text := mixedText(1 << 20)
	tk, err := tiktoken.Get(tiktoken.Cl100kBase)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range models {
		b.Run(name, func(b *testing.B) {
			tok := model(b, name)
			var ours, cold, theirs time.Duration
			var oursTokens, theirTokens, oursAllocs, theirAllocs uint64
			var ms runtime.MemStats
			mallocs := func() uint64 { runtime.ReadMemStats(&ms); return ms.Mallocs }
			b.ResetTimer()
			for range b.N {
				m0 := mallocs()
				t0 := time.Now()
				ids := tok.Encode(text, Options{})
				ours += time.Since(t0)
				oursAllocs += mallocs() - m0
				oursTokens += uint64(len(ids))

				// The same with an empty piece cache: a first encounter with the text.
				tok.cache = &pieceCache{seed: tok.cache.seed}
				t0 = time.Now()
				tok.Encode(text, Options{})
				cold += time.Since(t0)

				m0 = mallocs()
				t0 = time.Now()
				tids, _, err := tk.Encode(text)
				theirs += time.Since(t0)
				theirAllocs += mallocs() - m0
				theirTokens += uint64(len(tids))
				if err != nil {
					b.Fatal(err)
				}
			}
			if name == "cl100k" {
				// Exactness on the golden corpus: the same vocabulary for both, so the same ids
				// are due (added-token text is plain text to tiktoken-go's Encode).
				g := readGolden(b, name)
				same := 0
				for _, c := range g.Cases {
					want := c.IDs
					if c.Plain != nil {
						want = c.Plain
					}
					got, _, _ := tk.Encode(c.Text)
					if slices.Equal(got, toUint(want)) {
						same++
					}
				}
				b.ReportMetric(100*float64(same)/float64(len(g.Cases)), "tiktoken-exact-%")
			}
			n := float64(b.N)
			mb := float64(len(text)) / 1e6
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(mb*n/ours.Seconds(), "MB/s")
			b.ReportMetric(float64(oursTokens)/ours.Seconds(), "tokens/s")
			b.ReportMetric(float64(oursAllocs)/n, "allocs/encode")
			b.ReportMetric(mb*n/cold.Seconds(), "cold-cache-MB/s")
			b.ReportMetric(mb*n/theirs.Seconds(), "tiktoken-MB/s")
			b.ReportMetric(float64(theirTokens)/theirs.Seconds(), "tiktoken-tokens/s")
			b.ReportMetric(float64(theirAllocs)/n, "tiktoken-allocs/encode")
			b.ReportMetric(theirs.Seconds()/ours.Seconds(), "x-tiktoken")
		})
	}
}

func toUint(ids []int) []uint {
	out := make([]uint, len(ids))
	for i, id := range ids {
		out[i] = uint(id)
	}
	return out
}

// BenchmarkDecode decodes the ids of the same text, all at once and one id at a time.
func BenchmarkDecode(b *testing.B) {
	text := mixedText(1 << 20)
	tok := model(b, "qwen3")
	ids := tok.Encode(text, Options{})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for range b.N {
			tok.Decode(ids, false)
		}
	})
	b.Run("StreamDecoder", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for range b.N {
			d := tok.NewDecoder(false)
			for _, id := range ids {
				d.Add(id)
			}
			d.Flush()
		}
	})
}
