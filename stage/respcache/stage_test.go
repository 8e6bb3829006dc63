package respcache_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/infergate/infergate/stage/respcache"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request with temperature 0 is asked upstream once; the same request again is answered from
// the cache with the same choices and usage, a fresh id and created, and says so.
func TestExactHit(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := startGateway(t, up, respcache.Options{})

	first := g.chat(t, chatReq("What is 2+2?"))
	require.Equal(t, http.StatusOK, first.status, first.body)
	assert.Equal(t, "miss", first.cache())
	second := g.chat(t, chatReq("What is 2+2?"))
	require.Equal(t, http.StatusOK, second.status, second.body)
	assert.Equal(t, "hit", second.cache())
	assert.EqualValues(t, 1, up.calls.Load(), "the hit did not go upstream")
	assert.Equal(t, "application/json", second.header.Get("Content-Type"))

	a, b := decode(t, first.body), decode(t, second.body)
	assert.Equal(t, "Answer to: What is 2+2?", b.content())
	assert.Equal(t, a.Choices, b.Choices)
	assert.Equal(t, a.Usage, b.Usage, "the answer's usage, as the upstream counted it")
	assert.Equal(t, "chat.completion", b.Object)
	assert.True(t, strings.HasPrefix(b.ID, "chatcmpl-"), b.ID)
	assert.NotEqual(t, a.ID, b.ID)
	assert.NotEqual(t, int64(1700000000), b.Created, "a fresh created")
	third := decode(t, g.chat(t, chatReq("What is 2+2?")).body)
	assert.NotEqual(t, b.ID, third.ID, "each hit its own id")

	other := g.chat(t, chatReq("What is 3+3?"))
	assert.Equal(t, "miss", other.cache())
	assert.Equal(t, "Answer to: What is 3+3?", decode(t, other.body).content())
	assert.EqualValues(t, 2, up.calls.Load())

	// Completions too, with their own id prefix.
	c1 := g.post(t, "/v1/completions", `{"model":"m","prompt":"Once upon","temperature":0,"max_tokens":5}`)
	c2 := g.post(t, "/v1/completions", `{"model":"m","prompt":"Once upon","temperature":0,"max_tokens":5}`)
	assert.Equal(t, "miss", c1.cache())
	assert.Equal(t, "hit", c2.cache())
	assert.Equal(t, "Answer to: Once upon", decode(t, c2.body).content())
	assert.True(t, strings.HasPrefix(decode(t, c2.body).ID, "cmpl-"))
	assert.EqualValues(t, 3, up.calls.Load())
}

// Requests that mean the same are one key: members in another order, other spacing, numbers
// spelled otherwise, and members that only change the delivery (stream, user). Anything that
// changes the question is another key.
func TestKeyNormalisation(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := startGateway(t, up, respcache.Options{})
	require.Equal(t, "miss", g.chat(t, `{"model":"m","temperature":0,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`).cache())
	for _, same := range []string{
		`{"messages":[{"content":"hi","role":"user"}],"max_tokens":10,"temperature":0,"model":"m"}`,
		"{ \"model\" : \"m\",\n \"temperature\" : 0.0, \"max_tokens\": 1e1, \"messages\":[{\"role\":\"user\",\"content\":\"\\u0068i\"}]}",
		`{"model":"m","temperature":0,"max_tokens":10,"messages":[{"role":"user","content":"hi"}],"user":"bob","n":1}`,
	} {
		assert.Equal(t, "hit", g.chat(t, same).cache(), same)
	}
	for _, other := range []string{
		`{"model":"m","temperature":0,"max_tokens":11,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","temperature":0,"max_tokens":10,"messages":[{"role":"user","content":"hi "}]}`,
		`{"model":"m","temperature":0,"max_tokens":10,"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"hi"}]}`,
		`{"model":"m","temperature":0,"max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`,
		`{"model":"m","temperature":0,"max_tokens":10,"seed":3,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		assert.Equal(t, "miss", g.chat(t, other).cache(), other)
	}
	assert.EqualValues(t, 6, up.calls.Load())
}

// A streamed miss is assembled on its way through and stored; a streamed hit replays the answer
// as chunks ending with [DONE] (with the usage chunk when asked for); streamed and non-streamed
// requests share their entries.
func TestStreams(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := startGateway(t, up, respcache.Options{})
	q := "Tell me about the sea"

	first := g.chat(t, chatReq(q, `"stream":true,"stream_options":{"include_usage":true}`))
	require.Equal(t, http.StatusOK, first.status, first.body)
	assert.Equal(t, "miss", first.cache())
	text, _, done := streamed(t, first.body)
	assert.Equal(t, "Answer to: "+q, text, "the miss passed the stream through")
	assert.True(t, done)

	hit := g.chat(t, chatReq(q, `"stream":true,"stream_options":{"include_usage":true}`))
	assert.Equal(t, "hit", hit.cache())
	assert.EqualValues(t, 1, up.calls.Load())
	assert.Equal(t, "text/event-stream", hit.header.Get("Content-Type"))
	text, chunks, done := streamed(t, hit.body)
	assert.Equal(t, "Answer to: "+q, text)
	assert.True(t, done, "ends with [DONE]")
	require.Greater(t, len(chunks), 3, "split as a model would, not one chunk")
	id := chunks[0].ID
	assert.True(t, strings.HasPrefix(id, "chatcmpl-"))
	for _, c := range chunks {
		assert.Equal(t, id, c.ID, "one id for the whole stream")
		assert.Equal(t, "chat.completion.chunk", c.Object)
	}
	assert.Equal(t, "assistant", chunks[0].Choices[0].Delta.Role)
	last := chunks[len(chunks)-1]
	require.NotNil(t, last.Usage, "include_usage: a usage chunk last")
	assert.Equal(t, 7, last.Usage.PromptTokens)
	fin := chunks[len(chunks)-2].Choices[0].FinishReason
	require.NotNil(t, fin)
	assert.Equal(t, "stop", *fin)

	// The streamed answer serves a plain request, and a plain one a streamed request.
	plain := g.chat(t, chatReq(q))
	assert.Equal(t, "hit", plain.cache())
	assert.Equal(t, "Answer to: "+q, decode(t, plain.body).content())
	assert.Equal(t, "stop", decode(t, plain.body).Choices[0].FinishReason)
	require.Equal(t, "miss", g.chat(t, chatReq("Another")).cache())
	hit = g.chat(t, chatReq("Another", `"stream":true`))
	assert.Equal(t, "hit", hit.cache())
	text, chunks, _ = streamed(t, hit.body)
	assert.Equal(t, "Answer to: Another", text)
	assert.Nil(t, chunks[len(chunks)-1].Usage, "no usage chunk unless asked")
	assert.EqualValues(t, 2, up.calls.Load())

	// Completions stream as text chunks.
	c1 := g.post(t, "/v1/completions", `{"model":"m","prompt":"Once upon a time","temperature":0,"stream":true}`)
	assert.Equal(t, "miss", c1.cache())
	c2 := g.post(t, "/v1/completions", `{"model":"m","prompt":"Once upon a time","temperature":0,"stream":true}`)
	assert.Equal(t, "hit", c2.cache())
	text, chunks, done = streamed(t, c2.body)
	assert.Equal(t, "Answer to: Once upon a time", text)
	assert.True(t, done)
	assert.Equal(t, "text_completion", chunks[0].Object)
	assert.True(t, strings.HasPrefix(chunks[0].ID, "cmpl-"))
}

// Requests the cache may not answer go upstream every time and say why; no-cache skips the
// lookup but stores, no-store looks up but does not store.
func TestBypass(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := startGateway(t, up, respcache.Options{})
	cases := []struct{ body, want string }{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "bypass; reason=temperature"},
		{`{"model":"m","temperature":null,"messages":[{"role":"user","content":"hi"}]}`, "bypass; reason=temperature"},
		{`{"model":"m","temperature":0.7,"messages":[{"role":"user","content":"hi"}]}`, "bypass; reason=temperature"},
		{`{"model":"m","temperature":0,"n":2,"messages":[{"role":"user","content":"hi"}]}`, "bypass; reason=n"},
		// An answer assembled from a stream, or replayed as one, has no log probabilities.
		{`{"model":"m","temperature":0,"logprobs":true,"messages":[{"role":"user","content":"hi"}]}`, "bypass; reason=logprobs"},
		{`{"model":"m","temperature":0,"top_logprobs":2,"messages":[{"role":"user","content":"hi"}]}`, "bypass; reason=logprobs"},
	}
	for _, c := range cases {
		for range 2 {
			assert.Equal(t, c.want, g.chat(t, c.body).cache(), c.body)
		}
	}
	assert.EqualValues(t, 2*len(cases), up.calls.Load(), "all went upstream")
	emb := g.post(t, "/v1/embeddings", `{"model":"m","input":"hi"}`)
	assert.Equal(t, "bypass; reason=path", emb.cache())

	up.calls.Store(0)
	q := chatReq("cache control")
	assert.Equal(t, "miss", g.chat(t, q, "Cache-Control", "no-store").cache())
	assert.Equal(t, "miss", g.chat(t, q).cache(), "no-store: not stored")
	assert.Equal(t, "hit", g.chat(t, q).cache())
	assert.Equal(t, "hit", g.chat(t, q, "Cache-Control", "no-store").cache(), "no-store may read")
	assert.Equal(t, "bypass; reason=no-cache", g.chat(t, q, "Cache-Control", "No-Cache").cache())
	assert.Equal(t, "bypass; reason=no-cache", g.chat(t, q, "Cache-Control", "max-age=0").cache())
	assert.Equal(t, "bypass; reason=no-cache", g.chat(t, q, "Cache-Control", `private="a,b", NO-STORE, no-cache`).cache())
	assert.EqualValues(t, 5, up.calls.Load())

	// no-cache stores what it got: a new answer replaces the old.
	up.set(func(u *upstreamFake) { u.reply = "a newer answer" })
	assert.Equal(t, "bypass; reason=no-cache", g.chat(t, q, "Cache-Control", "no-cache").cache())
	hit := g.chat(t, q)
	assert.Equal(t, "hit", hit.cache())
	assert.Equal(t, "a newer answer", decode(t, hit.body).content())

	// sampling: any caches what samples too.
	g2 := startGateway(t, up, respcache.Options{SamplingAny: true})
	body := `{"model":"m","temperature":0.7,"messages":[{"role":"user","content":"hi"}]}`
	assert.Equal(t, "miss", g2.chat(t, body).cache())
	assert.Equal(t, "hit", g2.chat(t, body).cache())
	assert.Equal(t, "bypass; reason=n", g2.chat(t, `{"model":"m","n":3,"messages":[]}`).cache())
}

// Only complete successes are stored: not errors, not answers cut short or calling tools (unless
// configured), not answers beyond the entry bound; length-limited answers are.
func TestWhatIsStored(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := startGateway(t, up, respcache.Options{MaxEntryBytes: 600})
	twice := func(q, extra string) (string, string) {
		t.Helper()
		body := chatReq(q)
		if extra != "" {
			body = chatReq(q, extra)
		}
		return g.chat(t, body).cache(), g.chat(t, body).cache()
	}

	up.set(func(u *upstreamFake) { u.status = http.StatusInternalServerError })
	a, b := twice("error", "")
	assert.Equal(t, []string{"miss", "miss"}, []string{a, b}, "errors are not stored")
	res := g.chat(t, chatReq("error"))
	assert.Equal(t, http.StatusInternalServerError, res.status, "and pass as they are")

	up.set(func(u *upstreamFake) { u.status, u.dieAfter = 0, 2 })
	a, b = twice("a stream that dies midway", `"stream":true`)
	assert.Equal(t, []string{"miss", "miss"}, []string{a, b}, "partial streams are not stored")
	cut := g.chat(t, chatReq("a stream that dies midway", `"stream":true`))
	assert.Error(t, cut.err, "the client saw it cut short")

	up.set(func(u *upstreamFake) { u.dieAfter, u.tools = 0, true })
	a, b = twice("weather", "")
	assert.Equal(t, []string{"miss", "miss"}, []string{a, b}, "tool calls are not stored")
	up.set(func(u *upstreamFake) { u.finish = "tool_calls" })
	a, b = twice("weather?", `"stream":true`)
	assert.Equal(t, []string{"miss", "miss"}, []string{a, b}, "streamed tool calls neither")

	up.set(func(u *upstreamFake) { u.tools, u.finish = false, "length" })
	a, b = twice("long", "")
	assert.Equal(t, []string{"miss", "hit"}, []string{a, b}, "length is a complete answer")
	up.set(func(u *upstreamFake) { u.finish = "abort" })
	a, b = twice("aborted", "")
	assert.Equal(t, []string{"miss", "miss"}, []string{a, b}, "other finish reasons are not")

	up.set(func(u *upstreamFake) { u.finish, u.reply = "", strings.Repeat("many words ", 60) })
	a, b = twice("too long", "")
	assert.Equal(t, []string{"miss", "miss"}, []string{a, b}, "over MaxEntryBytes")
	a, b = twice("too long streamed", `"stream":true`)
	assert.Equal(t, []string{"miss", "miss"}, []string{a, b}, "over MaxEntryBytes")
	full := g.chat(t, chatReq("too long"))
	assert.Equal(t, strings.Repeat("many words ", 60), decode(t, full.body).content(), "passed on whole all the same")

	// With ToolCalls, tool-calling answers are stored, streamed or not.
	up2 := newUpstream(t)
	up2.set(func(u *upstreamFake) { u.tools, u.finish = true, "tool_calls" })
	g2 := startGateway(t, up2, respcache.Options{ToolCalls: true})
	for _, stream := range []string{`"stream":false`, `"stream":true`} {
		body := chatReq("weather in "+stream, stream)
		assert.Equal(t, "miss", g2.chat(t, body).cache())
		hit := g2.chat(t, chatReq("weather in "+stream))
		require.Equal(t, "hit", hit.cache(), stream)
		c := decode(t, hit.body)
		require.Len(t, c.Choices[0].Message.ToolCalls, 1, hit.body)
		assert.Contains(t, string(c.Choices[0].Message.ToolCalls[0]), "get_weather")
		assert.Equal(t, "tool_calls", c.Choices[0].FinishReason)
	}
}

// With API keys on, a caller never gets an answer produced for another key; with scope shared,
// every caller shares the model's cache.
func TestOwnerScope(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := startGateway(t, up, respcache.Options{})
	q := chatReq("What is my account number?")
	up.set(func(u *upstreamFake) { u.reply = "yours is A-1" })
	assert.Equal(t, "miss", g.chat(t, q, "X-Test-Key", "alice").cache())
	up.set(func(u *upstreamFake) { u.reply = "yours is B-2" })
	bob := g.chat(t, q, "X-Test-Key", "bob")
	assert.Equal(t, "miss", bob.cache())
	assert.Equal(t, "yours is B-2", decode(t, bob.body).content())
	alice := g.chat(t, q, "X-Test-Key", "alice")
	assert.Equal(t, "hit", alice.cache())
	assert.Equal(t, "yours is A-1", decode(t, alice.body).content())
	anon := g.chat(t, q)
	assert.Equal(t, "miss", anon.cache(), "no key is an owner of its own")

	shared := startGateway(t, up, respcache.Options{Scope: respcache.ScopeShared})
	assert.Equal(t, "miss", shared.chat(t, q, "X-Test-Key", "alice").cache())
	assert.Equal(t, "hit", shared.chat(t, q, "X-Test-Key", "bob").cache())
}

// alteredStore answers every Get with a template that is a valid JSON object but not an answer a
// stream can replay, as an entry written by another version, or altered in a shared Redis, can be.
type alteredStore struct{ respcache.Store }

func (alteredStore) Get(context.Context, string) ([]byte, error) {
	return []byte(`{"choices":[{"messAge":{"role":[]},"finish_reason":"stop"}]}`), nil
}

// A stored answer that does not replay as a stream is not an answer: the stream request goes
// upstream and gets the upstream's answer, not a 500 (a cache prefers a miss to a failure).
func TestUnreplayableEntryGoesUpstream(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	g := startGateway(t, up, respcache.Options{Store: alteredStore{respcache.NewMemory(respcache.MemoryOptions{})}})
	res := g.chat(t, chatReq("Tell me about the sea", `"stream":true`))
	require.Equal(t, http.StatusOK, res.status, res.body)
	assert.Equal(t, "bypass; reason=stored", res.cache())
	text, _, done := streamed(t, res.body)
	assert.Equal(t, "Answer to: Tell me about the sea", text)
	assert.True(t, done)
	assert.EqualValues(t, 1, up.calls.Load())
}
