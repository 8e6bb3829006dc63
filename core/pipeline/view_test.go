package pipeline

import (
	"bytes"
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/infergate/infergate/internal/bodyref"
	"github.com/infergate/infergate/lib/openaiwire"
)

// checkView holds a request's view to the code it replaced (internal/bodyref): Fields' map,
// EditBody's bytes, and an Edit's body, routing and errors against EditBody then SetBody.
func checkView(t *testing.T, body []byte, setName string, setValue []byte, dropName string) {
	req, err := NewRequest("/v1/chat/completions", body)
	if err != nil {
		return
	}
	require.Nil(t, req.wire, "NewRequest parses nothing past the routing scan")
	wantFields, err := bodyref.Fields(body)
	require.NoError(t, err)
	f, err := req.Fields()
	require.NoError(t, err)
	require.Equal(t, len(wantFields), len(f))
	for k, v := range wantFields {
		require.Equal(t, string(v), string(f[k]), "member %q", k)
	}

	// Has is the stages' old test: the quoted name in the bytes, then the member in Fields.
	for _, name := range append(slices.Collect(maps.Keys(wantFields)), setName, dropName, "model") {
		_, in := wantFields[name]
		has, err := req.Has(name)
		require.NoError(t, err)
		require.Equal(t, in && bytes.Contains(body, []byte(`"`+name+`"`)), has, "Has(%q)", name)
	}

	set := map[string]json.RawMessage{setName: setValue}
	wantEdited, err := bodyref.EditBody(wantFields, set, dropName)
	require.NoError(t, err)
	edited, err := req.EditBody(set, dropName)
	require.NoError(t, err)
	require.Equal(t, string(wantEdited), string(edited))
	require.Equal(t, string(body), string(req.Body()), "EditBody leaves the request as it was")

	// Edit is EditBody then SetBody, errors included; a rejected edit changes nothing.
	ref, _ := NewRequest(req.Path, body)
	refErr := ref.SetBody(wantEdited)
	r2, _ := NewRequest(req.Path, body)
	before := r2.Routing()
	err = r2.Edit(func(b *openaiwire.Body) error {
		b.Set(setName, setValue)
		b.Drop(dropName)
		return nil
	})
	if refErr != nil {
		require.Equal(t, refErr, err)
		require.Equal(t, string(body), string(r2.Body()))
		require.Equal(t, before, r2.Routing())
		return
	}
	require.NoError(t, err)
	require.Equal(t, ref.Routing(), r2.Routing(), "routing, and where the model lands, before the encode")
	require.Equal(t, string(ref.Body()), string(r2.Body()))
	require.Equal(t, string(ref.BodyWithModel("o/m\u2028")), string(r2.BodyWithModel("o/m\u2028")))

	// A struct copy and a Clone each edit on their own, either way round.
	encoded := string(r2.Body())
	cp := *r2
	cl := r2.Clone()
	for _, other := range []*Request{&cp, cl} {
		require.NoError(t, other.Edit(func(b *openaiwire.Body) error { b.Set("zz_copy", []byte(`1`)); return nil }))
		require.Contains(t, string(other.Body()), `"zz_copy":1`)
		require.Equal(t, encoded, string(r2.Body()), "the copy's edit leaves the original")
	}
	require.NoError(t, r2.Edit(func(b *openaiwire.Body) error { b.Set("zz_orig", []byte(`2`)); return nil }))
	for _, other := range []*Request{&cp, cl} {
		require.NotContains(t, string(other.Body()), `zz_orig`, "the original's edit leaves the copy")
		w, err := other.Wire()
		require.NoError(t, err)
		require.False(t, w.Has("zz_orig"))
	}

	// Two Edits, the second on a body not encoded yet, are the one sorted rewrite of both: for
	// names in UTF-8, which the view keeps as the stage gave them, while a body written and read
	// again has each invalid byte as U+FFFD.
	if !utf8.ValidString(setName) || !utf8.ValidString(dropName) {
		return
	}
	r3, _ := NewRequest(req.Path, body)
	require.NoError(t, r3.Edit(func(b *openaiwire.Body) error { b.Set(setName, setValue); b.Drop(dropName); return nil }))
	require.NoError(t, r3.Edit(func(b *openaiwire.Body) error { b.Set("zz", []byte(`[]`)); return nil }))
	require.Nil(t, r3.body, "not encoded until Body")
	wantFields2, err := bodyref.Fields(wantEdited)
	require.NoError(t, err)
	want2, err := bodyref.EditBody(wantFields2, map[string]json.RawMessage{"zz": json.RawMessage(`[]`)})
	require.NoError(t, err)
	has, err := r3.Has("zz")
	require.NoError(t, err)
	require.True(t, has)
	require.Equal(t, len(want2), r3.BodyLen())
	require.Nil(t, r3.body, "Has and BodyLen on an edited body ask the view, without an encode")
	require.Equal(t, string(want2), string(r3.Body()))
	ref2, _ := NewRequest(req.Path, want2)
	require.Equal(t, ref2.Routing(), r3.Routing())
}

func viewSeeds(t testing.TB) [][]byte {
	seeds, err := bodyref.Seeds(filepath.Join("..", ".."))
	require.NoError(t, err)
	return seeds
}

func TestView(t *testing.T) {
	for _, body := range viewSeeds(t) {
		for _, e := range []struct {
			name, value, drop string
		}{
			{"kv_transfer_params", `{"a":1}`, "stream_options"},
			{"stream", `false`, "session_id"},
			{"max_tokens", `1`, "max_completion_tokens"},
			{"model", `"other"`, "x"},
			{"model", `null`, "x"},
			{"stream", `"yes"`, "x"},
			{"messages", `[{"role":"user"`, "x"},
			{"messages", ``, "x"},
			{"\u2028<", `{}`, "model"},
			{"metadata", " {} ", ""},
			{"stream", "\tfalse", "session_id"},
		} {
			checkView(t, body, e.name, []byte(e.value), e.drop)
		}
	}
}

func FuzzView(f *testing.F) {
	for _, body := range viewSeeds(f) {
		f.Add(body, "stream", []byte(`false`), "session_id")
	}
	f.Fuzz(func(t *testing.T, body []byte, setName string, setValue []byte, dropName string) {
		checkView(t, body, setName, setValue, dropName)
	})
}

// A request no stage touches is scanned for its routing fields and nothing else: its body,
// and the body with another model's name, come without a parse.
func TestNoStageNoView(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	req, err := NewRequest("/v1/chat/completions", body)
	require.NoError(t, err)
	assert.Equal(t, body, req.Body())
	assert.Equal(t, `{"model":"up","messages":[{"role":"user","content":"hi"}],"stream":true}`, string(req.BodyWithModel("up")))
	assert.Equal(t, "m", req.Routing().Model)
	assert.Nil(t, req.wire, "no view")
	long := []byte(`{"model":"meta-llama/Llama-3.1-8B","messages":[]}`)
	allocs := testing.AllocsPerRun(100, func() {
		r, _ := NewRequest("/v1/chat/completions", long)
		_ = r.Body()
	})
	assert.Equal(t, 2.0, allocs, "the request and its model's string")
	assert.LessOrEqual(t, unsafe.Sizeof(Request{}), uintptr(224), "the view's pointer keeps the request in its size class")
}

// An Edit that sets or drops nothing leaves the body's bytes as the client sent them, and an
// edit fn's error leaves the request as it was.
func TestEditNothing(t *testing.T) {
	body := []byte(`{"stream":true, "model":"m"}`)
	req, err := NewRequest("/v1/chat/completions", body)
	require.NoError(t, err)
	w, err := req.Wire()
	require.NoError(t, err)
	assert.Panics(t, func() { w.Drop("stream") }, "the view is edited through Edit only")
	require.NoError(t, req.Edit(func(*openaiwire.Body) error { return nil }))
	assert.Equal(t, body, req.Body())
	boom := assert.AnError
	assert.Equal(t, boom, req.Edit(func(b *openaiwire.Body) error { b.Drop("stream"); return boom }))
	assert.Equal(t, body, req.Body())
	assert.True(t, req.Stream())
	require.NoError(t, req.Edit(func(b *openaiwire.Body) error { b.Drop("stream"); return nil }))
	assert.Equal(t, `{"model":"m"}`, string(req.Body()))
	assert.False(t, req.Stream(), "a routing member's edit is read at once")
}
