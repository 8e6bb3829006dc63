package embed

import (
	"context"
	"strings"
	"testing"
)

// benchText is a typical chat prompt (~300 bytes).
const benchText = "My Go service returns 'connection refused' when I retry HTTP requests to the " +
	"payments API after a deploy. The client uses a shared http.Client with a 5 second timeout, and " +
	"the errors stop after about a minute. What is going on, and how should I handle retries? ¿Y en español?"

// BenchmarkLexical reports the embedder's throughput, and its cost relative
// to the least any text feature needs: lowercasing and splitting into words
// (strings.ToLower + strings.Fields), run in the same process.
func BenchmarkLexical(b *testing.B) {
	texts := []string{benchText}
	var base float64
	b.Run("baseline=lower+fields", func(b *testing.B) {
		b.SetBytes(int64(len(benchText)))
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			n += len(strings.Fields(strings.ToLower(benchText)))
		}
		base = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("lexical", func(b *testing.B) {
		e := NewLexical(0)
		ctx := context.Background()
		b.SetBytes(int64(len(benchText)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := e.Embed(ctx, texts); err != nil {
				b.Fatal(err)
			}
		}
		if base > 0 {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/base, "x-baseline")
		}
	})
}
