package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"

	"github.com/infergate/infergate/internal/jsonwire"
)

// jsonValue decodes one JSON value into the engine's values, keeping the order of object keys
// (Python's json.loads does, and tojson writes them in that order) and telling integers from
// floats as Python does. maxDepth is how deep containers may nest: a container deeper is
// jsonwire.ErrTooDeep ("nested too deeply"), itself.
func jsonValue(raw []byte, maxDepth int) (jinja.Value, error) {
	if maxDepth <= 0 { // no container at all (jsonwire's 0 is its default, 10,000)
		maxDepth = -1
		if c := firstByte(raw); c == '{' || c == '[' {
			return jinja.Undefined(), jsonwire.ErrTooDeep
		}
	}
	s := jsonwire.NewScanner(raw, jsonwire.Options{MaxDepth: maxDepth})
	v, err := decodeValue(&s)
	if err == nil && s.Finish() != nil {
		err = errors.New("trailing data after the JSON value")
	}
	if err != nil {
		if errors.Is(err, jsonwire.ErrTooDeep) {
			err = jsonwire.ErrTooDeep
		}
		return jinja.Undefined(), err
	}
	return v, nil
}

// firstByte is raw's first byte after white space (0 if none).
func firstByte(raw []byte) byte {
	s := jsonwire.NewScanner(raw, jsonwire.Options{})
	return s.Peek()
}

// decodeValue reads the value the scanner is at.
func decodeValue(s *jsonwire.Scanner) (jinja.Value, error) {
	b := s.Input()
	switch s.Peek() {
	case '[':
		if err := s.EnterArray(); err != nil {
			return jinja.Undefined(), err
		}
		var items []jinja.Value
		for {
			more, err := s.NextElement()
			if err != nil {
				return jinja.Undefined(), err
			}
			if !more {
				return jinja.NewList(items), nil
			}
			v, err := decodeValue(s)
			if err != nil {
				return jinja.Undefined(), err
			}
			items = append(items, v)
		}
	case '{':
		if err := s.EnterObject(); err != nil {
			return jinja.Undefined(), err
		}
		d := jinja.NewDict()
		dict := d.AsDict()
		for {
			key, more, err := s.NextMember()
			if err != nil {
				return jinja.Undefined(), err
			}
			if !more {
				return d, nil
			}
			v, err := decodeValue(s)
			if err != nil {
				return jinja.Undefined(), err
			}
			dict.Set(stringOf(key, b), v)
		}
	}
	t, err := s.ReadValue()
	switch {
	case err != nil:
		return jinja.Undefined(), err
	case t.Kind == jsonwire.String:
		return jinja.NewString(stringOf(t, b)), nil
	case t.Kind == jsonwire.Number:
		return numberToken(string(t.Raw(b)), t.Integer()), nil
	case t.Kind == jsonwire.Null:
		return jinja.None(), nil
	}
	return jinja.NewBool(t.Kind == jsonwire.True), nil
}

// stringOf is the value of a string token of b, as encoding/json reads it (invalid UTF-8 and
// lone surrogates as U+FFFD).
func stringOf(t jsonwire.Token, b []byte) string {
	v, _ := jsonwire.UnescapeString(t.Contents(b), jsonwire.ReplaceInvalid) // checked by the scanner
	return v
}

// numberValue is a JSON number as Python's json.loads reads it: an int when it has no fraction or
// exponent (a float when it does not fit 64 bits: Python's ints are unbounded), else a float.
func numberValue(n json.Number) jinja.Value {
	return numberToken(string(n), !strings.ContainsAny(string(n), ".eE"))
}

// numberToken is numberValue of s, whose integer says it has no fraction or exponent.
func numberToken(s string, integer bool) jinja.Value {
	if integer {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(i)
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return jinja.NewString(s)
	}
	return jinja.NewFloat(f)
}

// goValue converts a Go value (what a caller puts in Input.Kwargs) into the engine's values:
// json.RawMessage keeps its key order, maps are sorted by key.
func goValue(v any, depth int) (jinja.Value, error) {
	if depth < 0 {
		return jinja.Undefined(), jsonwire.ErrTooDeep
	}
	switch x := v.(type) {
	case nil:
		return jinja.None(), nil
	case json.RawMessage:
		return jsonValue(x, depth)
	case json.Number:
		return numberValue(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case int:
		return jinja.NewInt(int64(x)), nil
	case int64:
		return jinja.NewInt(x), nil
	case float64:
		return jinja.NewFloat(x), nil
	case []any:
		items := make([]jinja.Value, len(x))
		for i, e := range x {
			iv, err := goValue(e, depth-1)
			if err != nil {
				return jinja.Undefined(), err
			}
			items[i] = iv
		}
		return jinja.NewList(items), nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := jinja.NewDict()
		for _, k := range keys {
			iv, err := goValue(x[k], depth-1)
			if err != nil {
				return jinja.Undefined(), err
			}
			d.AsDict().Set(k, iv)
		}
		return d, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32:
		return jinja.NewInt(rv.Int()), nil
	case reflect.Uint8, reflect.Uint16, reflect.Uint32:
		return jinja.NewInt(int64(rv.Uint())), nil
	case reflect.Float32:
		return jinja.NewFloat(rv.Float()), nil
	}
	// Anything else goes through its JSON encoding, as a request would carry it.
	b, err := json.Marshal(v)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jsonValue(b, depth)
}

// jsonOptions are the arguments of transformers' tojson filter, which is json.dumps with
// ensure_ascii=False by default: tojson(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False). Jinja's own tojson (which escapes <, > and &) is not what chat templates get.
type jsonOptions struct {
	ensureASCII bool
	indent      *string // nil: no newlines
	itemSep     string
	keySep      string
	sortKeys    bool
}

func parseJSONOptions(args []jinja.Value, kwargs map[string]jinja.Value) (jsonOptions, error) {
	o := jsonOptions{itemSep: ", ", keySep: ": "}
	get := func(pos int, name string) (jinja.Value, bool) {
		if v, ok := kwargs[name]; ok {
			return v, true
		}
		if pos < len(args) {
			return args[pos], true
		}
		return jinja.Undefined(), false
	}
	if v, ok := get(0, "ensure_ascii"); ok {
		o.ensureASCII = v.IsTruthy()
	}
	if v, ok := get(1, "indent"); ok && !v.IsNone() && !v.IsUndefined() {
		var pad string
		switch {
		case v.IsInt():
			pad = strings.Repeat(" ", int(max(0, min(v.AsInt(), 64))))
		case v.IsString():
			pad = v.AsString()
		default:
			return o, fmt.Errorf("tojson: indent must be an integer or a string, not %s", v.String())
		}
		o.indent = &pad
		o.itemSep = ","
	}
	if v, ok := get(2, "separators"); ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return o, errors.New("tojson: separators must be two strings")
		}
		o.itemSep, o.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	if v, ok := get(3, "sort_keys"); ok {
		o.sortKeys = v.IsTruthy()
	}
	return o, nil
}

// writeJSON writes v as Python's json.dumps does with o.
func writeJSON(b *strings.Builder, v jinja.Value, o *jsonOptions, level int) error {
	if level > 512 {
		return jsonwire.ErrTooDeep
	}
	switch {
	case v.IsNone(), v.IsUndefined():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pythonFloatJSON(v.AsFloat()))
	case v.IsString():
		writeJSONString(b, v.AsString(), o.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(b, o, level+1)
			if err := writeJSON(b, item, o, level+1); err != nil {
				return err
			}
		}
		newline(b, o, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if o.sortKeys {
			keys = d.OrderedKeys()
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(b, o, level+1)
			writeJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			item, _ := d.Get(k)
			if err := writeJSON(b, item, o, level+1); err != nil {
				return err
			}
		}
		newline(b, o, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: %s is not JSON serializable", v.String())
	}
	return nil
}

func newline(b *strings.Builder, o *jsonOptions, level int) {
	if o.indent == nil {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(*o.indent)
	}
}

const hexDigits = "0123456789abcdef"

// writeJSONString writes s as Python's json.dumps does: only '"', '\\' and control characters
// escaped (and, with ensureASCII, everything past ASCII as \uXXXX, surrogate pairs included).
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b.WriteString(s[start:i])
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		if !ensureASCII {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		b.WriteString(s[start:i])
		if r >= 0x10000 {
			r -= 0x10000
			writeU(b, 0xd800+(r>>10))
			writeU(b, 0xdc00+(r&0x3ff))
		} else {
			writeU(b, r)
		}
		i += size
		start = i
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[(r>>shift)&0xf])
	}
}

// pythonFloatJSON is repr(f) as json.dumps writes it: the shortest digits that read back as f,
// in positional notation while the exponent is in [-4, 16), else as 1.5e-07 / 1e+16; "Infinity",
// "-Infinity" and "NaN" for the non-finite.
func pythonFloatJSON(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	// 'e' with -1 precision: the shortest digits, as d.ddddde±XX.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	sign := ""
	if mant[0] == '-' {
		sign, mant = "-", mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	decpt := x + 1 // the value is 0.digits × 10^decpt
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			return sign + "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			return sign + digits[:decpt] + "." + digits[decpt:]
		}
	}
	m := digits[:1]
	if len(digits) > 1 {
		m += "." + digits[1:]
	}
	es := "+"
	if x < 0 {
		es, x = "-", -x
	}
	xs := strconv.Itoa(x)
	if len(xs) < 2 {
		xs = "0" + xs
	}
	return sign + m + "e" + es + xs
}

// strftime formats t as Python's time.strftime does for the directives chat templates use
// (Llama 3.x: "%d %b %Y"); an unknown directive is written as is.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			b.WriteString(strconv.Itoa(t.Year()))
		case 'y':
			b.WriteString(t.Format("06"))
		case 'm':
			b.WriteString(t.Format("01"))
		case 'd':
			b.WriteString(t.Format("02"))
		case 'e':
			b.WriteString(t.Format("_2"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'H':
			b.WriteString(t.Format("15"))
		case 'I':
			b.WriteString(t.Format("03"))
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'M':
			b.WriteString(t.Format("04"))
		case 'S':
			b.WriteString(t.Format("05"))
		case 'f':
			b.WriteString(fmt.Sprintf("%06d", t.Nanosecond()/1000))
		case 'j':
			b.WriteString(fmt.Sprintf("%03d", t.YearDay()))
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'w':
			b.WriteString(strconv.Itoa(int(t.Weekday())))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
