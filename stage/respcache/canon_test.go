package respcache

import (
	"strings"
	"testing"

	"github.com/infergate/infergate/lib/openaiwire"
)

// TestCanonicalGolden pins canonical bytes (what the cache keys hash) to what the encoder
// produced before it was moved onto internal/jsonwire: changing any of them changes the keys
// of entries running deployments hold in Redis. The nesting bound counts values: a value 65
// deep is refused, 65 nested empty arrays are not.
func TestCanonicalGolden(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"{\"b\":1,\"a\":[1.0,2e0,\"x\\u00e9\\ud83d\\ude00\"],\"a\":null}", "{\"a\":null,\"b\":1}", nil},
		{"\"\\ud800\\u0041\"", "\"�A\"", nil},
		{"\"\\ud800\\ud800\\udc00\"", "\"�𐀀\"", nil},
		{"\"\\udc00\\ud83d\\ude00\"", "\"�😀\"", nil},
		{"-0.0", "0", nil},
		{"[1e400, 12345678901234567890, 0.1, 1E-7, -0, 1.5e300, 100e-2, -12.50, 9007199254740993.0]", "[1e400,12345678901234567890,0.1,1e-07,0,1.5e+300,1,-12.5,9.007199254740992e+15]", nil},
		{"\"\xff a\x7f\u2028\xed\xa0\x80\"", "\"� a\x7f\u2028���\"", nil},
		{"{\"<\":\"&\",\"\\u0000\\n\\t\\\"\\\\\":\"/\\/\\b\\f\\r\\u001f\"}", "{\"\\u0000\\u000a\\u0009\\\"\\\\\":\"//\\u0008\\u000c\\u000d\\u001f\",\"<\":\"&\"}", nil},
		{" [ ] ", "[]", nil},
		{"{\"\":{\"\":{}}}", "{\"\":{\"\":{}}}", nil},
		{"[true,false,null, {} ,[]]", "[true,false,null,{},[]]", nil},
		{"{\"z\":{\"y\":1,\"x\":[{\"b\":2,\"a\":1}]},\"a\\u0062\":3,\"ab\":4}", "{\"ab\":4,\"z\":{\"x\":[{\"a\":1,\"b\":2}],\"y\":1}}", nil},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), strings.Repeat("[", 65) + strings.Repeat("]", 65), nil},
		{strings.Repeat("[", 65) + "1" + strings.Repeat("]", 65), "", errTooDeep},
		{strings.Repeat("[", 66) + strings.Repeat("]", 66), "", errTooDeep},
	} {
		got, err := canonicalJSON(nil, []byte(c.in))
		if string(got) != c.want || err != c.err {
			t.Errorf("canonicalJSON(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

// TestKeyGolden pins two requests' exact and semantic keys, as TestCanonicalGolden pins the
// canonical form.
func TestKeyGolden(t *testing.T) {
	for _, c := range []struct{ body, key, partition, text string }{
		{`{"model":"m","temperature":0,"max_tokens":10,"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"What is the capital of France?"}],"user":"bob"}`,
			"m|o|8f18fea6f3c19a18c7e4219566d5af93fedbb59072b9d1d1fedd0696372ef243", "m|o|4fb3ad4809af96be734f1c7651b3bd0d583fe89070b879866bea1c5ef7202c7c", "What is the capital of France?"},
		{`{"model":"m","temperature":0.0,"seed":12345678901234567890,"tools":[{"type":"function","function":{"name":"f","description":"caf\u00e9 <&> \"q\"","parameters":{"type":"object","properties":{"x":{"type":"number","minimum":1e0}}}}}],"messages":[{"role":"user","content":[{"type":"text","text":"a\nb"},{"type":"text","text":"\ud83d\ude00"}]}]}`,
			"m|o|a5faa037b02ccf7855477e30155304dd554ca0e0622adafe5359a6b51dddeaef", "m|o|362ad985c0e0d202faaa9c2fed6b814f5741b725f5696822044df9d4012e3764", "a\nb\n\U0001F600"},
	} {
		f, err := openaiwire.Parse([]byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		k := &keyer{model: "m", semantic: true, skip: skipped}
		if l := k.derive(pathChat, "o", f); l.key != c.key || l.partition != c.partition || l.text != c.text || l.bypass != "" {
			t.Errorf("%s: %+v", c.body, l)
		}
	}
}

// BenchmarkCanonicalJSON is the canonical form of a chat request's members (what derive does
// for every request): a system prompt, a few turns, a tool with a schema.
func BenchmarkCanonicalJSON(b *testing.B) {
	body := []byte(`{"model":"m","temperature":0,"max_tokens":256,"messages":[` +
		`{"role":"system","content":"You are a helpful assistant. Answer briefly, cite the documentation, and say so when you do not know."},` +
		`{"role":"user","content":"How do I reverse a list in Python?"},{"role":"assistant","content":"Use lst.reverse() to reverse in place, or lst[::-1] for a reversed copy."},` +
		`{"role":"user","content":"And why would I pick one over the other? Caf\u00e9 \u2014 \"quoted\"\n"}],` +
		`"tools":[{"type":"function","function":{"name":"search","description":"Search the documentation","parameters":{"type":"object","properties":{"q":{"type":"string"},"limit":{"type":"integer","minimum":1,"maximum":50}},"required":["q"]}}}],` +
		`"top_p":1.0,"seed":42,"stop":["\n\n","END"]}`)
	f, err := openaiwire.Parse(body)
	if err != nil {
		b.Fatal(err)
	}
	k := &keyer{model: "m", skip: []string{}} // every member but the model
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var dst []byte
	for b.Loop() {
		var err error
		if dst, err = k.canonicalMembers(dst[:0], f, "", false, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// A member named "" is a member like any other: two requests that differ only in its value are
// two keys (it was once taken for "no member to swap" and dropped from the exact key).
func TestEmptyNameInKey(t *testing.T) {
	k := &keyer{model: "m", semantic: true, skip: skipped}
	key := func(body string) lookup {
		f, err := openaiwire.Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return k.derive(pathChat, "o", f)
	}
	a := key(`{"model":"m","temperature":0,"":1,"messages":[{"role":"user","content":"q"}]}`)
	b := key(`{"model":"m","temperature":0,"":2,"messages":[{"role":"user","content":"q"}]}`)
	if a.key == b.key || a.partition == b.partition {
		t.Errorf("one key for two requests: %+v %+v", a, b)
	}
}
