package sessions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/infergate/infergate/core/pipeline"
	"github.com/infergate/infergate/internal/redistest"
	"github.com/infergate/infergate/stage/sessions"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A conversation: each turn's upstream sees the stored history, then the new message; the
// answers (whole and streamed) are appended; the session header and body field are consumed.
func TestConversation(t *testing.T) {
	t.Parallel()
	u := startUpstream(t, "u1")
	g := startGateway(t, gwConfig{ups: []*upstream{u}})
	id := g.create("", "m")

	st, text, h := g.turn("", id, false, chatMsg{"system", "be brief"}, user("q1"))
	require.Equal(t, http.StatusOK, st, text)
	assert.Equal(t, "re: q1", text)
	assert.Equal(t, id, h.Get(sessions.HeaderSessionID))
	assert.Empty(t, h.Get(sessions.HeaderTrimmedTokens), "nothing trimmed")
	seen, body, hdr := u.last()
	assert.Equal(t, msgs("system:be brief", "user:q1"), seen)
	assert.Empty(t, hdr.Get(sessions.HeaderSessionID), "the header is the gateway's, not the upstream's")
	assert.NotContains(t, string(body), "session_id")

	// Streamed, and named by the body's session_id.
	st, b := 0, []byte(nil)
	st, h, b = g.do(http.MethodPost, "/v1/chat/completions", "",
		map[string]any{"model": "m", "stream": true, "session_id": id, "messages": []chatMsg{user("q2")}})
	require.Equal(t, http.StatusOK, st, string(b))
	assert.Equal(t, "re: q2", answerText(t, b, true))
	assert.Contains(t, string(b), ": keep-alive", "the stream passes through byte for byte")
	assert.Equal(t, id, h.Get(sessions.HeaderSessionID))
	seen, body, _ = u.last()
	assert.Equal(t, msgs("system:be brief", "user:q1", "assistant:re: q1", "user:q2"), seen)
	assert.NotContains(t, string(body), "session_id", "stripped from the body sent upstream")

	// A new system prompt replaces the stored one rather than repeating it.
	st, text, _ = g.turn("", id, false, chatMsg{"system", "be terse"}, user("q3"))
	require.Equal(t, http.StatusOK, st, text)
	seen, _, _ = u.last()
	assert.Equal(t, msgs("system:be terse", "user:q1", "assistant:re: q1", "user:q2", "assistant:re: q2", "user:q3"), seen)

	got := g.stored("", id)
	assert.Equal(t, msgs("system:be terse", "user:q1", "assistant:re: q1", "user:q2", "assistant:re: q2", "user:q3", "assistant:re: q3"), got)
	_, _, raw := g.do(http.MethodGet, "/v1/sessions/"+id, "", nil)
	assert.NotContains(t, string(raw), "reasoning_content", "the answer's reasoning is not fed back")
	assert.NotContains(t, string(raw), "tool_calls", "nor its empty fields")
	assert.Equal(t, 3.0, g.metrics.Turns("m", "stored"))
}

// A turn whose answer fails, is cut short, is not read to its end (a stream: its [DONE]), or
// never reaches the client is not stored, and the session is free for the next turn at once.
func TestFailedTurnsAreNotStored(t *testing.T) {
	t.Parallel()
	u := startUpstream(t, "u1")
	g := startGateway(t, gwConfig{ups: []*upstream{u}})
	id := g.create("", "m")
	st, _, _ := g.turn("", id, false, user("q1"))
	require.Equal(t, http.StatusOK, st)

	u.failWith.Store(http.StatusInternalServerError)
	st, _, h := g.turn("", id, false, user("lost 1"))
	assert.Equal(t, http.StatusInternalServerError, st)
	assert.Equal(t, id, h.Get(sessions.HeaderSessionID))
	u.failWith.Store(0)

	u.cut.Store(true)
	req, err := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/chat/completions", strings.NewReader(
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"lost 2"}]}`))
	require.NoError(t, err)
	req.Header.Set(sessions.HeaderSessionID, id)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body) // cut short: the gateway's answer ends early too
	resp.Body.Close()
	u.cut.Store(false)

	// The client goes away before the end: called directly, as a surface does.
	r, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"lost 3"}]}`))
	require.NoError(t, err)
	r.Header = http.Header{sessions.HeaderSessionID: {id}}
	res, err := g.chains["m"](context.Background(), r)
	require.NoError(t, err)
	_, _ = res.Read(make([]byte, 10))
	res.Body.Finish(errors.New("client went away"))
	// ... or once it read the whole answer but could not pass its end on.
	r, err = pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"lost 4"}]}`))
	require.NoError(t, err)
	r.Header = http.Header{sessions.HeaderSessionID: {id}}
	res, err = g.chains["m"](context.Background(), r)
	require.NoError(t, err)
	_, err = io.ReadAll(res)
	require.NoError(t, err)
	res.Body.Finish(errors.New("client went away"))
	// ... or a surface stops reading a stream on purpose after its last chunk, before its
	// [DONE] (read a byte at a time, so that no read reaches into the [DONE]).
	readUntil := func(q string, done func(read []byte) bool) {
		t.Helper()
		r, err := pipeline.NewRequest("/v1/chat/completions", []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"`+q+`"}]}`))
		require.NoError(t, err)
		r.Header = http.Header{sessions.HeaderSessionID: {id}}
		res, err := g.chains["m"](context.Background(), r)
		require.NoError(t, err)
		var read []byte
		for !done(read) {
			var one [1]byte
			_, err := res.Read(one[:])
			require.NoError(t, err, "%s", read)
			read = append(read, one[0])
		}
		res.Body.Finish(nil)
	}
	readUntil("lost 5", func(read []byte) bool {
		return bytes.HasSuffix(read, []byte("\n\n")) && bytes.Contains(read, []byte(`"finish_reason":"stop"`))
	})
	// ... or within the [DONE] event, before its blank line: the event is not whole.
	readUntil("lost 6", func(read []byte) bool { return bytes.HasSuffix(read, []byte("data: [DONE]\n")) })

	st, text, _ := g.turn("", id, true, user("q2"))
	require.Equal(t, http.StatusOK, st, "never busy: each failed turn released the session")
	assert.Equal(t, "re: q2", text)
	assert.Equal(t, msgs("user:q1", "assistant:re: q1", "user:q2", "assistant:re: q2"), g.stored("", id))
	assert.Equal(t, 6.0, g.metrics.Turns("m", "not_stored"))
	assert.Equal(t, 2.0, g.metrics.Turns("m", "stored"))
}

// The oldest whole turns are left out so the prompt and max_tokens fit the window; the system
// prompt stays; the count hook is asked a logarithmic number of times.
func TestContextWindowTrimsOldestTurns(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	// One token per byte of content.
	count := func(_ context.Context, ms []json.RawMessage) (int, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		n := 0
		for _, m := range ms {
			var v chatMsg
			require.NoError(t, json.Unmarshal(m, &v))
			n += len(v.Content)
		}
		return n, nil
	}
	u := startUpstream(t, "u1")
	g := startGateway(t, gwConfig{ups: []*upstream{u}, models: map[string]sessions.ModelOptions{
		"m": {ContextWindow: 100, Tokens: count}}})
	id := g.create("", "m")
	sys := chatMsg{"system", strings.Repeat("S", 10)}
	q := func(i int) string { return fmt.Sprintf("question%02d", i) } // 10 bytes; answers 14: a turn is 24 tokens
	send := func(i, maxTokens int) http.Header {
		t.Helper()
		body := map[string]any{"model": "m", "max_tokens": maxTokens, "messages": []chatMsg{user(q(i))}}
		if i == 1 {
			body["messages"] = []chatMsg{sys, user(q(i))}
		}
		st, h, b := g.do(http.MethodPost, "/v1/chat/completions", "", body, sessions.HeaderSessionID, id)
		require.Equal(t, http.StatusOK, st, string(b))
		return h
	}
	for i := 1; i <= 3; i++ { // 10 + 3*24 + ... : prompts of 20, 44, 68 tokens fit 100-20
		h := send(i, 20)
		assert.Empty(t, h.Get(sessions.HeaderTrimmedTokens))
	}
	mu.Lock()
	calls = 0
	mu.Unlock()
	h := send(4, 20) // 10 + 3*24 + 10 = 92 > 80: drop turn 1 (24 tokens)
	assert.Equal(t, "24", h.Get(sessions.HeaderTrimmedTokens))
	seen, _, _ := u.last()
	assert.Equal(t, []chatMsg{sys, user(q(2)), {"assistant", "re: " + q(2)}, user(q(3)), {"assistant", "re: " + q(3)}, user(q(4))}, seen)
	mu.Lock()
	assert.LessOrEqual(t, calls, 4, "whole, least, then a binary search over 3 turns")
	mu.Unlock()
	assert.Equal(t, 24.0, g.metrics.Trimmed("m"))

	h = send(5, 44) // 100-44 = 56: two turns must go
	assert.Equal(t, "48", h.Get(sessions.HeaderTrimmedTokens))
	seen, _, _ = u.last()
	assert.Equal(t, []chatMsg{sys, user(q(4)), {"assistant", "re: " + q(4)}, user(q(5))}, seen)
	stored := g.stored("", id)
	assert.Equal(t, []chatMsg{sys, user(q(4)), {"assistant", "re: " + q(4)}, user(q(5)), {"assistant", "re: " + q(5)}}, stored,
		"the session keeps what the model saw, and the answer")

	// The new message alone does not fit: sent untrimmed, for the context-length stage to refuse.
	send(6, 95)
	seen, _, _ = u.last()
	assert.Len(t, seen, 6)
}

// A session's turns go to the endpoint that served the last one while it is usable, and move
// (and then stick) to another when it is not.
func TestStickiness(t *testing.T) {
	t.Parallel()
	u1, u2 := startUpstream(t, "u1"), startUpstream(t, "u2")
	g := startGateway(t, gwConfig{ups: []*upstream{u1, u2}, prefer: true})
	id := g.create("", "m")
	for i := range 6 {
		st, _, _ := g.turn("", id, i%2 == 0, user(fmt.Sprint("q", i)))
		require.Equal(t, http.StatusOK, st)
	}
	n1, n2 := len(u1.requests()), len(u2.requests())
	assert.True(t, n1 == 6 && n2 == 0 || n1 == 0 && n2 == 6, "one endpoint served every turn: %d, %d", n1, n2)
	first, other := u1, u2
	if n2 > 0 {
		first, other = u2, u1
	}
	g.term.down.Store(first.name, true)
	for i := range 3 {
		st, _, _ := g.turn("", id, false, user(fmt.Sprint("r", i)))
		require.Equal(t, http.StatusOK, st)
	}
	g.term.down.Delete(first.name)
	st, _, _ := g.turn("", id, false, user("back"))
	require.Equal(t, http.StatusOK, st)
	assert.Len(t, other.requests(), 4, "moved once, then stuck to the new endpoint")
	assert.Len(t, g.stored("", id), 2*10)

	// Without Prefer the terminal's round robin spreads the turns: the check above can fail.
	g = startGateway(t, gwConfig{ups: []*upstream{u1, u2}})
	id = g.create("", "m")
	before1, before2 := len(u1.requests()), len(u2.requests())
	for i := range 4 {
		st, _, _ := g.turn("", id, false, user(fmt.Sprint("q", i)))
		require.Equal(t, http.StatusOK, st)
	}
	assert.Equal(t, 2, len(u1.requests())-before1)
	assert.Equal(t, 2, len(u2.requests())-before2)
}

// With API keys on, a key sees, uses and deletes only its own sessions; another key's session
// looks exactly like one that does not exist.
func TestOwnerIsolation(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwConfig{})
	a := g.create("key-a", "m")
	st, _, _ := g.turn("key-a", a, false, user("secret"))
	require.Equal(t, http.StatusOK, st)
	unknown := sessions.NewID()

	// Compare B's answers for A's session with its answers for an unknown id (the id swapped).
	same := func(what string, stA int, bodyA string, stU int, bodyU string) {
		t.Helper()
		assert.Equal(t, http.StatusNotFound, stA, what)
		assert.Equal(t, stU, stA, what)
		assert.Equal(t, strings.ReplaceAll(bodyU, unknown, a), bodyA, what)
		assert.Contains(t, bodyA, `"code":"session_not_found"`)
	}
	stA, _, bA := g.do(http.MethodGet, "/v1/sessions/"+a, "key-b", nil)
	stU, _, bU := g.do(http.MethodGet, "/v1/sessions/"+unknown, "key-b", nil)
	same("get", stA, string(bA), stU, string(bU))
	stA, textA, _ := g.turn("key-b", a, false, user("give me A's history"))
	stU, textU, _ := g.turn("key-b", unknown, false, user("give me A's history"))
	same("turn", stA, textA, stU, textU)
	stA, textA, _ = g.turn("", a, false, user("no key at all"))
	same("turn without a key", stA, textA, stU, textU)
	stA, _, bA = g.do(http.MethodDelete, "/v1/sessions/"+a, "key-b", nil)
	stU, _, bU = g.do(http.MethodDelete, "/v1/sessions/"+unknown, "key-b", nil)
	same("delete", stA, string(bA), stU, string(bU))

	assert.Equal(t, msgs("user:secret", "assistant:re: secret"), g.stored("key-a", a), "untouched")
	st, _, b := g.do(http.MethodDelete, "/v1/sessions/"+a, "key-a", nil)
	require.Equal(t, http.StatusOK, st)
	assert.JSONEq(t, fmt.Sprintf(`{"id":%q,"object":"chat.session.deleted","deleted":true}`, a), string(b))
	st, _, _ = g.do(http.MethodGet, "/v1/sessions/"+a, "key-a", nil)
	assert.Equal(t, http.StatusNotFound, st)
	assert.Equal(t, 1.0, g.metrics.Deleted("m"))
}

// Bad input gets OpenAI's error object with the right status and code.
func TestBadInput(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwConfig{models: map[string]sessions.ModelOptions{"m": {TTL: time.Hour}, "m2": {}}})
	id := g.create("", "m")
	chat := func(path, body string, header ...string) (int, string) {
		st, _, b := g.do(http.MethodPost, path, "", body, header...)
		return st, string(b)
	}
	for _, c := range []struct {
		name, path, body string
		header           []string
		status           int
		code             string
	}{
		{"unknown id", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
			[]string{sessions.HeaderSessionID, sessions.NewID()}, 404, "session_not_found"},
		{"malformed id", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"session_id":"../../etc"}`,
			nil, 404, "session_not_found"},
		{"id not a string", "/v1/chat/completions", `{"model":"m","messages":[],"session_id":7}`, nil, 400, "invalid_type"},
		{"header and body disagree", "/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[],"session_id":%q}`, id),
			[]string{sessions.HeaderSessionID, sessions.NewID()}, 400, "session_id_mismatch"},
		{"another model", "/v1/chat/completions", `{"model":"m2","messages":[{"role":"user","content":"x"}]}`,
			[]string{sessions.HeaderSessionID, id}, 400, "session_model_mismatch"},
		{"a model without sessions", "/v1/chat/completions", `{"model":"plain","messages":[{"role":"user","content":"x"}]}`,
			[]string{sessions.HeaderSessionID, id}, 400, "sessions_not_enabled"},
		{"another path", "/v1/completions", `{"model":"m","prompt":"x"}`,
			[]string{sessions.HeaderSessionID, id}, 400, "sessions_not_supported"},
		{"no messages", "/v1/chat/completions", `{"model":"m"}`, []string{sessions.HeaderSessionID, id}, 400, "invalid_type"},
		{"a message not an object", "/v1/chat/completions", `{"model":"m","messages":["hi"]}`,
			[]string{sessions.HeaderSessionID, id}, 400, "invalid_type"},
	} {
		st, b := chat(c.path, c.body, c.header...)
		assert.Equal(t, c.status, st, "%s: %s", c.name, b)
		assert.Contains(t, b, fmt.Sprintf(`"code":%q`, c.code), c.name)
		assert.Contains(t, b, `"type":"invalid_request_error"`, c.name)
	}
	// None of them took the lock, or wrote anything.
	st, _, _ := g.turn("", id, false, user("ok"))
	assert.Equal(t, http.StatusOK, st)
	assert.Len(t, g.stored("", id), 2)

	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"no model", "POST", "/v1/sessions", `{}`, 400, "missing_required_parameter"},
		{"not json", "POST", "/v1/sessions", `{`, 400, ""},
		{"no sessions for the model", "POST", "/v1/sessions", `{"model":"plain"}`, 400, "sessions_not_enabled"},
		{"ttl too long", "POST", "/v1/sessions", `{"model":"m","ttl_seconds":3601}`, 400, "invalid_value"},
		{"ttl zero", "POST", "/v1/sessions", `{"model":"m","ttl_seconds":0}`, 400, "invalid_value"},
		{"ttl fractional", "POST", "/v1/sessions", `{"model":"m","ttl_seconds":1.5}`, 400, "invalid_value"},
		{"too large", "POST", "/v1/sessions", `{"model":"` + strings.Repeat("m", 70<<10) + `"}`, 413, ""},
		{"method", "PUT", "/v1/sessions/" + id, ``, 405, "method_not_allowed"},
		{"list", "GET", "/v1/sessions", ``, 405, "method_not_allowed"},
		{"malformed id", "GET", "/v1/sessions/sess_x", ``, 404, "session_not_found"},
		{"deeper path", "GET", "/v1/sessions/" + id + "/x", ``, 404, "not_found"},
	} {
		st, _, b := g.do(c.method, c.path, "", c.body)
		assert.Equal(t, c.status, st, "%s: %s", c.name, b)
		assert.Contains(t, string(b), `"error":{`, c.name)
		if c.code != "" {
			assert.Contains(t, string(b), fmt.Sprintf(`"code":%q`, c.code), c.name)
		}
	}
	st, _, b := g.do("POST", "/v1/sessions", "", `{"model":"m","ttl_seconds":60}`)
	require.Equal(t, http.StatusCreated, st, string(b))
	var s struct {
		ID                   string
		CreatedAt, ExpiresAt int64 `json:"-"`
		Created              int64 `json:"created_at"`
		Expires              int64 `json:"expires_at"`
	}
	require.NoError(t, json.Unmarshal(b, &s))
	assert.True(t, sessions.ValidID(s.ID))
	assert.Equal(t, int64(60), s.Expires-s.Created)
}

// A turn while another of the same session runs is refused with 409, and goes once it ended.
func TestBusy(t *testing.T) {
	t.Parallel()
	u := startUpstream(t, "u1")
	g := startGateway(t, gwConfig{ups: []*upstream{u}})
	id := g.create("", "m")
	arrived, release := u.holdNext()
	defer release()
	done := make(chan int)
	go func() {
		st, _, _ := g.turn("", id, true, user("first"))
		done <- st
	}()
	<-arrived
	type answer struct {
		st   int
		body string
	}
	second := make(chan answer, 1)
	go func() {
		st, body, _ := g.turn("", id, false, user("second"))
		second <- answer{st, body}
	}()
	var a answer
	select {
	case a = <-second:
	case <-arrived:
		t.Error("the second turn reached the upstream while the first ran")
		release()
		a = <-second
	}
	assert.Equal(t, http.StatusConflict, a.st)
	assert.Contains(t, a.body, `"code":"session_busy"`)
	assert.Equal(t, 1.0, g.metrics.Busy("m"))
	release()
	assert.Equal(t, http.StatusOK, <-done)
	st, _, _ := g.turn("", id, false, user("third"))
	assert.Equal(t, http.StatusOK, st)
	assert.Equal(t, msgs("user:first", "assistant:re: first", "user:third", "assistant:re: third"), g.stored("", id))
}

// A turn sent while the previous one is finishing (its answer read, not yet stored) waits for
// it, within LockWait, instead of being refused: here the first turn is held until the second
// has arrived, and the second still succeeds, after the first, with the first in its history.
func TestBusyWaits(t *testing.T) {
	t.Parallel()
	u := startUpstream(t, "u1")
	g := startGateway(t, gwConfig{ups: []*upstream{u}, options: func(o *sessions.Options) { o.LockWait = time.Minute }})
	id := g.create("", "m")
	arrived, release := u.holdNext()
	defer release()
	done := make(chan int)
	go func() {
		st, _, _ := g.turn("", id, true, user("first"))
		done <- st
	}()
	<-arrived
	second := make(chan int, 1)
	go func() {
		st, _, _ := g.turn("", id, false, user("second"))
		second <- st
	}()
	require.Eventually(t, func() bool { return g.metrics.Waits("m") == 1 }, 10*time.Second, time.Millisecond, "the second turn is waiting")
	release()
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, http.StatusOK, <-second, "waited for the first turn instead of 409")
	assert.Equal(t, msgs("user:first", "assistant:re: first", "user:second", "assistant:re: second"), g.stored("", id))
}

// 64 clients send turns to one session at once, each retrying while it is busy: every turn is
// stored exactly once, whole, and each upstream request saw exactly the turns stored before it.
func TestConcurrentTurns(t *testing.T) {
	t.Parallel()
	u := startUpstream(t, "u1")
	g := startGateway(t, gwConfig{ups: []*upstream{u}})
	id := g.create("", "m")
	const clients = 64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for {
				st, text, _ := g.turn("", id, i%2 == 0, user(fmt.Sprint("q", i)))
				if st == http.StatusConflict {
					time.Sleep(time.Duration(1+rand.IntN(4)) * time.Millisecond) // fewer refused tries
					continue
				}
				assert.Equal(t, http.StatusOK, st, text)
				return
			}
		})
	}
	wg.Wait()
	final := g.stored("", id)
	require.Len(t, final, 2*clients)
	seen := map[string]bool{}
	for i := 0; i < len(final); i += 2 {
		q := final[i]
		require.Equal(t, "user", q.Role)
		assert.False(t, seen[q.Content], "%s stored twice", q.Content)
		seen[q.Content] = true
		assert.Equal(t, chatMsg{"assistant", "re: " + q.Content}, final[i+1], "a turn's messages stay together")
	}
	reqs := u.requests()
	require.Len(t, reqs, clients, "refused turns never reached the upstream")
	lengths := map[int]bool{}
	for _, r := range reqs {
		k := len(r) - 1
		require.True(t, k%2 == 0 && k < len(final), "history of %d messages", k)
		assert.Equal(t, final[:k], r[:k], "each turn saw the stored history before it")
		assert.Equal(t, final[k], r[k], "and was stored right after it")
		lengths[k] = true
	}
	assert.Len(t, lengths, clients, "no two turns saw the same history")
	assert.Equal(t, float64(clients), g.metrics.Turns("m", "stored"))
}

// The stored messages stay under MaxBytes and MaxMessages: the oldest turns go.
func TestStorageIsBounded(t *testing.T) {
	t.Parallel()
	g := startGateway(t, gwConfig{models: map[string]sessions.ModelOptions{"m": {MaxBytes: 400, MaxMessages: 5}}})
	id := g.create("", "m")
	st, _, _ := g.turn("", id, false, chatMsg{"system", "S"}, user("q0"))
	require.Equal(t, http.StatusOK, st)
	for i := 1; i < 20; i++ {
		st, _, _ := g.turn("", id, false, user(fmt.Sprint("q", i)))
		require.Equal(t, http.StatusOK, st)
		got := g.stored("", id)
		assert.LessOrEqual(t, len(got), 5)
		assert.Equal(t, chatMsg{"system", "S"}, got[0], "the system prompt stays")
		assert.Equal(t, chatMsg{"assistant", fmt.Sprint("re: q", i)}, got[len(got)-1])
	}
	got := g.stored("", id)
	assert.Equal(t, msgs("system:S", "user:q18", "assistant:re: q18", "user:q19", "assistant:re: q19"), got)

	// A turn larger than the bound is answered, and leaves only the system prompt.
	big := strings.Repeat("x", 500)
	st, text, _ := g.turn("", id, false, user(big))
	require.Equal(t, http.StatusOK, st)
	assert.Equal(t, "re: "+big, text)
	assert.Equal(t, msgs("system:S"), g.stored("", id))
}

// Memory holds at most MaxSessions, dropping the least recently used, and counts them.
func TestMemoryBound(t *testing.T) {
	t.Parallel()
	metrics := sessions.NewMetrics()
	clk := newClock()
	st := sessions.NewMemory(sessions.MemoryOptions{MaxSessions: 3, Now: clk.Now, Metrics: metrics})
	ctx := context.Background()
	var ids []string
	for range 3 {
		s := &sessions.Session{ID: sessions.NewID(), Model: "m", Expires: clk.Now().Add(time.Hour), TTL: time.Hour}
		require.NoError(t, st.Create(ctx, s))
		ids = append(ids, s.ID)
	}
	_, err := st.Get(ctx, "", ids[0]) // used: ids[1] is now the coldest
	require.NoError(t, err)
	require.NoError(t, st.Create(ctx, &sessions.Session{ID: sessions.NewID(), Model: "m", Expires: clk.Now().Add(time.Hour), TTL: time.Hour}))
	assert.Equal(t, 3, st.Len())
	_, err = st.Get(ctx, "", ids[1])
	assert.ErrorIs(t, err, sessions.ErrNotFound)
	_, err = st.Get(ctx, "", ids[0])
	assert.NoError(t, err)
	assert.Equal(t, 3.0, metrics.Active("m"))

	clk.Add(2 * time.Hour)
	require.NoError(t, st.Create(ctx, &sessions.Session{ID: sessions.NewID(), Model: "m", Expires: clk.Now().Add(time.Hour), TTL: time.Hour}))
	assert.Equal(t, 1, st.Len(), "the expired ones were swept")
	assert.Equal(t, 1.0, metrics.Active("m"))
}

// Two gateways sharing one Redis continue one conversation; with Redis down, turns and the API
// answer 503 and nothing is half-written.
func TestRedisReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	u := startUpstream(t, "u1")
	newGW := func() *gateway {
		return startGateway(t, gwConfig{ups: []*upstream{u},
			store: sessions.NewRedis(srv.NewClient(t), sessions.RedisOptions{Timeout: 300 * time.Millisecond})})
	}
	a, b := newGW(), newGW()
	id := a.create("k", "m")
	for i, g := range []*gateway{a, b, a, b} {
		st, text, _ := g.turn("k", id, i%2 == 1, user(fmt.Sprint("q", i)))
		require.Equal(t, http.StatusOK, st, text)
	}
	seen, _, _ := u.last()
	assert.Equal(t, msgs("user:q0", "assistant:re: q0", "user:q1", "assistant:re: q1", "user:q2", "assistant:re: q2", "user:q3"), seen)
	assert.Len(t, b.stored("k", id), 8)
	st, _, _ := b.do(http.MethodGet, "/v1/sessions/"+id, "other", nil)
	assert.Equal(t, http.StatusNotFound, st)

	// Redis dies during a turn: the answer still reaches the client; the turn is not stored.
	arrived, release := u.holdNext()
	done := make(chan int)
	go func() {
		st, _, _ := a.turn("k", id, false, user("during the outage"))
		done <- st
	}()
	<-arrived
	srv.Kill()
	release()
	assert.Equal(t, http.StatusOK, <-done)
	assert.Equal(t, 1.0, a.metrics.StoreErrors("commit"))

	st, body, h := b.turn("k", id, false, user("q4"))
	assert.Equal(t, http.StatusServiceUnavailable, st)
	assert.Contains(t, body, `"code":"session_store_unavailable"`)
	assert.Contains(t, body, "session store is unavailable")
	assert.NotEmpty(t, h.Get("Retry-After"))
	st, _, raw := a.do(http.MethodPost, "/v1/sessions", "k", map[string]any{"model": "m"})
	assert.Equal(t, http.StatusServiceUnavailable, st, string(raw))
	st, _, _ = a.do(http.MethodGet, "/v1/sessions/"+id, "k", nil)
	assert.Equal(t, http.StatusServiceUnavailable, st)
	assert.Len(t, u.requests(), 5, "a turn the store could not lock never went upstream")

	srv.Restart() // empty: nothing is persisted
	st, _, _ = a.do(http.MethodGet, "/v1/sessions/"+id, "k", nil)
	assert.Equal(t, http.StatusNotFound, st)
	id = a.create("k", "m")
	// A client whose connection broke may fail its first call after the restart (503).
	for range 50 {
		if st, _, _ = b.turn("k", id, false, user("again")); st != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Equal(t, http.StatusOK, st)
}

// Errors of the count hook are the gateway's 500, and free the session.
func TestTokenCountFailure(t *testing.T) {
	t.Parallel()
	fail := true
	var mu sync.Mutex
	g := startGateway(t, gwConfig{models: map[string]sessions.ModelOptions{"m": {ContextWindow: 10,
		Tokens: func(context.Context, []json.RawMessage) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return 0, errors.New("tokenizer broke")
			}
			return 1, nil
		}}}})
	id := g.create("", "m")
	st, body, _ := g.turn("", id, false, user("q"))
	assert.Equal(t, http.StatusInternalServerError, st)
	assert.Contains(t, body, "tokenizer broke")
	mu.Lock()
	fail = false
	mu.Unlock()
	st, _, _ = g.turn("", id, false, user("q"))
	assert.Equal(t, http.StatusOK, st)
}

// renewCounter is a store that reports its lock renewals.
type renewCounter struct {
	sessions.Store
	mu      sync.Mutex
	renewed int
	signal  chan struct{}
}

func (r *renewCounter) Renew(ctx context.Context, id, token string, lease time.Duration) error {
	r.mu.Lock()
	r.renewed++
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
	return r.Store.Renew(ctx, id, token, lease)
}

func (r *renewCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renewed
}

// A turn renews its lock while it runs (a long generation keeps its session), and stops once
// it ended.
func TestLockRenewal(t *testing.T) {
	t.Parallel()
	clk := newClock() // the store's clock stands still: no lease ends, whatever the machine's load
	st := &renewCounter{Store: sessions.NewMemory(sessions.MemoryOptions{Now: clk.Now}), signal: make(chan struct{}, 1)}
	u := startUpstream(t, "u1")
	g := startGateway(t, gwConfig{store: st, ups: []*upstream{u},
		options: func(o *sessions.Options) { o.LockLease, o.Now = 3*time.Millisecond, clk.Now }})
	id := g.create("", "m")
	arrived, release := u.holdNext()
	done := make(chan int)
	go func() {
		st, body, _ := g.turn("", id, true, user("long"))
		if st != http.StatusOK {
			t.Log(body)
		}
		done <- st
	}()
	<-arrived
	for range 3 {
		select {
		case <-st.signal:
		case <-time.After(30 * time.Second): // a hang detector, not a threshold
			release()
			t.Fatal("the lock was not renewed")
		}
	}
	release()
	require.Equal(t, http.StatusOK, <-done)
	assert.Len(t, g.stored("", id), 2)
	// A renewal already under way as the answer went out may still land (seen under the race
	// detector: one more); a renewer left running would make several in each 20 ms.
	time.Sleep(20 * time.Millisecond)
	n := st.count()
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, n, st.count(), "no renewals once the turn ended")
}
