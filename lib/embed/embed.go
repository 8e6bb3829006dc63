// Package embed turns texts into L2-normalised float32 vectors for the
// semantic response cache: a built-in lexical embedder (no model, no
// network) and a client for an OpenAI-compatible /v1/embeddings model that
// the gateway already routes, which batches concurrent callers.
//
// Both have a Name (Lexical: "lexical/lex1/512", Remote: "remote/<model>")
// naming the vector space; a store that keeps vectors (Redis) must put it
// in its keys, since vectors of different spaces are incomparable.
//
// # What the lexical embedder matches
//
// Cosine similarities of the default Lexical (dim 512), from
// TestLexicalPairs (go test -run TestLexicalPairs -v ./lib/embed):
//
//	identical                                1.000  passes 0.95
//	case and punctuation changed             1.000  passes
//	extra spaces and "??"                    1.000  passes
//	"doesn't" vs "doesnt"                    1.000  passes
//	accented text upper vs lower case        1.000  passes
//	CJK, added full-width "？"               1.000  passes
//	one typo (swapped letters), 8 words      0.83
//	one word changed, 8 words                0.81
//	one word changed, 16 words               0.93
//	one word added, 19 words                 0.92
//	reordered words, 6 words                 0.86
//	"is it safe" vs "is it not safe", 7 w.   0.87
//	"is aspirin safe" vs "... not safe"      0.73
//	paraphrase (same question, new words)    0.45
//	unrelated                                0.03
//	CJK, one character changed               0.81
//	one word changed, 74 words               0.987  PASSES
//	"not" inserted, 74 words                 0.992  PASSES
//
// So at the cache's default threshold 0.95 it hits on the same wording up
// to case, punctuation, spacing and apostrophes, and misses on a changed,
// added or reordered word in a short prompt. In a long prompt one word is a
// small share of the features: an inserted "not" passes 0.95 from about 17
// words, a changed word from about 25 (measured on a budget-request prompt;
// see TestLexicalPairs's long cases), and no threshold tells these apart
// from a short question's rewording. So the response cache does not trust
// this similarity alone: with any embedder but an embeddings model (Remote,
// through its EmbeddingsModel method) a semantic hit also needs the same
// words in the same order, up to case, punctuation and spacing
// (stage/respcache, words.go).
//
// The lexical embedder runs at about 14-25 MB/s (a 290-byte prompt in
// 11-20 us, two allocations per call: the vectors) on this project's shared
// 2-core dev machine, 1.3-1.7x the cost of strings.ToLower+strings.Fields
// on the same text (BenchmarkLexical).
package embed

import "context"

// Embedder returns one L2-normalised vector per text, all of one length.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}
