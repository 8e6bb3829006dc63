package jsonwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzWire checks the whole package against encoding/json on one input, read three ways:
//   - as a document: Valid agrees with json.Valid; StrictUTF8 accepts no more, and accepts
//     anything valid without a backslash in valid UTF-8; and for a valid document, a walk with
//     the Scanner meets the tokens json.Decoder meets, ending where it says each ends, every
//     string decoding as it decodes it, and every value's SkipValue ending where the walk does;
//   - as a string's contents: Unescape succeeds exactly when json.Valid takes them quoted, and
//     then decodes them as json.Unmarshal does (KeepInvalid: the same but for invalid bytes;
//     RejectInvalid: the same, or an error if there was anything to replace);
//   - as text to write: every Escaping's output is valid JSON that json.Unmarshal reads back as
//     the text (invalid bytes as U+FFFD), EncodingJSON's is json.Marshal's, PythonASCII's is
//     printable ASCII, and a string and its bytes write the same;
//   - as a value to pass through: AppendCompact fails exactly when encoding/json does, and
//     writes what json.Marshal writes for a json.RawMessage (EncodingJSON) or json.Compact
//     (Minimal).
//
// Its seeds are the corpora of the readers it replaces (testdata/fuzz/FuzzWire: the chat
// template's FuzzDecodeRequest, the response cache's FuzzStorable and the Granite stage's
// FuzzChatStream, their other arguments dropped) and the bodies below (with the seeds of the
// request router's FuzzScanRouting and the cache's FuzzCanonicalJSON).
func FuzzWire(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m\u00e9","stream":null,"n":1.5e3,"x":[true,false,null,{}],"y":-0}`,
		`["\ud83d\ude00","\ud800","\udc00\ud800\udc00","\ud800\\u0041"]`,
		"\"caf\xc3\xa9 \xff\xfe\"", `[1,]`, `{"a":1,}`, `01`, `1.`, `"\u12"`, "\"\x01\"", `[[[[]]]]`,
		`<script>&amp;</script>` + "\u2028\u2029\x7f\b\f",
		// core/pipeline FuzzScanRouting's seeds.
		`{"messages":[{"role":"user","content":"hi"}],"model":"llama","top_k":5,"guided_json":{"a":[1,2.5e-3,null]}}`,
		`{"mod\u0065l":"x"}`, `{"model":"\ud83d\ude00"}`, `{"model":"a","model":null}`, `{"a":-0.0E+1}`, "{\"model\":\"\xff\"}",
		// stage/respcache FuzzCanonicalJSON's seeds.
		`{"b":1,"a":[1.0,2e0,"x\u00e9\ud83d\ude00"],"a":null}`, `"\ud800\u0041"`, `-0.0`,
		`[1e400, 12345678901234567890, 0.1, 1E-7]`, "\"\xff\"", `{"<":"&"}`, ` [ ] `, `{"":{"":{}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDocument(t, data)
		checkContents(t, data)
		checkWriters(t, data)
		checkCompact(t, data)
	})
}

func checkDocument(t *testing.T, data []byte) {
	valid := Valid(data)
	if valid != json.Valid(data) {
		t.Fatalf("Valid(%q) = %v, json.Valid %v", data, valid, !valid)
	}
	strictErr := Validate(data, Options{StrictUTF8: true})
	if strictErr == nil && !valid {
		t.Fatalf("StrictUTF8 took %q, which encoding/json refuses", data)
	}
	if valid && strictErr != nil && utf8.Valid(data) && !bytes.Contains(data, []byte{'\\'}) {
		t.Fatalf("StrictUTF8 refused %q, valid UTF-8 with no escape: %v", data, strictErr)
	}
	if !valid {
		var se *SyntaxError
		if err := Validate(data, Options{}); !errors.As(err, &se) || se.Offset < 0 || se.Offset > len(data) {
			t.Fatalf("Validate(%q) = %v: no offset within the input", data, err)
		}
		return
	}
	if depth(data) > 100 {
		return // the walk below recurses; the skip (which does not) was checked by Valid
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	s := NewScanner(data, Options{})
	walk(t, data, &s, dec, strictErr == nil)
	if err := s.Finish(); err != nil {
		t.Fatalf("Finish(%q): %v", data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("%q: encoding/json has more: %v", data, err)
	}
}

// depth is how deeply data's brackets nest, strings not told apart (an upper bound).
func depth(data []byte) int {
	d, most := 0, 0
	for _, c := range data {
		switch c {
		case '{', '[':
			d++
			most = max(most, d)
		case '}', ']':
			d--
		}
	}
	return most
}

// walk reads the value at s as the Scanner's pull API does and checks each step against dec.
func walk(t *testing.T, data []byte, s *Scanner, dec *json.Decoder, strict bool) {
	t.Helper()
	start := skipSpace(data, s.Offset())
	skipEnd, skipErr := SkipValue(data, start, Options{})
	tok, err := dec.Token()
	if err != nil {
		t.Fatalf("%q at %d: encoding/json: %v", data, start, err)
	}
	switch KindOf(s.Peek()) {
	case Object, Array:
		object := s.Peek() == '{'
		if object {
			err = s.EnterObject()
		} else {
			err = s.EnterArray()
		}
		if err != nil || tok != json.Delim(data[start]) || dec.InputOffset() != int64(s.Offset()) {
			t.Fatalf("%q at %d: enter: %v, encoding/json %v at %d", data, start, err, tok, dec.InputOffset())
		}
		for {
			var more bool
			if object {
				var key Token
				key, more, err = s.NextMember()
				if err == nil && more {
					k, kerr := dec.Token()
					checkString(t, data, key, k, kerr, dec, strict)
				}
			} else {
				more, err = s.NextElement()
			}
			if err != nil {
				t.Fatalf("%q at %d: %v", data, s.Offset(), err)
			}
			if !more {
				break
			}
			walk(t, data, s, dec, strict)
		}
		end, err := dec.Token()
		if err != nil || end != json.Delim(data[s.Offset()-1]) || dec.InputOffset() != int64(s.Offset()) {
			t.Fatalf("%q: close at %d: %v %v, encoding/json at %d", data, s.Offset(), end, err, dec.InputOffset())
		}
	case String:
		v, err := s.ReadString()
		if err != nil {
			t.Fatalf("%q: ReadString: %v", data, err)
		}
		checkString(t, data, v, tok, nil, dec, strict)
	default:
		v, err := s.ReadValue()
		if err != nil {
			t.Fatalf("%q: ReadValue: %v", data, err)
		}
		want := map[Kind]any{Null: nil, True: true, False: false}[v.Kind]
		if n, ok := tok.(json.Number); ok {
			want = json.Number(v.Raw(data))
			if v.Integer() == strings.ContainsAny(string(n), ".eE") {
				t.Fatalf("%q: %s: Integer() = %v", data, n, v.Integer())
			}
		}
		if tok != want || dec.InputOffset() != int64(v.End) {
			t.Fatalf("%q: %v ends at %d, encoding/json %v at %d", data, v.Kind, v.End, tok, dec.InputOffset())
		}
	}
	if skipErr != nil || skipEnd != s.Offset() {
		t.Fatalf("%q: SkipValue(%d) = %d, %v; the walk ended at %d", data, start, skipEnd, skipErr, s.Offset())
	}
}

// checkString checks a string token (a key or a value) against encoding/json's reading of it.
func checkString(t *testing.T, data []byte, v Token, tok json.Token, err error, dec *json.Decoder, strict bool) {
	t.Helper()
	want, ok := tok.(string)
	if err != nil || !ok || dec.InputOffset() != int64(v.End) {
		t.Fatalf("%q: string ends at %d; encoding/json %v, %v at %d", data, v.End, tok, err, dec.InputOffset())
	}
	contents := v.Contents(data)
	got, err := UnescapeString(contents, ReplaceInvalid)
	if err != nil || got != want {
		t.Fatalf("%q: UnescapeString(%q) = %q, %v; encoding/json %q", data, contents, got, err, want)
	}
	if v.Flags&Escaped != 0 != bytes.Contains(contents, []byte{'\\'}) || v.Flags&NonASCII != 0 != !isASCII(contents) {
		t.Fatalf("%q: flags %b for %q", data, v.Flags, contents)
	}
	if r, err := Unescape(nil, contents, RejectInvalid); strict && (err != nil || string(r) != want) {
		t.Fatalf("%q: StrictUTF8 took %q but RejectInvalid: %q, %v", data, contents, r, err)
	}
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func checkContents(t *testing.T, data []byte) {
	quoted := append(append([]byte{'"'}, data...), '"')
	var want string
	werr := json.Unmarshal(quoted, &want)
	valid := Valid(quoted)
	if valid != (werr == nil) {
		t.Fatalf("Valid(%q) = %v, json.Unmarshal: %v", quoted, valid, werr)
	}
	got, err := Unescape(nil, data, ReplaceInvalid)
	if (err == nil) != valid || err == nil && string(got) != want {
		t.Fatalf("Unescape(%q) = %q, %v; encoding/json %q, %v", data, got, err, want, werr)
	}
	if !valid {
		return
	}
	kept, err := Unescape(nil, data, KeepInvalid)
	if err != nil || string([]rune(string(kept))) != want {
		t.Fatalf("KeepInvalid(%q) = %q, %v; replaced, %q", data, kept, err, want)
	}
	r, err := Unescape(nil, data, RejectInvalid)
	if clean := string(kept) == want; err == nil && (string(r) != want || !clean) || err != nil && clean && utf8.Valid(data) && !mayHoldSurrogate(data) {
		t.Fatalf("RejectInvalid(%q) = %q, %v; want %q", data, r, err, want)
	}
}

// mayHoldSurrogate: data has a \u escape of a surrogate (or something like one): a
// replacement RejectInvalid refuses that KeepInvalid cannot show.
func mayHoldSurrogate(data []byte) bool {
	return bytes.Contains(bytes.ToLower(data), []byte(`\ud`))
}

func checkWriters(t *testing.T, data []byte) {
	text := string([]rune(string(data))) // each byte of invalid UTF-8 as U+FFFD
	for _, e := range []Escaping{Minimal, MinimalShort, EncodingJSON, Canonical, PythonASCII,
		EscapeHTML | ASCIIOnly | RawReplacement, ControlAsHex | ShortBF | EscapeLineSeparators} {
		out := AppendString(nil, string(data), e)
		var back string
		if err := json.Unmarshal(out, &back); err != nil || back != text {
			t.Fatalf("AppendString(%q, %#x) = %q: reads back as %q, %v", data, e, out, back, err)
		}
		if b := AppendString(nil, data, e); !bytes.Equal(b, out) {
			t.Fatalf("AppendString(%q, %#x): bytes %q, string %q", data, e, b, out)
		}
		if e&ASCIIOnly != 0 {
			for _, c := range out {
				if c < 0x20 || c > 0x7E {
					t.Fatalf("AppendString(%q, %#x) = %q: not printable ASCII", data, e, out)
				}
			}
		}
	}
	if m, _ := json.Marshal(string(data)); !bytes.Equal(AppendString(nil, data, EncodingJSON), m) {
		t.Fatalf("EncodingJSON(%q) = %q, json.Marshal %q", data, AppendString(nil, data, EncodingJSON), m)
	}
}
