package jsonwire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestUnescapeErrors: contents that no JSON string holds are refused, at the byte at fault.
func TestUnescapeErrors(t *testing.T) {
	for _, c := range []struct {
		src string
		m   UTF8
		off int
		msg string
	}{
		{`ab\`, ReplaceInvalid, 2, "invalid escape"},
		{`ab\x`, ReplaceInvalid, 2, "invalid escape"},
		{`\u12`, ReplaceInvalid, 0, `invalid \u escape`},
		{`a\u12g4`, KeepInvalid, 1, `invalid \u escape`},
		{`a"b`, ReplaceInvalid, 1, "unterminated string"},
		{"a\nb", KeepInvalid, 1, "control character"},
		{"ok \xff", RejectInvalid, 3, "invalid UTF-8"},
		{`\u00e9 \ud800`, RejectInvalid, 7, "lone UTF-16 surrogate"},
		{`\udc00\ud800`, RejectInvalid, 0, "lone UTF-16 surrogate"},
		{`\ud800\u0041`, RejectInvalid, 0, "lone UTF-16 surrogate"},
	} {
		_, err := Unescape(nil, []byte(c.src), c.m)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset != c.off || !strings.Contains(se.Msg, c.msg) {
			t.Errorf("Unescape(%q, %d) = %v, want byte %d: %s", c.src, c.m, err, c.off, c.msg)
		}
		if _, err2 := UnescapeString([]byte(c.src), c.m); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("UnescapeString(%q): %v, Unescape: %v", c.src, err2, err)
		}
	}
	// What RejectInvalid takes, it decodes as the others do.
	for _, src := range []string{`caf` + "\xc3\xa9" + ` \ud83d\ude00 \n`, ``, `plain`} {
		r, err := Unescape(nil, []byte(src), RejectInvalid)
		k, _ := Unescape(nil, []byte(src), ReplaceInvalid)
		if err != nil || string(r) != string(k) || !utf8.Valid(r) {
			t.Errorf("RejectInvalid(%q) = %q, %v; ReplaceInvalid %q", src, r, err, k)
		}
	}
}

// TestUnescapeNoEscapes: with nothing to decode, Unescape is one append and UnescapeString one
// allocation; invalid UTF-8 outside ASCII leaves the fast path only where it must.
func TestUnescapeNoEscapes(t *testing.T) {
	src := []byte(strings.Repeat("plain text, caf\u00e9 \U0001F600 ", 8))
	dst := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() { dst, _ = Unescape(dst[:0], src, ReplaceInvalid) }); n != 0 {
		t.Errorf("Unescape into room: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = UnescapeString(src, ReplaceInvalid) }); n != 1 {
		t.Errorf("UnescapeString: %v allocations", n)
	}
	esc := []byte(`say \"hi\" ` + strings.Repeat("x", 100))
	if n := testing.AllocsPerRun(100, func() { _, _ = UnescapeString(esc, ReplaceInvalid) }); n != 1 {
		t.Errorf("UnescapeString with escapes: %v allocations", n)
	}
	mixed := []byte("\u00e9\xff\u00e9")
	if got, _ := Unescape(nil, mixed, ReplaceInvalid); string(got) != "\u00e9\uFFFD\u00e9" {
		t.Errorf("%q", got)
	}
	if got, _ := Unescape(nil, mixed, KeepInvalid); string(got) != string(mixed) {
		t.Errorf("%q", got)
	}
}

// TestSurrogateBoundaries: the edges of the surrogate ranges decode as encoding/json decodes
// them, in every mode that takes them.
func TestSurrogateBoundaries(t *testing.T) {
	for _, lit := range []string{
		`"\ud7ff\ud800\udc00"`, `"\udbff\udfff"`, `"\ud800\ue000"`, `"\ud800\udbff"`, `"\udbff\udc00"`,
		`"\ud800\ud7ff"`, `"\ue000"`, `"\udfff"`, `"\uDBFF\uDFFF\uD800"`, `"\ud800\u"`, `"\ud800\\u"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(lit), &want); err != nil {
			if _, err := Unescape(nil, []byte(lit[1:len(lit)-1]), ReplaceInvalid); err == nil {
				t.Errorf("%s: encoding/json refuses it (%v), Unescape does not", lit, err)
			}
			continue
		}
		for _, m := range []UTF8{ReplaceInvalid, KeepInvalid} {
			if got, err := Unescape(nil, []byte(lit[1:len(lit)-1]), m); err != nil || string(got) != want {
				t.Errorf("Unescape(%s, %d) = %q, %v; encoding/json %q", lit, m, got, err, want)
			}
		}
		_, err := Unescape(nil, []byte(lit[1:len(lit)-1]), RejectInvalid)
		if clean := !strings.ContainsRune(want, utf8.RuneError); clean != (err == nil) {
			t.Errorf("RejectInvalid(%s): %v, decoded %q", lit, err, want)
		}
		if strict := Validate([]byte(lit), Options{StrictUTF8: true}); (strict == nil) != (err == nil) {
			t.Errorf("%s: StrictUTF8 %v, RejectInvalid %v", lit, strict, err)
		}
	}
}
