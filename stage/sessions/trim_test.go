package sessions

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func m(role, content string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"role": role, "content": content})
	return b
}

func show(ms []json.RawMessage) string {
	var out []string
	for _, x := range ms {
		var v struct{ Role, Content string }
		_ = json.Unmarshal(x, &v)
		out = append(out, v.Role[:1]+":"+v.Content)
	}
	return strings.Join(out, " ")
}

func TestSplitAndFlatten(t *testing.T) {
	msgs := []json.RawMessage{m("system", "S"), m("developer", "D"), m("assistant", "hello"),
		m("user", "q1"), m("assistant", "a1"), m("system", "mid"), m("tool", "t1"),
		m("user", "q2"), m("assistant", "a2")}
	c := split(msgs)
	assert.Equal(t, "s:S d:D", show(c.system))
	require.Len(t, c.turns, 3, "a greeting before the first user message is a turn of its own")
	assert.Equal(t, "a:hello", show(c.turns[0].all))
	assert.Equal(t, show(msgs), show(c.flatten(0, nil)))
	assert.Equal(t, "s:S d:D s:mid u:q2 a:a2 u:new", show(c.flatten(2, []json.RawMessage{m("user", "new")})),
		"a dropped turn's system message stays")
	assert.Equal(t, "s:S d:D s:mid", show(c.flatten(3, nil)))
	assert.Equal(t, "user", role(json.RawMessage(`{"content":"x","role":"user"}`)), "role not first")
	assert.Equal(t, `us"er`, role(json.RawMessage(`{"role":"us\"er"}`)), "an escape")
	assert.Equal(t, "", role(json.RawMessage(`[1]`)))
}

// trimWindow's binary search finds the least number of turns to drop, as trying each in turn
// does, whatever the conversation.
func TestTrimWindowMatchesLinearSearch(t *testing.T) {
	ctx := context.Background()
	for turns := 0; turns < 12; turns++ {
		var msgs []json.RawMessage
		msgs = append(msgs, m("system", "sys"))
		for i := range turns {
			msgs = append(msgs, m("user", strings.Repeat("u", 1+i*7%13)), m("assistant", strings.Repeat("a", 1+i*5%11)))
		}
		c := split(msgs)
		tail := []json.RawMessage{m("user", "new question")}
		for window := 0; window < 400; window += 7 {
			calls := 0
			count := func(ctx context.Context, ms []json.RawMessage) (int, error) {
				calls++
				return EstimateTokens(ctx, ms)
			}
			drop, dropped, err := trimWindow(ctx, c, tail, window, 10, count)
			require.NoError(t, err)
			want := 0
			full, _ := EstimateTokens(ctx, c.flatten(0, tail))
			if least, _ := EstimateTokens(ctx, c.flatten(turns, tail)); full+10 > window && least+10 <= window {
				for want = 1; ; want++ {
					if n, _ := EstimateTokens(ctx, c.flatten(want, tail)); n+10 <= window {
						assert.Equal(t, full-n, dropped)
						break
					}
				}
			}
			assert.Equal(t, want, drop, "turns %d window %d", turns, window)
			bound := 2
			for n := 1; n < turns; n *= 2 {
				bound++
			}
			assert.LessOrEqual(t, calls, bound, "turns %d window %d", turns, window)
		}
	}
}

func TestBound(t *testing.T) {
	msgs := []json.RawMessage{m("system", "S")}
	for i := range 5 {
		msgs = append(msgs, m("user", fmt.Sprint("q", i)), m("assistant", fmt.Sprint("a", i)))
	}
	kept, trimmed := bound(msgs, 1<<20, 100)
	assert.False(t, trimmed)
	assert.Equal(t, show(msgs), show(kept))
	kept, trimmed = bound(msgs, 1<<20, 5)
	assert.True(t, trimmed)
	assert.Equal(t, "s:S u:q3 a:a3 u:q4 a:a4", show(kept))
	size := len(msgs[0]) + len(msgs[9]) + len(msgs[10])
	kept, _ = bound(msgs, size, 100)
	assert.Equal(t, "s:S u:q4 a:a4", show(kept))
	kept, _ = bound(msgs, size-1, 100)
	assert.Equal(t, "s:S", show(kept), "even the newest turn is too big")
	kept, _ = bound(msgs, len(msgs[0])-1, 100)
	assert.Empty(t, kept, "even the system prompt is")
}

func TestValidID(t *testing.T) {
	for range 100 {
		assert.True(t, ValidID(NewID()))
	}
	for _, bad := range []string{"", "sess_", "sess_AAAAAAAAAAAAAAAAAAAAAB", "sess_AAAAAAAAAAAAAAAAAAAA+A", "sesx_AAAAAAAAAAAAAAAAAAAAAA",
		"sess_AAAAAAAAAAAAAAAAAAAAAAA", "sess_AAAAAAAAAAAAAAAAAAAA=="} {
		assert.False(t, ValidID(bad), bad)
	}
	assert.True(t, ValidID("sess_AAAAAAAAAAAAAAAAAAAAAA"))
}

func TestAssistantMessage(t *testing.T) {
	for _, c := range []struct{ resp, want string }{
		{`{"choices":[{"index":0,"message":{"role":"assistant","content":"hi","reasoning_content":"r","tool_calls":[],"refusal":null,"annotations":[]},"finish_reason":"stop"}]}`,
			`{"role":"assistant","content":"hi"}`},
		{`{"choices":[{"index":1,"message":{"content":"x"},"finish_reason":"stop"},{"index":0,"message":{"content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			`{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
		{`{"choices":[{"index":0,"message":{"content":"cut"},"finish_reason":"length"}]}`, `{"role":"assistant","content":"cut"}`},
		{`{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":null}]}`, ""},
		{`{"choices":[{"index":0,"message":{"content":"x"}}]}`, ""},
		{`{"choices":[{"index":0,"message":{"content":"x"},"finish_reason":""}]}`, ""},
		{`{"choices":[{"index":1,"message":{"content":"x"},"finish_reason":"stop"}]}`, ""},
		{`{"choices":[]}`, ""},
		{`{"error":{"message":"boom"}}`, ""},
	} {
		got, ok := assistantMessage([]byte(c.resp))
		assert.Equal(t, c.want != "", ok, c.resp)
		assert.Equal(t, c.want, string(got), c.resp)
	}
}
