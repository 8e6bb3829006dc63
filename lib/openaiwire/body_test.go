package openaiwire_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infergate/infergate/internal/bodyref"
	"github.com/infergate/infergate/lib/openaiwire"
)

// sortedLayout is the reference for an edited body's bytes: the sorted layout as
// pipeline.Request.EditBody wrote it before the view existed.
func sortedLayout(t testing.TB, f map[string]json.RawMessage, set map[string]json.RawMessage, drop ...string) []byte {
	b, err := bodyref.EditBody(f, set, drop...)
	require.NoError(t, err)
	return b
}

// members is the body's members as All yields them, checked to come sorted and once each.
func members(t testing.TB, b *openaiwire.Body) map[string]json.RawMessage {
	got := map[string]json.RawMessage{}
	var names []string
	for name, v := range b.All() {
		got[name] = v
		names = append(names, name)
	}
	require.True(t, slices.IsSorted(names), "All yields sorted names: %q", names)
	require.Len(t, got, len(names), "All yields each name once: %q", names)
	return got
}

// checkBody holds Parse to encoding/json's Unmarshal into a map[string]json.RawMessage (what
// pipeline.Request.Fields used), and an edited body's bytes to the sorted layout's.
func checkBody(t testing.TB, src []byte, setName string, setValue []byte, dropName string) {
	want, wantErr := bodyref.Fields(src)
	if wantErr == nil && want == nil {
		wantErr = errNull // a JSON null: Unmarshal leaves the map nil; Parse takes objects only
	}
	b, err := openaiwire.Parse(src)
	if wantErr != nil {
		require.Error(t, err, "encoding/json: %v", wantErr)
		return
	}
	require.NoError(t, err)
	got := members(t, b)
	require.Equal(t, len(want), len(got))
	for k, v := range want {
		require.Equal(t, string(v), string(got[k]), "member %q", k)
		g, ok := b.Get(k)
		require.True(t, ok)
		require.Equal(t, string(v), string(g))
		require.True(t, b.Has(k))
	}
	require.False(t, b.Dirty())
	require.Equal(t, src, b.AppendJSON(nil), "an unedited body is its source")
	require.Equal(t, string(sortedLayout(t, want, nil)), string(b.AppendSorted(nil)))
	checkSpans(t, b)

	c := b.Clone()
	c.Set(setName, setValue)
	c.Drop(dropName)
	require.True(t, c.Dirty())
	require.False(t, b.Dirty(), "editing a clone leaves the original")
	require.Equal(t, src, b.AppendJSON(nil))
	set := map[string]json.RawMessage{setName: setValue}
	require.Equal(t, string(sortedLayout(t, want, set, dropName)), string(c.AppendJSON(nil)))
	require.False(t, c.Has(dropName))
	if setName != dropName {
		v, ok := c.Get(setName)
		require.True(t, ok)
		require.Equal(t, string(setValue), string(v))
	}
	require.Equal(t, []string{setName, dropName}, slices.Collect(c.EditedSince(b)))
	checkSpans(t, c)

	// A second round of edits on the edited copy is the one sorted rewrite with both.
	d := c.Clone()
	d.Set(dropName, []byte(`1`))
	require.Equal(t, []string{dropName}, slices.Collect(d.EditedSince(c)))
	c.Drop(setName) // the copies do not share edits, either way
	set[dropName] = json.RawMessage(`1`)
	require.Equal(t, string(sortedLayout(t, want, set)), string(d.AppendJSON(nil)))
}

var errNull = errorString("null")

type errorString string

func (e errorString) Error() string { return string(e) }

// checkSpans: ValueSpan locates each member's value in AppendJSON's bytes, and Len is their
// length.
func checkSpans(t testing.TB, b *openaiwire.Body) {
	out := b.AppendJSON(nil)
	require.Equal(t, len(out), b.Len())
	for name, v := range b.All() {
		start, end, ok := b.ValueSpan(name)
		require.True(t, ok, name)
		require.Equal(t, string(v), string(out[start:end]), "span of %q in %s", name, out)
	}
	_, _, ok := b.ValueSpan("\x00absent")
	require.False(t, ok)
}

func TestBody(t *testing.T) {
	for _, src := range bodySeeds(t) {
		checkBody(t, src, "model", []byte(`"m"`), "stream")
		checkBody(t, src, "messages", []byte(`[]`), "messages")
	}
}

func TestBodyEdits(t *testing.T) {
	src := []byte(`{"stream": true, "model":"m","messages":[{"role":"user", "content":"hi"}],"session_id":"s"}`)
	b, err := openaiwire.Parse(src)
	require.NoError(t, err)
	assert.Equal(t, `{"messages":[{"role":"user", "content":"hi"}],"model":"m","session_id":"s","stream":true}`, string(b.AppendSorted(nil)))
	b.Set("max_tokens", []byte("1"))
	b.Set("stream", []byte("false"))
	b.Drop("session_id", "max_tokens")
	assert.Equal(t, `{"messages":[{"role":"user", "content":"hi"}],"model":"m","stream":false}`, string(b.AppendJSON(nil)),
		"set members replace, dropped ones go, others keep their bytes, sorted")
	b.Set("session_id", []byte(`"t"`))
	v, ok := b.Get("session_id")
	assert.True(t, ok, "a Set after a Drop adds the member again")
	assert.Equal(t, `"t"`, string(v))
	assert.Equal(t, []string{"max_tokens", "stream", "session_id", "max_tokens", "session_id"}, slices.Collect(b.EditedSince(nil)))

	b.Freeze()
	assert.Panics(t, func() { b.Set("a", []byte(`1`)) })
	assert.Panics(t, func() { b.Drop("a") })
	c := b.Clone()
	c.Drop("model")
	assert.False(t, c.Has("model"), "a frozen body's clone is editable")
	assert.True(t, b.Has("model"))

	for _, bad := range []string{``, ` `, `null`, `[]`, `"x"`, `{`, `{"a":1}x`, `{"a":}`, `{"a" 1}`, `{"a":1,}`} {
		_, err := openaiwire.Parse([]byte(bad))
		assert.Error(t, err, bad)
	}
}

// The names are decoded as encoding/json decodes a map's keys; the last duplicate wins.
func TestBodyNames(t *testing.T) {
	src := []byte("{\"a\":1,\"\\u0061\":2,\"\\ud800\":3,\"\xff\":4,\"\u00e9\":5,\"<\":6,\"a\":7}")
	b, err := openaiwire.Parse(src)
	require.NoError(t, err)
	var want map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(src, &want))
	assert.Equal(t, want, members(t, b))
	v, _ := b.Get("a")
	assert.Equal(t, "7", string(v))
	assert.Equal(t, "{\"\\u003c\":6,\"a\":7,\"\u00e9\":5,\"\ufffd\":4}", string(b.AppendSorted(nil)),
		"json.Marshal's key escaping; both U+FFFD keys are one member, the last wins")
}

func bodySeeds(t testing.TB) [][]byte {
	seeds, err := bodyref.Seeds(filepath.Join("..", ".."))
	require.NoError(t, err)
	return seeds
}

func FuzzBody(f *testing.F) {
	for _, s := range bodySeeds(f) {
		f.Add(s, "model", []byte(`"x"`), "stream")
	}
	f.Add([]byte(`{"b":1,"a":2}`), "\u2028<", []byte(`{}`), "a")
	f.Fuzz(func(t *testing.T, src []byte, setName string, setValue []byte, dropName string) {
		checkBody(t, src, setName, setValue, dropName)
	})
}
