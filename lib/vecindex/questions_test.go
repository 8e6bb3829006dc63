package vecindex

import (
	"context"
	"math/rand/v2"
	"strings"
	"unicode"

	"github.com/infergate/infergate/lib/embed"
)

// Synthetic but varied question-like prompts for measuring the index on
// the vectors the cache really stores: many templates and slot words, so
// prompts share wording in overlapping ways (as real traffic does) and
// near neighbours are close but rarely identical.
var (
	qTemplates = []string{
		"How do I {verb} {obj} in {lang}?",
		"What is the difference between {thing} and {thing2}?",
		"Is it safe to {act}?",
		"Is it safe to {act} {when}?",
		"Can you explain {concept} to {aud}?",
		"Write a {form} about {topic} for {aud}.",
		"Why does my {lang} program {fail} when I {verb} {obj}?",
		"Summarise the history of {topic} in {n} sentences.",
		"What are the best ways to {act} {when}?",
		"Give me {n} ideas to {act} with {aud}.",
		"Translate '{phrase}' into {human}.",
		"What does {concept} mean in {field}?",
		"How long does it take to {act}?",
		"Compare {thing} with {thing2} for {field}.",
		"My {lang} code says '{err}' when I {verb} {obj}, what should I do?",
		"Recommend {n} books about {topic} for {aud}.",
		"What should I know before I {act}?",
		"Explain how {concept} works, step by step.",
		"Is {thing} better than {thing2} for {field}?",
		"Draft an email to {aud} about {topic}.",
	}
	qSlots = map[string][]string{
		"verb":    {"sort", "reverse", "filter", "parse", "serialize", "merge", "split", "deduplicate", "cache", "validate", "stream", "compress", "encrypt", "paginate", "retry", "benchmark", "profile", "mock", "log", "index"},
		"obj":     {"a list", "a dictionary", "a JSON file", "a CSV file", "a string", "an array of structs", "a linked list", "HTTP requests", "database rows", "a large log file", "user input", "dates", "a binary tree", "environment variables", "a config file", "images", "websocket messages", "a matrix", "query results", "timestamps"},
		"lang":    {"Python", "Go", "Rust", "JavaScript", "TypeScript", "Java", "C++", "C#", "Ruby", "Kotlin", "Swift", "PHP", "Scala", "Haskell", "Elixir"},
		"thing":   {"a process", "TCP", "a mutex", "SQL", "REST", "a stack", "RAM", "an index fund", "a Roth IRA", "baking soda", "espresso", "a virus", "weather", "a comet", "socialism", "a sonnet", "latency", "HTTP/2", "Docker", "a loan"},
		"thing2":  {"a thread", "UDP", "a semaphore", "NoSQL", "GraphQL", "a queue", "disk storage", "an ETF", "a 401k", "baking powder", "drip coffee", "a bacterium", "climate", "an asteroid", "communism", "a haiku", "throughput", "HTTP/3", "a virtual machine", "a mortgage"},
		"act":     {"eat raw eggs", "run a marathon", "take ibuprofen with coffee", "learn a new language", "invest in bonds", "repaint a kitchen", "train a puppy", "travel alone in Japan", "fast for a day", "swim after eating", "drink tap water in Lisbon", "lift weights every day", "sleep four hours a night", "buy a used car", "refinance a mortgage", "start a vegetable garden", "change a flat tire", "clean a cast iron pan", "freeze cooked rice", "charge a phone overnight"},
		"when":    {"during pregnancy", "in winter", "at night", "on a budget", "after surgery", "as a beginner", "at sixty", "in a small apartment", "with kids", "every morning"},
		"concept": {"recursion", "inflation", "photosynthesis", "entropy", "compound interest", "garbage collection", "quantum entanglement", "supply and demand", "natural selection", "public key cryptography", "the CAP theorem", "gradient descent", "plate tectonics", "opportunity cost", "the placebo effect", "consensus algorithms", "backpropagation", "the immune system", "black holes", "tail latency"},
		"aud":     {"a five year old", "a beginner", "my manager", "a teenager", "a new employee", "my grandmother", "a software engineer", "a doctor", "a customer", "a student"},
		"form":    {"short poem", "limerick", "haiku", "blog post", "tweet", "product description", "short story", "speech", "cover letter", "song"},
		"topic":   {"the sea", "artificial intelligence", "climate change", "the Roman empire", "coffee", "remote work", "the moon landing", "jazz", "bees", "the printing press", "electric cars", "friendship", "mountains", "the internet", "chess", "volcanoes", "the French revolution", "sleep", "tea", "autumn"},
		"fail":    {"crash", "hang", "run out of memory", "return wrong results", "panic", "throw an exception", "get slower", "deadlock"},
		"n":       {"two", "three", "five", "ten", "seven", "four"},
		"phrase":  {"good morning", "where is the station", "thank you very much", "how much does it cost", "I am lost", "see you tomorrow", "the bill, please", "happy birthday"},
		"human":   {"French", "Spanish", "German", "Japanese", "Italian", "Portuguese", "Korean", "Dutch"},
		"field":   {"economics", "biology", "machine learning", "law", "physics", "databases", "networking", "medicine", "finance", "statistics"},
		"err":     {"index out of range", "connection refused", "permission denied", "null pointer", "timeout exceeded", "file not found", "invalid syntax", "out of memory"},
	}
)

// question returns one prompt drawn from the templates.
func question(r *rand.Rand) string {
	t := qTemplates[r.IntN(len(qTemplates))]
	var b strings.Builder
	for {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			b.WriteString(t)
			return b.String()
		}
		j := strings.IndexByte(t, '}')
		b.WriteString(t[:i])
		words := qSlots[t[i+1:j]]
		b.WriteString(words[r.IntN(len(words))])
		t = t[j+1:]
	}
}

// questions returns n distinct prompts.
func questions(r *rand.Rand, n int) []string {
	seen := make(map[string]bool, n)
	out := make([]string, 0, n)
	for len(out) < n {
		q := question(r)
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	return out
}

// reword makes a near-duplicate of q, as users retype a question: changed
// case, dropped or added punctuation, or one typo (two letters swapped).
func reword(r *rand.Rand, q string) string {
	switch r.IntN(3) {
	case 0:
		return strings.ToLower(strings.TrimRight(q, "?.!"))
	case 1:
		return strings.ToUpper(q[:1]) + q[1:] + " ?"
	default:
		rs := []rune(q)
		for range 8 {
			i := r.IntN(len(rs) - 1)
			if unicode.IsLetter(rs[i]) && unicode.IsLetter(rs[i+1]) && rs[i] != rs[i+1] {
				rs[i], rs[i+1] = rs[i+1], rs[i]
				break
			}
		}
		return string(rs)
	}
}

// lexicalVecs embeds texts with the built-in lexical embedder.
func lexicalVecs(texts []string) [][]float32 {
	v, err := embed.NewLexical(0).Embed(context.Background(), texts)
	if err != nil {
		panic(err)
	}
	return v
}
