package jsonwire

import (
	"strings"
	"testing"
)

// walkScalars walks doc, an array of arrays and scalars, reading each element with NextScalar
// where it can (fast) or with NextElement then EnterArray or ReadValue (not fast), and returns
// the tokens read and the error that stopped it, one line each.
func walkScalars(doc []byte, fast bool) string {
	s := NewScanner(doc, Options{MaxDepth: -1})
	var out strings.Builder
	if s.Peek() != '[' {
		t, err := s.ReadValue()
		out.WriteString(t.Kind.String() + " " + string(doc[t.Start:t.End]) + "\n")
		if err == nil {
			err = s.Finish()
		}
		if err != nil {
			out.WriteString(err.Error())
		}
		return out.String()
	}
	_ = s.EnterArray()
	for s.Depth() > 0 {
		if fast {
			if t, ok := s.NextScalar(); ok {
				out.WriteString(t.Kind.String() + " " + string(t.Raw(doc)) + "\n")
				continue
			}
		}
		more, err := s.NextElement()
		if err != nil {
			out.WriteString(err.Error())
			return out.String()
		}
		if !more {
			continue
		}
		if s.Peek() == '[' {
			_ = s.EnterArray()
			continue
		}
		t, err := s.ReadValue()
		if err != nil {
			out.WriteString(err.Error())
			return out.String()
		}
		out.WriteString(t.Kind.String() + " " + string(t.Raw(doc)) + "\n")
	}
	if err := s.Finish(); err != nil {
		out.WriteString(err.Error())
	}
	return out.String()
}

var scalarArrays = []string{
	`[]`, `[1]`, `[1,2,3]`, ` [ 1 , -2.5e+3 ,"a\"b\u00e9" ,true,false,null ] `, `[[1,2],[3,[4,[]]],5]`, `[[],[[]]]`,
	`[1,]`, `[,1]`, `[1 2]`, `[1,2`, `[1,"a`, `["\x"]`, "[\"a\x01\"]", `[01]`, `[1.]`, `[-]`, `[tru]`, `[truex]`,
	`[nul]`, `[nullx]`, `[{}]`, `[1,{"a":1}]`, `[1}`, `[1]]`, `[1] x`, `[`, `[1,[`, "[\"\xff\"]", `[1e400,12abc]`,
}

// TestNextScalar: a walk that takes each scalar it can with NextScalar reads the same tokens and
// stops at the same fault as one that reads each with NextElement and ReadValue.
func TestNextScalar(t *testing.T) {
	for _, doc := range scalarArrays {
		if fast, slow := walkScalars([]byte(doc), true), walkScalars([]byte(doc), false); fast != slow {
			t.Errorf("%q:\nNextScalar:\n%s\nNextElement, ReadValue:\n%s", doc, fast, slow)
		}
	}
}

// TestNextScalarReadsNothingElsewhere: outside an array, at an array's end, at a nested array
// and at a bad scalar, NextScalar reads nothing and leaves the Scanner as it was.
func TestNextScalarReadsNothingElsewhere(t *testing.T) {
	for _, c := range []struct {
		doc   string
		enter int // arrays (or, with object, an object) to enter first
		obj   bool
	}{
		{`1`, 0, false}, {`{"a":1}`, 1, true}, {`[]`, 1, false}, {`[[1]]`, 1, false}, {`[1 2]`, 1, false},
		{`[-x]`, 1, false}, {`["a`, 1, false}, {`[`, 1, false}, {`[{}]`, 1, false},
	} {
		s := NewScanner([]byte(c.doc), Options{})
		for range c.enter {
			if c.obj {
				_ = s.EnterObject()
			} else {
				_ = s.EnterArray()
			}
		}
		if c.doc == `[1 2]` {
			if _, ok := s.NextScalar(); !ok {
				t.Fatalf("%s: first element not read", c.doc)
			}
		}
		before := s
		if tok, ok := s.NextScalar(); ok {
			t.Errorf("%s: NextScalar read %+v", c.doc, tok)
		}
		if s.Offset() != before.Offset() || s.Depth() != before.Depth() || s.first != before.first || s.Err() != nil {
			t.Errorf("%s: NextScalar moved the Scanner", c.doc)
		}
	}
}

// FuzzNextScalar: on any input, the two walks agree.
func FuzzNextScalar(f *testing.F) {
	for _, doc := range scalarArrays {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if fast, slow := walkScalars(doc, true), walkScalars(doc, false); fast != slow {
			t.Fatalf("%q:\nNextScalar:\n%s\nNextElement, ReadValue:\n%s", doc, fast, slow)
		}
	})
}
