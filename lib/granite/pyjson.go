package granite

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/jsonwire"
)

// The prompt must hold the tools exactly as Python's json.dumps(tools, indent=4) writes them:
// ", " and ": " separators, four-space indents, empty containers as [] and {}, non-ASCII as
// \uXXXX (ensure_ascii), and the caller's key order. encoding/json's Indent keeps non-ASCII
// and HTML escapes as they came, so the value is re-encoded token by token here.

const maxJSONDepth = 64

var errJSONDepth = errors.New("tool definition nested too deeply")

// pyIndentJSON appends v (JSON that json.Valid accepted) to b in Python's indent=4 form at the
// given depth. It walks the bytes once, without building values.
func pyIndentJSON(b *strings.Builder, v json.RawMessage, depth int) error {
	// The bound is the walk's own (value's depth check, counted from the indent depth); the
	// scanner's, one more, is never the first to be reached.
	w := getPyWriter()
	defer putPyWriter(w)
	sc := pyScanner{Scanner: jsonwire.NewScanner(v, jsonwire.Options{MaxDepth: maxJSONDepth + 1}), w: w}
	err := sc.value(b, depth)
	switch {
	case err == nil && sc.Finish() != nil:
		return errors.New("trailing data after JSON value")
	case err == nil:
		return nil
	case errors.Is(err, errJSONDepth) || errors.Is(err, jsonwire.ErrTooDeep):
		return errJSONDepth
	}
	return errBadJSON
}

var errBadJSON = errors.New("malformed JSON")

// pyScanner walks a document with jsonwire's Scanner, writing it in Python's form. (The
// Builder is an argument, not a field: as a field it would escape to the heap with the
// Scanner's contents.)
type pyScanner struct {
	jsonwire.Scanner
	w *pyWriter
}

func (sc *pyScanner) value(b *strings.Builder, depth int) error {
	if depth > maxJSONDepth {
		return errJSONDepth
	}
	switch k := jsonwire.KindOf(sc.Peek()); k {
	case jsonwire.Object, jsonwire.Array:
		var err error
		if k == jsonwire.Object {
			err = sc.EnterObject()
		} else {
			err = sc.EnterArray()
		}
		if err != nil {
			return err
		}
		b.WriteByte("{["[k-jsonwire.Object])
		for n := 0; ; n++ {
			var more bool
			var key jsonwire.Token
			if k == jsonwire.Object {
				key, more, err = sc.NextMember()
			} else {
				more, err = sc.NextElement()
			}
			if err != nil {
				return err
			}
			if !more {
				if n > 0 {
					b.WriteByte('\n')
					writeIndent(b, depth)
				}
				b.WriteByte("}]"[k-jsonwire.Object])
				return nil
			}
			if n > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
			writeIndent(b, depth+1)
			if k == jsonwire.Object {
				if err := sc.str(b, key); err != nil {
					return err
				}
				b.WriteString(": ")
			}
			if err := sc.value(b, depth+1); err != nil {
				return err
			}
		}
	case jsonwire.String:
		t, err := sc.ReadString()
		if err != nil {
			return err
		}
		return sc.str(b, t)
	case jsonwire.Number:
		t, err := sc.ReadNumber()
		if err != nil {
			return err
		}
		lit := t.Raw(sc.Input())
		switch {
		case t.Flags&(jsonwire.Fraction|jsonwire.Exponent) != 0:
			f, err := strconv.ParseFloat(string(lit), 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return errBadJSON
			}
			b.WriteString(pyFloat(f))
		case string(lit) == "-0":
			b.WriteByte('0') // Python reads -0 as the integer 0
		default:
			b.Write(lit) // integers are exact in Python, any size
		}
		return nil
	}
	// true, false, null, or the scanner's error.
	t, err := sc.ReadValue()
	if err != nil {
		return err
	}
	b.Write(t.Raw(sc.Input()))
	return nil
}

// str writes the string t the way Python's json.dumps writes it: its value (invalid UTF-8 and
// lone surrogates as U+FFFD) with ensure_ascii's escaping.
func (sc *pyScanner) str(b *strings.Builder, t jsonwire.Token) error {
	s := t.Contents(sc.Input())
	if t.Flags&jsonwire.Escaped != 0 {
		var err error
		if sc.w.value, err = jsonwire.Unescape(sc.w.value[:0], s, jsonwire.ReplaceInvalid); err != nil {
			return err
		}
		s = sc.w.value
	}
	sc.w.out = jsonwire.AppendString(sc.w.out[:0], s, jsonwire.PythonASCII)
	b.Write(sc.w.out)
	return nil
}

// pyWriter holds the buffers a string goes through on its way into the prompt's
// strings.Builder, which cannot be appended to in place. They are pooled: the prompt writers
// had allocated nothing of their own.
type pyWriter struct{ out, value []byte }

var pyWriters = sync.Pool{New: func() any { return new(pyWriter) }}

func getPyWriter() *pyWriter { return pyWriters.Get().(*pyWriter) }

func putPyWriter(w *pyWriter) {
	if cap(w.out) <= 64<<10 && cap(w.value) <= 64<<10 {
		pyWriters.Put(w)
	}
}

func writeIndent(b *strings.Builder, depth int) {
	for range depth {
		b.WriteString("    ")
	}
}

// pyString writes s as Python's json.dumps does with ensure_ascii=True.
func pyString(b *strings.Builder, s string) {
	w := getPyWriter()
	w.out = jsonwire.AppendString(w.out[:0], s, jsonwire.PythonASCII)
	b.Write(w.out)
	putPyWriter(w)
}

// runeIndex converts a byte offset in s to a character offset, as Python counts.
func runeIndex(s string, byteOff int) int {
	return utf8.RuneCountInString(s[:byteOff])
}

// pyFloat formats f as Python's float repr (what json.dumps writes for a parsed float): the
// shortest digits that read back, fixed notation for decimal exponents -4..15 with at least
// one decimal, else d.ddde+XX.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	es := strconv.Itoa(exp)
	if len(es) < 2 {
		es = "0" + es
	}
	return mant + "e" + sign + es
}
