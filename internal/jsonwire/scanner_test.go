package jsonwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// validity is a table of documents on both sides of encoding/json's line: Valid must agree with
// json.Valid on each, and with the "valid" column, so a change in either shows.
var validity = []struct {
	doc   string
	valid bool
}{
	{``, false}, {` `, false}, {`null`, true}, {` true `, true}, {"\t\n\r false", true}, {`nul`, false},
	{`nulll`, false}, {`True`, false}, {`truex`, false}, {`"x"`, true}, {`"x`, false}, {`"x"y`, false},
	{`0`, true}, {`-0`, true}, {`01`, false}, {`-01`, false}, {`1.`, false}, {`.1`, false}, {`1.5`, true},
	{`1e5`, true}, {`1E+5`, true}, {`1e-05`, true}, {`1e`, false}, {`1e+`, false}, {`-`, false},
	{`+1`, false}, {`1.5e3.2`, false}, {`0x10`, false}, {`NaN`, false}, {`Infinity`, false}, {`-Infinity`, false},
	{`123456789012345678901234567890`, true}, {`1 2`, false}, {`{}`, true}, {`[]`, true}, {`{`, false},
	{`[`, false}, {`]`, false}, {`[1,]`, false}, {`[,1]`, false}, {`[1 2]`, false}, {`{"a":1,}`, false},
	{`{"a" 1}`, false}, {`{"a":}`, false}, {`{a:1}`, false}, {`{1:1}`, false}, {`{"a":1 "b":2}`, false},
	{`{"a":1,"a":2}`, true}, {`[{"a":[{"b":{}}]}]`, true}, {`[}`, false}, {`{]`, false}, {`[[]]]`, false},
	{` [ 1 , { "k" : [ ] } ] `, true}, {`"\u00e9\uD83D\uDE00"`, true}, {`"\ud800"`, true}, {`"\udc00x"`, true},
	{`"\u12"`, false}, {`"\u12G4"`, false}, {`"\x"`, false}, {`"\'"`, false}, {`"\/"`, true}, {`"\`, false},
	{"\"a\x00b\"", false}, {"\"a\x1fb\"", false}, {"\"a\x7fb\"", true}, {"\"\xff\xfe\"", true},
	{"\"\xed\xa0\x80\"", true}, {"\"caf\xc3\xa9\"", true}, {"\xef\xbb\xbf{}", false}, {"{}\x00", false},
	{`"` + strings.Repeat("long string ", 20) + `\n"`, true}, {`[1,2,3,4,5,6,7,8,9,10,-1.5e-3]`, true},
	{"\"a\tb\"", false}, {"\v1", false}, {"1\f", false},
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, c := range validity {
		if got, ej := Valid([]byte(c.doc)), json.Valid([]byte(c.doc)); got != c.valid || ej != c.valid {
			t.Errorf("Valid(%q) = %v, encoding/json %v, want %v", c.doc, got, ej, c.valid)
		}
	}
}

// TestErrorOffsets: an error says what and where, at the byte at fault.
func TestErrorOffsets(t *testing.T) {
	for _, c := range []struct {
		doc string
		off int
		msg string
	}{
		{`{"a":1,}`, 7, "a string expected"},
		{`[1 2]`, 3, "',' or ']' expected in array"},
		{`{"a" 1}`, 5, "':' expected"},
		{`{"a":1 "b":2}`, 7, "',' or '}' expected"},
		{`[tru]`, 1, "invalid literal"},
		{`[1.]`, 3, "invalid number"},
		{`["a\qb"]`, 3, "invalid escape"},
		{`["\u12x4"]`, 2, `invalid \u escape`},
		{"[\"ab\x01\"]", 4, "control character"},
		{`["abc`, 5, "unterminated string"},
		{`[1,`, 3, "unexpected end of input"},
		{`{} x`, 3, "unexpected data after the top-level value"},
		{``, 0, "unexpected end of input"},
		{`}`, 0, "a value expected"},
	} {
		err := Validate([]byte(c.doc), Options{})
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset != c.off || !strings.Contains(se.Msg, c.msg) {
			t.Errorf("Validate(%q) = %v, want byte %d: %s", c.doc, err, c.off, c.msg)
		}
	}
}

// TestDepth: nesting up to encoding/json's 10,000 is valid and one more is not, as json.Valid
// has it; the error wraps ErrTooDeep; MaxDepth lowers the bound; the skip does not recurse.
func TestDepth(t *testing.T) {
	nest := func(n int, open, close string) []byte {
		return []byte(strings.Repeat(open, n) + strings.Repeat(close, n))
	}
	for _, n := range []int{DefaultMaxDepth, DefaultMaxDepth + 1} {
		for _, doc := range [][]byte{nest(n, "[", "]"), nest(n, `{"k":`, "}")} {
			// A {"k": nest holds a value in the innermost object: close it with one.
			if doc[0] == '{' {
				doc = bytes.Replace(doc, []byte(`:}`), []byte(`:0}`), 1)
			}
			want := n <= DefaultMaxDepth
			err := Validate(doc, Options{})
			if (err == nil) != want || json.Valid(doc) != want {
				t.Fatalf("depth %d (%c): Validate = %v, json.Valid = %v, want valid %v", n, doc[0], err, json.Valid(doc), want)
			}
			if !want && !errors.Is(err, ErrTooDeep) {
				t.Fatalf("depth %d: %v does not wrap ErrTooDeep", n, err)
			}
		}
	}
	if err := Validate([]byte(`[[[1]]]`), Options{MaxDepth: 2}); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("MaxDepth 2: %v", err)
	}
	if err := Validate([]byte(`[[1]]`), Options{MaxDepth: 2}); err != nil {
		t.Fatalf("MaxDepth 2: %v", err)
	}
	if err := Validate(nest(DefaultMaxDepth+300, "[", "]"), Options{MaxDepth: -1}); err != nil {
		t.Fatalf("MaxDepth -1: %v", err)
	}
	// Containers entered count too.
	s := NewScanner([]byte(`{"a":[[1]]}`), Options{MaxDepth: 2})
	if err := s.EnterObject(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.NextMember(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadValue(); !errors.Is(err, ErrTooDeep) {
		t.Fatalf("skip below an entered object: %v", err)
	}
}

// TestStrictUTF8: StrictUTF8 refuses invalid UTF-8 and lone surrogates, at the byte at fault,
// and takes valid text and pairs.
func TestStrictUTF8(t *testing.T) {
	for _, c := range []struct {
		doc string
		off int // -1: valid
	}{
		{`"caf` + "\xc3\xa9" + `"`, -1},
		{`"\ud83d\ude00"`, -1},
		{`"\uD83D\uDE00 and \u00e9"`, -1},
		{`"ab` + "\xff" + `"`, 3},
		{`["ok","` + "a\xc3\xa9\xe2\x82" + `"]`, 10},
		{`"` + "\xed\xa0\x80" + `"`, 1},
		{`"\ud800"`, 1},
		{`"x\udc00"`, 2},
		{`"\ud800\u0041"`, 1},
		{`"\ud800\ud800"`, 1},
		{`"\ud800\`, 1},
	} {
		err := Validate([]byte(c.doc), Options{StrictUTF8: true})
		var se *SyntaxError
		switch {
		case c.off < 0 && err != nil:
			t.Errorf("%q: %v", c.doc, err)
		case c.off >= 0 && (!errors.As(err, &se) || se.Offset != c.off):
			t.Errorf("%q: %v, want an error at byte %d", c.doc, err, c.off)
		}
		if c.off >= 0 && !json.Valid([]byte(c.doc)) && c.doc != `"\ud800\` {
			t.Errorf("%q: encoding/json refuses it: not a strictness case", c.doc)
		}
	}
}

// TestWalk reads a body as the request router does: the top-level members it wants, every other
// value skipped, null leaving a field unset, the whole checked.
func TestWalk(t *testing.T) {
	body := []byte(` {"messages":[{"role":"user","content":"hi \"there\""}],"model":"m\u00e9","stream":null,` +
		`"tools":[],"n":2, "stream" : true , "meta":{"a":[1,{"b":null}]}} `)
	s := NewScanner(body, Options{})
	if err := s.EnterObject(); err != nil {
		t.Fatal(err)
	}
	var model string
	var stream bool
	var skipped []string
	for {
		key, more, err := s.NextMember()
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
		switch string(key.Contents(body)) {
		case "model":
			tok, err := s.ReadString()
			if err != nil || tok.Flags != Escaped {
				t.Fatalf("model: %+v %v", tok, err)
			}
			if model, err = UnescapeString(tok.Contents(body), ReplaceInvalid); err != nil {
				t.Fatal(err)
			}
		case "stream":
			if s.ReadNull() {
				break
			}
			if stream, err = s.ReadBool(); err != nil {
				t.Fatal(err)
			}
		default:
			tok, err := s.ReadValue()
			if err != nil {
				t.Fatal(err)
			}
			skipped = append(skipped, string(tok.Raw(body)))
		}
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	want := []string{`[{"role":"user","content":"hi \"there\""}]`, `[]`, `2`, `{"a":[1,{"b":null}]}`}
	if model != "mé" || !stream || strings.Join(skipped, " ") != strings.Join(want, " ") {
		t.Fatalf("model %q stream %v skipped %q", model, stream, skipped)
	}
}

// TestWalkArrays: elements read one by one, nested containers entered, errors sticky.
func TestWalkArrays(t *testing.T) {
	doc := []byte(`[[1, 2.5e3], [], ["x"], {}]`)
	s := NewScanner(doc, Options{})
	var got []string
	if err := s.EnterArray(); err != nil {
		t.Fatal(err)
	}
	for {
		more, err := s.NextElement()
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
		if s.Peek() != '[' {
			tok, err := s.ReadValue()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, tok.Kind.String())
			continue
		}
		if err := s.EnterArray(); err != nil {
			t.Fatal(err)
		}
		for {
			more, err := s.NextElement()
			if err != nil {
				t.Fatal(err)
			}
			if !more {
				break
			}
			if KindOf(s.Peek()) == Number {
				tok, err := s.ReadNumber()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(tok.Raw(doc))+map[bool]string{true: "i", false: "f"}[tok.Integer()])
			} else {
				tok, _ := s.ReadString()
				got = append(got, string(tok.Raw(doc)))
			}
		}
		got = append(got, "|")
	}
	if err := s.Finish(); err != nil || strings.Join(got, " ") != `1i 2.5e3f | | "x" | object` {
		t.Fatalf("%q %v", got, err)
	}

	s = NewScanner([]byte(`[1,,2]`), Options{})
	_ = s.EnterArray()
	_, _ = s.NextElement()
	_, _ = s.ReadNumber()
	_, _ = s.NextElement()
	_, err := s.ReadNumber()
	if err == nil || s.Err() != err || s.Peek() != 0 || s.Finish() != err {
		t.Fatalf("error not sticky: %v / %v", err, s.Err())
	}
	if _, err := s.ReadValue(); err != s.Err() {
		t.Fatal("ReadValue after an error")
	}
	s.Reset([]byte(`[]`))
	if _, err := s.ReadValue(); err != nil || s.Finish() != nil {
		t.Fatal("Reset did not clear the error")
	}
	s = NewScanner([]byte(`[1`), Options{})
	_ = s.EnterArray()
	_, _ = s.NextElement()
	_, _ = s.ReadValue()
	if err := s.Finish(); err == nil || !strings.Contains(err.Error(), "not closed") {
		t.Fatalf("Finish inside an array: %v", err)
	}
	s = NewScanner([]byte(`"s"`), Options{})
	if _, err := s.ReadNumber(); err == nil {
		t.Fatal("ReadNumber took a string")
	}
	s = NewScanner([]byte(`}`), Options{})
	if _, _, err := s.NextMember(); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("NextMember outside an object: %v", err)
	}
	s = NewScanner([]byte(`{"a":1]`), Options{})
	_ = s.EnterObject()
	_, _, _ = s.NextMember()
	_, _ = s.ReadValue()
	if _, err := s.NextElement(); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("NextElement in an object: %v", err)
	}
	// The kinds of containers deeper than the inline record are kept too.
	deep := []byte(strings.Repeat(`[{"k":`, 200) + `0` + strings.Repeat(`}]`, 200))
	s = NewScanner(deep, Options{})
	for range 200 {
		if s.EnterArray() != nil || must(s.NextElement()) != true || s.EnterObject() != nil {
			t.Fatal(s.Err())
		}
		if _, _, err := s.NextMember(); err != nil {
			t.Fatal(err)
		}
	}
	_, _ = s.ReadNumber()
	for range 200 {
		if _, more, err := s.NextMember(); more || err != nil {
			t.Fatal(more, err)
		}
		if more, err := s.NextElement(); more || err != nil {
			t.Fatal(more, err)
		}
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := SkipValue([]byte(`1`), -1, Options{}); err == nil {
		t.Fatal("SkipValue at -1")
	}
	s = NewScanner([]byte(`nul`), Options{})
	if s.ReadNull() || s.Offset() != 0 {
		t.Fatal("ReadNull took nul")
	}
}

// TestSkipValueExtents: SkipValue ends where encoding/json's raw message ends, for each element.
func TestSkipValueExtents(t *testing.T) {
	doc := []byte(`[ "a\"b" , -1.5e+3,true,false,null, {"k":[1,2,{"z":"\u00e9"}]} ,[[]],"end"]`)
	var raws []json.RawMessage
	if err := json.Unmarshal(doc, &raws); err != nil {
		t.Fatal(err)
	}
	i := 1
	for _, raw := range raws {
		i = skipSpace(doc, i)
		end, err := SkipValue(doc, i, Options{})
		if err != nil || !bytes.Equal(doc[i:end], raw) {
			t.Fatalf("SkipValue at %d = %q, %v; want %q", i, doc[i:end], err, raw)
		}
		i = skipSpace(doc, end) + 1
	}
	if _, err := SkipValue(doc, len(doc), Options{}); err == nil {
		t.Fatal("SkipValue at the end")
	}
}

// slow is the byte-at-a-time reference of the skips.
func slow(b []byte, i int, ascii, html, del bool) int {
	for ; i < len(b); i++ {
		c := b[i]
		if c == '"' || c == '\\' || c < 0x20 || ascii && c >= 0x80 || html && (c == '<' || c == '>' || c == '&') || del && c == 0x7F {
			break
		}
	}
	return i
}

// TestSkipsEveryByteEverywhere: each skip stops where the byte loop does, for every byte value
// at every offset of two words and a tail, from every start, in bytes and in a string.
func TestSkipsEveryByteEverywhere(t *testing.T) {
	for c := range 256 {
		for at := range 19 {
			b := []byte("abcdefghijklmnopqrs")
			b[at] = byte(c)
			for from := range 4 {
				for _, k := range []struct {
					name string
					got  int
					s    int
					want int
				}{
					{"SkipPlain", SkipPlain(b, from), SkipPlain(string(b), from), slow(b, from, false, false, false)},
					{"SkipPlainASCII", SkipPlainASCII(b, from), SkipPlainASCII(string(b), from), slow(b, from, true, false, false)},
					{"SkipPlainHTML", SkipPlainHTML(b, from), SkipPlainHTML(string(b), from), slow(b, from, true, true, false)},
					{"skipPrintable", skipPrintable(b, from), skipPrintable(string(b), from), slow(b, from, true, false, true)},
					{"skipBytes", skipBytes(b, from), skipBytes(string(b), from), slow(b, from, true, true, true)},
				} {
					if k.got != k.want || k.s != k.want {
						t.Fatalf("%s: byte %#x at %d from %d: %d (string %d), want %d", k.name, c, at, from, k.got, k.s, k.want)
					}
				}
			}
		}
	}
}

func must(more bool, err error) bool { return more && err == nil }
