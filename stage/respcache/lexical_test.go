package respcache_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/lib/embed"
	"github.com/infergate/infergate/stage/respcache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stage is a cache stage in process, before a terminal handler that answers every request.
type stage struct {
	c *respcache.Cache
	h pipeline.Handler
}

func newStage(t testing.TB, opts respcache.Options) *stage {
	t.Helper()
	opts.Model = "m"
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	c, err := respcache.New(opts)
	require.NoError(t, err)
	answer := []byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"An answer."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`)
	terminal := func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{StatusCode: 200, Body: pipeline.NewBody(answer, pipeline.Usage{Status: 200})}, nil
	}
	return &stage{c: c, h: pipeline.Chain(terminal, c.Interceptor())}
}

// ask sends a chat request with the last user message q and Cache-Control values, and returns
// the cache's header, once what the answer left to store is stored.
func (s *stage) ask(t testing.TB, q string, cacheControl ...string) string {
	t.Helper()
	req, err := pipeline.NewRequest("/v1/chat/completions", []byte(chatReq(q)))
	require.NoError(t, err)
	if len(cacheControl) > 0 && req.Header == nil {
		req.Header = http.Header{}
	}
	for _, v := range cacheControl {
		req.Header.Add("Cache-Control", v)
	}
	res, err := s.h(context.Background(), req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res)
	res.Body.Finish(nil)
	s.c.Wait()
	return res.GatewayHeader.Get(respcache.Header)
}

// background is context for the long prompts: sentences without digits, so that the variants
// below that drop punctuation change no number.
var background = strings.Fields(`We are preparing the quarterly review for the board, and the
finance team has collected the figures from every region. The northern region grew steadily
thanks to new retail partners, while the southern region lost two large accounts and is
recovering slowly. The eastern region stayed flat, and the western region doubled its online
sales after the spring campaign. Marketing spent most of its budget on social media, and the
sales team hired four new account managers in the autumn. Customer satisfaction surveys show
that delivery times improved, although complaints about the mobile application increased. The
board will meet next week and expects a short summary, a clear recommendation and a list of
risks for the coming year. Please keep the language simple, avoid jargon, and mention any
assumption you make about the missing figures from the smaller offices. The chief executive
also asked for a comparison with the previous year and a note on hiring plans, currency
effects, supply problems, and the new pricing model that was introduced in the summer for the
largest customers in every region we serve today.`)

// prompt is question after enough background for about words words in all with like, the
// question it is compared with (so that both have the same background).
func prompt(words int, question, like string) string {
	n := max(0, words-len(strings.Fields(like)))
	return strings.TrimSpace(strings.Join(background[:min(n, len(background))], " ") + " " + question)
}

// cosine of two texts' lexical vectors, for the log: what the similarity alone would decide.
func cosine(t testing.TB, a, b string) float32 {
	vs, err := embed.NewLexical(0).Embed(context.Background(), []string{a, b})
	require.NoError(t, err)
	var s float32
	for i := range vs[0] {
		s += vs[0][i] * vs[1][i]
	}
	return s
}

// TestLexicalSameWordsOnly: with the built-in lexical embedder and the default threshold, a
// prompt is answered from another's entry only when it has the same words, up to case,
// punctuation and spacing: at every length from 10 to 200 words,
// a changed word (the highest/lowest, Spain/Italy, true/false, English/German), an
// inserted "not", "does not suit" for "suits", another number or operator, and a one-letter
// change that makes another word are all misses, though their similarity passes the threshold.
func TestLexicalSameWordsOnly(t *testing.T) {
	t.Parallel()
	type pair struct{ name, stored, asked string }
	var different, same []pair
	for _, n := range []int{10, 25, 50, 100, 200} {
		p := func(q string) string { return prompt(n, q, q) }
		at := func(name string) string { return fmt.Sprintf("%s/%dw", name, n) }
		for _, c := range []pair{
			{"highest-lowest", "Which region had the highest revenue this quarter?", "Which region had the lowest revenue this quarter?"},
			{"Spain-Italy", "Suggest the best cities to visit in Spain.", "Suggest the best cities to visit in Italy."},
			{"suits-does-not-suit", "Explain why the new pricing model suits our largest customers.", "Explain why the new pricing model does not suit our largest customers."},
			{"true-false", "Explain why the statement about delivery times is true.", "Explain why the statement about delivery times is false."},
			{"English-German", "Translate the summary for the board into English.", "Translate the summary for the board into German."},
			{"not-inserted", "Is it safe to cut the marketing budget next year?", "Is it not safe to cut the marketing budget next year?"},
			{"nt-inserted", "Why do customers complain about the mobile application?", "Why don't customers complain about the mobile application?"},
			{"number", "Compare the figures with those of 2023 please.", "Compare the figures with those of 2024 please."},
			{"decimal", "Should prices rise by 3.5 percent next year?", "Should prices rise by 35 percent next year?"},
			{"operator", "Is the growth rate 2+2 percent or more?", "Is the growth rate 2-2 percent or more?"},
			{"comparison", "Flag every office where x > 5 complaints.", "Flag every office where x < 5 complaints."},
			{"sign", "Would a change of -5 percent hurt us?", "Would a change of 5 percent hurt us?"},
			{"plural", "List the main risk for the coming year.", "List the main risks for the coming year."},
			{"prefix", "Explain whether the reporting should be synchronous.", "Explain whether the reporting should be asynchronous."},
			{"one-letter-word", "Summarise the medication policy for the staff.", "Summarise the meditation policy for the staff."},
			{"short-transposition", "Is the link between price and churn causal?", "Is the link between price and churn casual?"},
		} {
			different = append(different, pair{at(c.name), p(c.stored), prompt(n, c.asked, c.stored)})
		}
		// A changed word in the middle of a long prompt, not in its question.
		if n >= 50 {
			q := "What should the summary say?"
			different = append(different, pair{at("middle"), p(q), strings.Replace(p(q), "northern", "southern", 1)})
		}
		q := p("Which region had the highest revenue this quarter, and why?")
		same = append(same,
			pair{at("upper"), q, strings.ToUpper(q)},
			pair{at("lower"), q, strings.ToLower(q)},
			pair{at("no-punctuation"), q, strings.NewReplacer(",", "", ".", "", "?", "").Replace(q)},
			pair{at("more-punctuation"), q, strings.Replace(q, "?", "?!!", 1) + " ..."},
			pair{at("spacing"), q, "  " + strings.Join(strings.Fields(q), " \n\t ") + " "},
			pair{at("spaced-question-mark"), q, strings.Replace(q, "why?", "why ?", 1)},
			pair{at("full-width"), q, strings.Replace(strings.Replace(q, "?", "？", 1), ",", "，", 1)},
			pair{at("quotes"), strings.Replace(q, "the highest", `the "highest"`, 1), strings.Replace(q, "the highest", "the “highest”", 1)},
			pair{at("apostrophe"), p("What's the region's biggest risk? Don't guess."), p("Whats the region’s biggest risk Dont guess")},
			pair{at("hyphen"), p("Is the spring campaign well-known?"), prompt(n, "Is the spring campaign well known?", "Is the spring campaign well-known?")},
			pair{at("number-punctuation"), p("Does 3.5 percent, or $5, matter?"), p("does 3.5 percent or $5 matter")},
		)
		if n >= 50 {
			// Long enough for a one-letter slip to leave the similarity above the threshold: a
			// slip that makes another word is another question, and nothing tells it from a typo.
			different = append(different,
				pair{at("slip-transposed"), p("Should we write a complaint letter to the supplier?"), p("Should we write a compliant letter to the supplier?")},
				pair{at("slip-doubled"), p("Should we stop scraping the competitor's website?"), p("Should we stop scrapping the competitor's website?")},
			)
		}
	}
	// Short questions: the same words are a hit however written.
	for _, c := range []pair{
		{"short-case", "What is the capital of France?", "WHAT IS THE CAPITAL OF FRANCE"},
		{"short-spacing", "What is the capital of France?", "what  is the\ncapital of France ?"},
		{"short-apostrophe", "Why doesn't it work?", "why doesn’t it work"},
		{"short-accents", "¿Dónde está la estación?", "dónde está la estación"},
		{"short-cjk", "这个季度哪个地区的收入最高？", "这个季度哪个地区的收入最高"},
	} {
		same = append(same, c)
	}
	different = append(different,
		pair{"short-cjk-one-character", "这个季度哪个地区的收入最高？", "这个季度哪个地区的收入最低？"},
	)

	opts := respcache.Options{Mode: respcache.ModeSemantic, Embedder: embed.NewLexical(0)}
	wrong := 0
	for _, c := range different {
		s := newStage(t, opts)
		require.Equal(t, "miss", s.ask(t, c.stored), c.name)
		if got := s.ask(t, c.asked); got != "miss" {
			wrong++
			t.Errorf("%s: a different question answered from the cache (%s; similarity %.3f)\n stored: %s\n asked:  %s",
				c.name, got, cosine(t, c.stored, c.asked), c.stored, c.asked)
		} else {
			t.Logf("%s: miss at similarity %.3f", c.name, cosine(t, c.stored, c.asked))
		}
	}
	t.Logf("%d of %d different questions answered from the cache", wrong, len(different))
	for _, c := range same {
		s := newStage(t, opts)
		require.Equal(t, "miss", s.ask(t, c.stored), c.name)
		got := s.ask(t, c.asked)
		assert.True(t, strings.HasPrefix(got, "semantic; "), "%s: %s (similarity %.3f)\n stored: %s\n asked:  %s",
			c.name, got, cosine(t, c.stored, c.asked), c.stored, c.asked)
	}
}
