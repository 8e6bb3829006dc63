package respcache_test

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/stage/respcache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Semantic mode answers a similar last user message, but only when everything else is the same:
// system prompt, earlier turns, tools, parameters, owner. The embedder is an embeddings model's
// stand-in: its similarity alone decides, so an added word ("So what is ...") is a hit.
func TestSemantic(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	emb := &bagEmbedder{}
	g := startGateway(t, up, respcache.Options{Mode: respcache.ModeSemantic, Embedder: emb, Threshold: 0.9})
	conv := func(system, earlier, last string, extra ...string) string {
		msgs := `[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + earlier +
			`"},{"role":"assistant","content":"Sure."},{"role":"user","content":"` + last + `"}]`
		s := `{"model":"m","temperature":0,"messages":` + msgs
		for _, e := range extra {
			s += "," + e
		}
		return s + "}"
	}
	first := g.chat(t, conv("You help.", "Talk about France.", "What is the capital of France?"))
	require.Equal(t, "miss", first.cache())

	same := g.chat(t, conv("You help.", "Talk about France.", "what is the capital of france"))
	assert.Equal(t, "semantic; similarity=1.000", same.cache())
	assert.Equal(t, "Answer to: What is the capital of France?", decode(t, same.body).content())
	close := g.chat(t, conv("You help.", "Talk about France.", "So what is the capital of France?"))
	assert.True(t, strings.HasPrefix(close.cache(), "semantic; similarity=0.9"), close.cache())
	exact := g.chat(t, conv("You help.", "Talk about France.", "What is the capital of France?"))
	assert.Equal(t, "hit", exact.cache(), "an exact hit is looked for first")
	assert.EqualValues(t, 1, up.calls.Load())

	for _, other := range []string{
		conv("You help.", "Talk about France.", "What is the population of Spain?"), // another question
		conv("You are terse.", "Talk about France.", "What is the capital of France?"),
		conv("You help.", "Talk about Texas.", "What is the capital of France?"), // the multi-turn trap
		conv("You help.", "Talk about France.", "What is the capital of France?", `"max_tokens":5`),
		conv("You help.", "Talk about France.", "What is the capital of France?", `"tools":[{"type":"function","function":{"name":"f"}}]`),
	} {
		assert.Equal(t, "miss", g.chat(t, other).cache(), other)
	}
	assert.Equal(t, "miss", g.chat(t, conv("You help.", "Talk about France.", "what is the capital of france"),
		"X-Test-Key", "alice").cache(), "another owner")

	// A failing embedder makes the lookup exact.
	emb.fail.Store(true)
	assert.Equal(t, "miss", g.chat(t, conv("You help.", "Talk about France.", "capital of France?")).cache())
	assert.Equal(t, "hit", g.chat(t, conv("You help.", "Talk about France.", "What is the capital of France?")).cache())

	// Completions embed their prompt.
	emb.fail.Store(false)
	c1 := g.post(t, "/v1/completions", `{"model":"m","temperature":0,"prompt":"The capital of France is"}`)
	assert.Equal(t, "miss", c1.cache())
	c2 := g.post(t, "/v1/completions", `{"model":"m","temperature":0,"prompt":"the capital of france is"}`)
	assert.Equal(t, "semantic; similarity=1.000", c2.cache())
}

// onlyEmbed hides what else an embedder is: a plain respcache.Embedder.
type onlyEmbed struct{ respcache.Embedder }

// Only an embedder that names an embeddings model is trusted with its similarity alone: with
// any other, or one naming none, a hit also needs the same words.
func TestSemanticWordsUnlessModel(t *testing.T) {
	t.Parallel()
	none := ""
	for name, c := range map[string]struct {
		emb  respcache.Embedder
		want string
	}{
		"model":            {&bagEmbedder{}, "semantic; similarity=0.9"},
		"no model named":   {&bagEmbedder{model: &none}, "miss"},
		"a plain embedder": {onlyEmbed{&bagEmbedder{}}, "miss"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t, respcache.Options{Mode: respcache.ModeSemantic, Embedder: c.emb, Threshold: 0.9})
			require.Equal(t, "miss", s.ask(t, "What is the capital of France?"))
			assert.True(t, strings.HasPrefix(s.ask(t, "So what is the capital of France?"), c.want))
			assert.Equal(t, "semantic; similarity=1.000", s.ask(t, "what is the capital of france"), "the same words")
		})
	}
}
