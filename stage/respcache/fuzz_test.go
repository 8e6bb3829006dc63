package respcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/infergate/infergate/core/pipeline"
)

// FuzzCacheControl: any header value parses without panicking, and the directives that matter
// are found in any case, among others, wherever they stand in the list.
func FuzzCacheControl(f *testing.F) {
	for _, s := range []string{"no-cache", "No-Store", "no-cache, no-store", `private="a, no-store", max-age=0`,
		`x="unterminated, no-cache`, `a=\"b, no-cache`, ",,, ,", "max-age=00", "max-age=-1", "NO-CACHE;x", "=", `"`, `no-store="\"`} {
		f.Add(s, "")
	}
	f.Add("public", "no-store")
	f.Fuzz(func(t *testing.T, a, b string) {
		c := parseControl([]string{a, b})
		// Appending a directive after a complete list always takes effect.
		if !strings.Contains(a, `"`) {
			if d := parseControl([]string{a + ", no-store"}); !d.noStore {
				t.Fatalf("no-store after %q not seen", a)
			}
			if d := parseControl([]string{a, "NO-CACHE"}); !d.noCache {
				t.Fatalf("NO-CACHE after %q not seen", a)
			}
		}
		if c.noStore && !strings.Contains(strings.ToLower(a+b), "no-store") {
			t.Fatalf("no-store found in %q %q", a, b)
		}
	})
}

func TestCacheControl(t *testing.T) {
	for _, c := range []struct {
		in               string
		noCache, noStore bool
	}{
		{"", false, false},
		{"no-cache", true, false},
		{"NO-STORE", false, true},
		{" max-age=0 , no-store", true, true},
		{"max-age=10", false, false},
		{"max-age=\"0\"", true, false},
		{`private="no-cache, no-store"`, false, false},
		{`private="x\", no-store", no-cache`, true, false},
		{"no-cachex, xno-store", false, false},
		{"no-cache=foo", true, false},
	} {
		got := parseControl([]string{c.in})
		if got.noCache != c.noCache || got.noStore != c.noStore {
			t.Errorf("%q: got %+v, want no-cache %v no-store %v", c.in, got, c.noCache, c.noStore)
		}
	}
}

// FuzzDerive: any request body the pipeline accepts yields a lookup without panicking; a body
// re-encoded with its members in another order and other spacing has the same keys.
func FuzzDerive(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","temperature":0,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","temperature":0,"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`,
		`{"model":"m","temperature":0.0,"n":1,"max_tokens":1e2,"seed":12345678901234567890,"messages":[]}`,
		`{"model":"m","temperature":0,"prompt":"once"}`,
		`{"model":"m","temperature":0,"prompt":["a","b"]}`,
		`{"model":"m","temperature":0,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
		`{"model":"m","temperature":0,"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
		`{"model":"m","temperature":1}`,
		`{"model":"m","temperature":0,"n":2}`,
		`{"model":"m","temperature":0,"s":"\ud800\u00e9\"\\\n"}`,
	} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, body string, semantic bool) {
		for _, path := range []string{pathChat, pathCompletions} {
			req, err := pipeline.NewRequest(path, []byte(body))
			if err != nil {
				return
			}
			w, err := req.Wire()
			if err != nil {
				return
			}
			k := &keyer{model: "m", semantic: semantic, skip: skipped}
			l := k.derive(path, "o", w)
			if l.bypass != "" {
				continue
			}
			if l.key == "" || l.partition == "" && l.text != "" || l.partition != "" && !semantic {
				t.Fatalf("lookup %+v", l)
			}
			// The same members, re-encoded by encoding/json (sorted, compact, its escaping).
			var m map[string]any
			d := json.NewDecoder(strings.NewReader(body))
			d.UseNumber()
			if d.Decode(&m) != nil {
				continue
			}
			again, err := json.Marshal(m)
			if err != nil {
				continue
			}
			req2, err := pipeline.NewRequest(path, again)
			if err != nil {
				t.Fatalf("re-encoded %s: %v", again, err)
			}
			w2, err := req2.Wire()
			if err != nil {
				t.Fatalf("re-encoded %s: %v", again, err)
			}
			l2 := k.derive(path, "o", w2)
			if l2 != l && !hasDuplicateKeys(body) {
				t.Fatalf("%s and %s: %+v != %+v", body, again, l, l2)
			}
		}
	})
}

// hasDuplicateKeys is a body whose objects repeat a member: its decodings may differ.
func hasDuplicateKeys(s string) bool {
	d := json.NewDecoder(strings.NewReader(s))
	var stack []map[string]bool
	expectKey := false
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, map[string]bool{})
				expectKey = true
				continue
			case '}', ']':
				if v == '}' {
					stack = stack[:len(stack)-1]
				}
			case '[':
				stack = append(stack, nil)
				expectKey = false
				continue
			}
			if v == ']' {
				stack = stack[:len(stack)-1]
			}
		case string:
			if expectKey && len(stack) > 0 && stack[len(stack)-1] != nil {
				if stack[len(stack)-1][v] {
					return true
				}
				stack[len(stack)-1][v] = true
				expectKey = false
				continue
			}
		}
		expectKey = len(stack) > 0 && stack[len(stack)-1] != nil
	}
}

// FuzzStorable: any upstream answer is judged without panicking; what it keeps is a JSON object
// without id and created, which a hit turns back into a complete answer.
func FuzzStorable(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`,
		`{"choices":[{"message":{"tool_calls":[{"id":"c"}]},"finish_reason":"stop"}]}`,
		`{"choices":[{"finish_reason":"length","text":"a"}]}`,
		`{"choices":[{"finish_reason":null}]}`,
		`{"choices":[]}`, `{"error":{"message":"x"}}`, `[]`, `null`, `{}`, `{"choices":[{"finish_reason":"tool_calls"}]}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, resp []byte, tools bool) {
		tmpl, skip := storable(pathChat, resp, tools)
		if skip != "" {
			if tmpl != nil {
				t.Fatal("a template with a reason not to store")
			}
			return
		}
		full, err := fullAnswer(tmpl, "chatcmpl-1", 7)
		if err != nil {
			t.Fatalf("template %s: %v", tmpl, err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(full, &m); err != nil {
			t.Fatalf("answer %s: %v", full, err)
		}
		if string(m["id"]) != `"chatcmpl-1"` || string(m["created"]) != "7" {
			t.Fatalf("answer %s", full)
		}
		if _, err := replay(pathChat, full, replayOptions{ID: "x"}); err != nil {
			t.Fatalf("replay of %s: %v", full, err)
		}
	})
}

// FuzzRedisRecords: any bytes found in Redis or on its channel decode without panicking or
// allocating beyond what they hold, and what decodes encodes to a record that decodes the same.
func FuzzRedisRecords(f *testing.F) {
	m := meta{partition: "p", vector: []float32{0.6, 0.8}, size: 12, expires: 1_700_000_000_000}
	f.Add(appendMeta(nil, m))
	f.Add(appendAddMessage(nil, 7, "model|alice|abc", m))
	f.Add(appendAddMessage(nil, 0, "k", meta{}))
	f.Add(appendFlushMessage(nil, 1<<60))
	f.Add([]byte{metaVersion, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeMeta(b); err == nil {
			if len(m.vector) > len(b)/4 {
				t.Fatalf("a vector of %d from %d bytes", len(m.vector), len(b))
			}
			m2, err := decodeMeta(appendMeta(nil, m))
			if err != nil || !sameMeta(m, m2) {
				t.Fatalf("%x: %+v, then %+v, %v", b, m, m2, err)
			}
		}
		if msg, err := decodeMessage(b); err == nil {
			again := appendFlushMessage(nil, msg.origin)
			if !msg.flush {
				again = appendAddMessage(nil, msg.origin, msg.key, msg.meta)
			}
			msg2, err := decodeMessage(again)
			if err != nil || msg2.origin != msg.origin || msg2.flush != msg.flush || msg2.key != msg.key || !sameMeta(msg.meta, msg2.meta) {
				t.Fatalf("%x: %+v, then %+v, %v", b, msg, msg2, err)
			}
		}
	})
}

// sameMeta compares vectors bit for bit (a NaN is itself).
func sameMeta(a, b meta) bool {
	if a.partition != b.partition || a.size != b.size || a.expires != b.expires || len(a.vector) != len(b.vector) {
		return false
	}
	for i := range a.vector {
		if math.Float32bits(a.vector[i]) != math.Float32bits(b.vector[i]) {
			return false
		}
	}
	return true
}

// FuzzCanonicalJSON: the canonical form of any valid JSON is valid JSON meaning the same, is its
// own canonical form, and is the canonical form of encoding/json's re-encoding of the value.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,2e0,"x\u00e9\ud83d\ude00"],"a":null}`, `"\ud800\u0041"`, `-0.0`,
		`[1e400, 12345678901234567890, 0.1, 1E-7]`, "\"\xff\"", `{"<":"&"}`, ` [ ] `, `{"":{"":{}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := canonicalJSON(nil, src)
		if !json.Valid(src) {
			return // anything, but no panic
		}
		if err != nil {
			if errors.Is(err, errTooDeep) {
				return
			}
			t.Fatalf("%q: %v", src, err)
		}
		if !json.Valid(c) {
			t.Fatalf("%q -> invalid %q", src, c)
		}
		again, err := canonicalJSON(nil, c)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("%q -> %q -> %q, %v", src, c, again, err)
		}
		var v any
		d := json.NewDecoder(bytes.NewReader(src))
		d.UseNumber()
		if d.Decode(&v) != nil {
			return
		}
		re, err := json.Marshal(v)
		if err != nil {
			return
		}
		viaStd, err := canonicalJSON(nil, re)
		if err != nil || !bytes.Equal(viaStd, c) {
			t.Fatalf("%q -> %q, but re-encoded %q -> %q, %v", src, c, re, viaStd, err)
		}
	})
}

// FuzzWords: any text's words (what a lexical semantic hit compares) are single-spaced, the
// same with more spacing, in lower case, and with a question mark after a final letter; a text
// with words has the same words as itself, and sameWords does not care which text it stored.
func FuzzWords(f *testing.F) {
	for _, s := range []string{"What is the capital of France?", "Don’t  guess: 3.5 -5 2*(3+4) x != 1", "¿Dónde está?",
		"这个季度的收入最高？", "ΛΟΓΟΣ", "İstanbul ıı", "zero\u200bwidth", "\xff\xfe", "'a' \"b\" (c) [5]", "well-known — 5-3"} {
		f.Add(s, strings.ToUpper(s))
	}
	f.Add("the quarterly definitely", "the quartelry definitley")
	f.Fuzz(func(t *testing.T, a, b string) {
		w := wordsOf(a)
		if strings.HasPrefix(w, " ") || strings.HasSuffix(w, " ") || strings.Contains(w, "  ") {
			t.Fatalf("wordsOf(%q) = %q", a, w)
		}
		if sameWords(w, w) != (w != "") {
			t.Fatalf("%q: not the same words as itself", a)
		}
		if got := wordsOf(strings.ReplaceAll(a, " ", " \n\t ")); got != w {
			t.Fatalf("more spacing: %q, not %q", got, w)
		}
		if got := wordsOf(strings.ToLower(a)); got != w {
			t.Fatalf("lower case: %q, not %q", got, w)
		}
		if r, _ := utf8.DecodeLastRuneInString(a); unicode.IsLetter(r) {
			if got := wordsOf(a + "?"); got != w {
				t.Fatalf("a question mark: %q, not %q", got, w)
			}
		}
		wb := wordsOf(b)
		if sameWords(w, wb) != sameWords(wb, w) {
			t.Fatalf("%q and %q: sameWords depends on the order", a, b)
		}
	})
}
