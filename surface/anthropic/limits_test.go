package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infergate/infergate/internal/jsonwire"
)

// What one request may cost (issue 35): lists too long for the decoder's storage are read from
// the body and translate exactly as stored ones; the caps on repeated members answer 400s that
// name them; JSON nests as deep as encoding/json allows, and no deeper.

// result is all a translation says: the body and what goes with it, or the refusal.
func result(body []byte, count bool, store int) string {
	tr, err := translateStoring(body, count, store)
	if err != nil {
		return fmt.Sprintf("error %d %s %s", err.status, err.typ, err.msg)
	}
	return fmt.Sprintf("%s %s %v %d", tr.body, tr.model, tr.stream, tr.estimate)
}

// mixedRequest is a conversation with every kind of list, nested: system blocks, turns with
// text, images, documents with content lists, tool calls and their results (one with blocks
// holding a document), thinking blocks, tools.
func mixedRequest(turns int) string {
	var b strings.Builder
	b.WriteString(`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s1"},{"type":"text","text":"s\u00e92"}],` +
		`"tools":[{"name":"f","input_schema":{"type":"object"},"strict":true},{"name":"g","description":"d","input_schema":{"type":"object","properties":{}}}],"messages":[`)
	for i := range turns {
		if i > 0 {
			b.WriteString(",")
		}
		id := "t" + strconv.Itoa(i)
		if i%2 == 0 {
			b.WriteString(`{"role":"user","content":[{"type":"text","text":"u` + strings.Repeat("x", i%7) + `"},{"type":"image","source":{"type":"url","url":"i"}},` +
				`{"type":"document","title":"T","source":{"type":"content","content":[{"type":"text","text":"p"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}}]}`)
			if i+1 < turns {
				b.WriteString(`,{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"a\n"},` +
					`{"type":"tool_use","id":"` + id + `a","name":"f","input":{"x": [1, "\"y\""]}},{"type":"tool_use","id":"` + id + `b","name":"g","input":{}}]}`)
			}
		} else {
			prev := "t" + strconv.Itoa(i-1)
			b.WriteString(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + prev + `b","content":"r"},` +
				`{"type":"tool_result","tool_use_id":"` + prev + `a","is_error":true,"content":[{"type":"text","text":"e"},` +
				`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"d"}}]},{"type":"text","text":"more"}]}`)
		}
	}
	b.WriteString(`]}`)
	return b.String()
}

// TestListsReadFromBody: whatever fits in the decoder's storage, down to nothing, a request
// translates to the same body, or is refused with the same message.
func TestListsReadFromBody(t *testing.T) {
	type input struct {
		body  string
		count bool
	}
	inputs := []input{{string(benchAnthropic), false}, {mixedRequest(9), false}, {mixedRequest(9), true},
		{mixedRequest(maxPooled/4 + 3), false}}
	for _, tc := range requestPairs {
		inputs = append(inputs, input{tc.in, false})
	}
	for _, tc := range refusals {
		inputs = append(inputs, input{tc.in, false}, input{tc.in, true})
	}
	valid := 0
	for _, in := range inputs {
		want := result([]byte(in.body), in.count, maxPooled)
		if tr, err := translate([]byte(in.body), in.count); err == nil {
			require.True(t, json.Valid(tr.body), "%s", tr.body)
			valid++
		}
		for _, store := range []int{0, 1, 2, 3, 5, 8} {
			require.Equal(t, want, result([]byte(in.body), in.count, store), "storing %d: %.200s", store, in.body)
		}
	}
	assert.Greater(t, valid, len(requestPairs), "the mixed requests translate")
}

// oneLetterBlocks is a request of n one-letter text blocks in one user turn.
func oneLetterBlocks(n int) []byte {
	blocks := strings.Repeat(`{"type":"text","text":"a"},`, n)
	return []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[` + blocks[:len(blocks)-1] + `]}]}`)
}

func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestBlocksCostTheirBytes: a request of as many one-letter blocks as it may hold (2.7 MB)
// allocates its OpenAI body and little more. Before, each block was a struct of 232 bytes in
// storage that doubled as it grew, and the body was copied for the decoder's strings: 129 MB,
// 48 times the body.
func TestBlocksCostTheirBytes(t *testing.T) {
	body := oneLetterBlocks(maxBlocks)
	_, err := translate(body, false)
	require.Nil(t, err)
	before := allocated()
	tr, err := translate(body, false)
	spent := allocated() - before
	require.Nil(t, err)
	t.Logf("%d blocks, %d bytes: %d allocated (%.2fx), %d written", maxBlocks, len(body), spent, float64(spent)/float64(len(body)), len(tr.body))
	assert.LessOrEqual(t, spent, uint64(len(body))*3/2, "%.1fx the body", float64(spent)/float64(len(body)))
}

// TestCaps: each repeated member has a cap, and the request past it is a 400 naming it: content
// blocks counted at every depth, messages, tools, stop sequences. At the cap, it translates.
func TestCaps(t *testing.T) {
	_, err := translate(oneLetterBlocks(maxBlocks), false)
	require.Nil(t, err, "%v", err)
	_, err = translate(oneLetterBlocks(maxBlocks+1), false)
	require.NotNil(t, err)
	assert.Equal(t, "messages.0.content.100000: more than 100000 content blocks in the request", err.msg)

	// A tool result's blocks count too: half the cap in a turn, with a tool_result holding the
	// rest (less itself and the tool_use it answers); then one more.
	block := `{"type":"text","text":"a"},`
	half := strings.Repeat(block, maxBlocks/2)
	half = half[:len(half)-1]
	nested := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]},` +
		`{"role":"user","content":[` + half + `,{"type":"tool_result","tool_use_id":"t","content":[` + half[2*len(block):] + `]}]}]}`
	_, err = translate([]byte(nested), false)
	require.Nil(t, err, "%v", err)
	_, err = translate([]byte(strings.Replace(nested, `"content":[{"type":"text"`, `"content":[{"type":"text","text":"b"},{"type":"text"`, 1)), false)
	require.NotNil(t, err)
	assert.Contains(t, err.msg, "more than 100000 content blocks")

	many := func(n int, elem string) string { return strings.TrimSuffix(strings.Repeat(elem+",", n), ",") }
	msgs := func(n int) string {
		return `{"model":"m","max_tokens":8,"messages":[` + many(n, `{"role":"user","content":"q"}`) + `]}`
	}
	tools := func(n int) string {
		return `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}],"tools":[` + many(n, `{"name":"f","input_schema":{}}`) + `]}`
	}
	stops := func(n int) string {
		return `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}],"stop_sequences":[` + many(n, `"s"`) + `]}`
	}
	for _, tc := range []struct {
		body func(int) string
		cap  int
		msg  string
	}{
		{msgs, maxMessages, "messages: at most 100000 messages are allowed"},
		{tools, maxTools, "tools: at most 4096 tools are allowed"},
		{stops, maxStops, "stop_sequences: at most 1024 are allowed"},
	} {
		_, err := translate([]byte(tc.body(tc.cap)), false)
		assert.Nil(t, err, "%v", err)
		_, err = translate([]byte(tc.body(tc.cap+1)), false)
		if assert.NotNil(t, err, tc.msg) {
			assert.Equal(t, tc.msg, err.msg)
		}
	}
}

// deepInput is a request whose tool input_schema nests so that the request is depth levels deep
// (the request object, tools and the tool are three).
func deepInput(depth int) []byte {
	inner := depth - 4 // arrays under the schema object
	return []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}],"tools":[{"name":"f","input_schema":{"x":` +
		strings.Repeat("[", inner) + strings.Repeat("]", inner) + `}}]}`)
}

// TestDepth: a request nests as deep as encoding/json allows (10,000 levels, the limit of
// /v1/chat/completions and the README's), in a raw value at any depth in the request; one level
// more is a 400 saying so. Content inside content nests 4 levels, and the refusal says that too.
func TestDepth(t *testing.T) {
	for _, depth := range []int{66, 500, maxDepth} {
		body := deepInput(depth)
		require.True(t, json.Valid(body))
		for _, store := range []int{0, maxPooled} {
			_, err := translateStoring(body, false, store)
			assert.Nil(t, err, "%d levels: %v", depth, err)
		}
	}
	body := deepInput(maxDepth + 1)
	require.False(t, json.Valid(body), "encoding/json refuses it")
	for _, store := range []int{0, maxPooled} {
		_, err := translateStoring(body, false, store)
		if assert.NotNil(t, err) {
			assert.Equal(t, "tools.0.input_schema: nested deeper than 10000 levels", err.msg)
		}
	}
	// Deeper in the request: a tool call's input in a turn, two levels more.
	in := `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"x":%s}}]}]}`
	ok := maxDepth - 6 // the request, messages, the turn, content, the block and input are 6
	_, err := translate(fmt.Appendf(nil, in, strings.Repeat("[", ok)+strings.Repeat("]", ok)), false)
	assert.NotContains(t, fmt.Sprint(err), "nested deeper", "at the limit")
	_, err = translate(fmt.Appendf(nil, in, strings.Repeat("[", ok+1)+strings.Repeat("]", ok+1)), false)
	if assert.NotNil(t, err) {
		assert.Equal(t, "messages.1.content.0.input: nested deeper than 10000 levels", err.msg)
	}

	result := `{"type":"tool_result","tool_use_id":"t","content":%s}`
	nest := `"r"`
	for range maxNesting {
		nest = fmt.Sprintf(result, "["+nest+"]")
	}
	_, err = translate([]byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[`+nest+`]}]}`), false)
	assert.NotContains(t, fmt.Sprint(err), "nested deeper", "at the limit")
	nest = fmt.Sprintf(result, "["+nest+"]")
	_, err = translate([]byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[`+nest+`]}]}`), false)
	if assert.NotNil(t, err) {
		assert.Contains(t, err.msg, "content is nested deeper than 4 levels")
	}
}

// TestAwaited: tool results answer a turn's tool calls as a scan of the turn did (the first
// unanswered use of an id; an id used twice needs two results; what is left listed in order),
// for small turns (scanned) and large ones (searched sorted).
func TestAwaited(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 2000 {
		n := 1 + rng.IntN(3*linearAwaited)
		ids := make([]string, n)
		for k := range ids {
			ids[k] = "t" + strconv.Itoa(rng.IntN(n+1)) // some used twice
		}
		scan := slices.Clone(ids) // the old way: find, and remove
		a := awaiting(slices.Clone(ids))
		for range rng.IntN(n + 3) {
			id := "t" + strconv.Itoa(rng.IntN(n+2))
			j := slices.Index(scan, id)
			if j >= 0 {
				scan = slices.Delete(scan, j, j+1)
			}
			require.Equal(t, j >= 0, a.answer(id), "round %d: %v, answering %s", round, ids, id)
			require.Equal(t, len(scan), a.left)
		}
		require.Equal(t, scan, a.unanswered(), "round %d: %v", round, ids)
	}
}

// TestManyToolResults: 49,999 tool calls answered in reverse order translate, each result
// found through the turn's sorted ids rather than a scan of the turn (which took 3.6 s here; no
// timing is asserted, the search is: a turn over linearAwaited ids is searched sorted).
func TestManyToolResults(t *testing.T) {
	ids := make([]string, linearAwaited+1)
	for i := range ids {
		ids[i] = "toolu_" + strconv.Itoa(i)
	}
	a := awaiting(ids)
	require.True(t, a.answer(ids[len(ids)-1]))
	require.NotNil(t, a.sorted, "a long turn is searched through its sorted ids")

	const n = maxBlocks/2 - 1
	var calls, results strings.Builder
	for i := range n {
		if i > 0 {
			calls.WriteString(",")
			results.WriteString(",")
		}
		calls.WriteString(`{"type":"tool_use","id":"toolu_` + strconv.Itoa(i) + `","name":"f","input":{}}`)
		results.WriteString(`{"type":"tool_result","tool_use_id":"toolu_` + strconv.Itoa(n-1-i) + `"}`)
	}
	body := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[` +
		calls.String() + `]},{"role":"user","content":[` + results.String() + `]}]}`)
	start := time.Now()
	out, err := translate(body, false)
	require.Nil(t, err, "%v", err)
	t.Logf("%d tool calls and results, %d bytes: %v", n, len(body), time.Since(start))
	assert.Equal(t, n, bytes.Count(out.body, []byte(`"role":"tool"`)), "every result is a tool message")
}

// TestSkip: the scanner's skip (jsonwire's, a loop since it takes 10,000 levels) passes over
// exactly what encoding/json calls one valid value, its depth counted from the top of the
// document.
func TestSkip(t *testing.T) {
	values := []string{`0`, `-1.5e+3`, `"a\"\\\/\b\f\n\r\t\u00e9"`, `true`, `false`, `null`, `{}`, `[]`, ` { "a" : [ 1 , { } , [ ] , "x" ] , "b" : null } `,
		`[[],[[]],{"a":{"b":{}}}]`, `{"a":1,}`, `[1,]`, `[1 2]`, `{"a" 1}`, `{1:2}`, `{"a":}`, `[`, `]`, `{`, `"\x"`, `"` + "\x01" + `"`, `01`, `1.`, `.5`, `-`, `tru`, `nul`,
		`[}`, `{]`, `{"a":1]`, `[1}`, `{"a":[}`, ``, ` `}
	for _, depth := range []int{1, 63, 64, 65, 129, 500} {
		values = append(values, strings.Repeat("[", depth)+strings.Repeat("]", depth), strings.Repeat(`{"a":`, depth)+"0"+strings.Repeat("}", depth),
			strings.Repeat(`[{"a":`, depth)+"[]"+strings.Repeat("}]", depth), strings.Repeat("[", depth)+strings.Repeat("]", depth-1))
	}
	for _, v := range values {
		s := newScanner([]byte(v))
		ok := s.skip() && s.end() && !s.bad()
		require.Equal(t, json.Valid([]byte(v)), ok, "%.80q", v)
	}
	for _, depth := range []int{maxDepth - 1, maxDepth, maxDepth + 1} {
		v := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		s := newScanner(v)
		ok := s.skip() && s.end()
		require.Equal(t, json.Valid(v), ok, "%d levels", depth)
		require.Equal(t, !ok, errors.Is(s.Err(), jsonwire.ErrTooDeep), "%d levels", depth)
		s = newScanner(v) // the value two levels less, inside two
		for range 2 {
			require.NoError(t, s.EnterArray())
			more, err := s.NextElement()
			require.True(t, more && err == nil)
		}
		require.Equal(t, ok, s.skip(), "%d levels, from 2 deep", depth)
	}
}
