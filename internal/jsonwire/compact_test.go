package jsonwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// TestAppendCompact pins what AppendCompact keeps and what it changes, and that under
// EncodingJSON it is json.Marshal of a json.RawMessage (FuzzWire checks that on any input).
func TestAppendCompact(t *testing.T) {
	for _, tc := range []struct {
		in, encodingJSON, minimal string
	}{
		{` { "prompt_tokens" : 9 ,"total_tokens":13, "completion_tokens":4 } `,
			`{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}`, `{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}`},
		{"[ 1 ,\n\t2.5e+3 , null,true , false, {} , [ ] ]", `[1,2.5e+3,null,true,false,{},[]]`, `[1,2.5e+3,null,true,false,{},[]]`},
		// White space inside strings stays; escapes are kept as written.
		{`"a b\t\u0041\/\"\\ "`, `"a b\t\u0041\/\"\\ "`, `"a b\t\u0041\/\"\\ "`},
		// encoding/json's extra escapes, only under their flags.
		{`{"<a>":"x & y"}`, `{"\u003ca\u003e":"x \u0026 y"}`, `{"<a>":"x & y"}`},
		{"\"\u2028 \u2029 \u2027 é\"", `"\u2028 \u2029 ` + "\u2027 é\"", "\"\u2028 \u2029 \u2027 é\""},
		// Invalid UTF-8 is kept, as json.Marshal keeps it.
		{"\"\xff\xe2\x80 <\"", "\"\xff\xe2\x80 \\u003c\"", "\"\xff\xe2\x80 <\""},
		{`"\\u2028<"`, `"\\u2028\u003c"`, `"\\u2028<"`},
	} {
		got, err := AppendCompact([]byte("x:"), []byte(tc.in), EncodingJSON)
		if err != nil || string(got) != "x:"+tc.encodingJSON {
			t.Errorf("AppendCompact(%q, EncodingJSON) = %q, %v; want %q", tc.in, got, err, "x:"+tc.encodingJSON)
		}
		if m, err := json.Marshal(json.RawMessage(tc.in)); err != nil || string(m) != tc.encodingJSON {
			t.Errorf("json.Marshal(RawMessage(%q)) = %q, %v: the table is wrong", tc.in, m, err)
		}
		if got, err := AppendCompact(nil, []byte(tc.in), Minimal); err != nil || string(got) != tc.minimal {
			t.Errorf("AppendCompact(%q, Minimal) = %q, %v; want %q", tc.in, got, err, tc.minimal)
		}
	}
	for _, bad := range []string{``, ` `, `{`, `[1,]`, `{"a":1}x`, `"\x01"`, `'a'`, `01`} {
		got, err := AppendCompact([]byte("kept"), []byte(bad), EncodingJSON)
		var se *SyntaxError
		if !errors.As(err, &se) || string(got) != "kept" {
			t.Errorf("AppendCompact(%q) = %q, %v; want dst unchanged and a SyntaxError", bad, got, err)
		}
	}
}

// checkCompact is FuzzWire's check of AppendCompact: for a valid document, EncodingJSON's output
// is json.Marshal(json.RawMessage(data)) and Minimal's json.Compact's; otherwise both fail.
func checkCompact(t *testing.T, data []byte) {
	t.Helper()
	got, err := AppendCompact(nil, data, EncodingJSON)
	want, werr := json.Marshal(json.RawMessage(data))
	if len(data) == 0 { // RawMessage's MarshalJSON writes null for nil; there is no value here
		want, werr = nil, errors.New("empty")
	}
	if (err == nil) != (werr == nil) || err == nil && !bytes.Equal(got, want) {
		t.Fatalf("AppendCompact(%q, EncodingJSON) = %q, %v; json.Marshal %q, %v", data, got, err, want, werr)
	}
	var c bytes.Buffer
	cerr := json.Compact(&c, data)
	got, err = AppendCompact(nil, data, Minimal)
	if (err == nil) != (cerr == nil) || err == nil && !bytes.Equal(got, c.Bytes()) {
		t.Fatalf("AppendCompact(%q, Minimal) = %q, %v; json.Compact %q, %v", data, got, err, c.Bytes(), cerr)
	}
}
