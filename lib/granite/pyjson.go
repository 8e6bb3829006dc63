package granite

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
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
	sc := pyScanner{s: v, b: b}
	if err := sc.value(depth); err != nil {
		return err
	}
	if sc.skipWS(); sc.i != len(sc.s) {
		return errors.New("trailing data after JSON value")
	}
	return nil
}

var errBadJSON = errors.New("malformed JSON")

type pyScanner struct {
	s []byte
	i int
	b *strings.Builder
}

func (sc *pyScanner) skipWS() {
	for sc.i < len(sc.s) && (sc.s[sc.i] == ' ' || sc.s[sc.i] == '\t' || sc.s[sc.i] == '\n' || sc.s[sc.i] == '\r') {
		sc.i++
	}
}

func (sc *pyScanner) value(depth int) error {
	if depth > maxJSONDepth {
		return errJSONDepth
	}
	sc.skipWS()
	if sc.i >= len(sc.s) {
		return errBadJSON
	}
	switch c := sc.s[sc.i]; c {
	case '{', '[':
		closing := byte(']')
		if c == '{' {
			closing = '}'
		}
		sc.i++
		sc.b.WriteByte(c)
		sc.skipWS()
		if sc.i < len(sc.s) && sc.s[sc.i] == closing {
			sc.i++
			sc.b.WriteByte(closing)
			return nil
		}
		for {
			sc.b.WriteByte('\n')
			writeIndent(sc.b, depth+1)
			if c == '{' {
				sc.skipWS()
				if err := sc.str(); err != nil {
					return err
				}
				sc.skipWS()
				if sc.i >= len(sc.s) || sc.s[sc.i] != ':' {
					return errBadJSON
				}
				sc.i++
				sc.b.WriteString(": ")
			}
			if err := sc.value(depth + 1); err != nil {
				return err
			}
			sc.skipWS()
			if sc.i >= len(sc.s) {
				return errBadJSON
			}
			if sc.s[sc.i] == ',' {
				sc.i++
				sc.b.WriteByte(',')
				continue
			}
			if sc.s[sc.i] != closing {
				return errBadJSON
			}
			sc.i++
			sc.b.WriteByte('\n')
			writeIndent(sc.b, depth)
			sc.b.WriteByte(closing)
			return nil
		}
	case '"':
		return sc.str()
	default:
		j := sc.i
		for j < len(sc.s) && strings.IndexByte(",]} \t\n\r", sc.s[j]) < 0 {
			j++
		}
		if j == sc.i {
			return errBadJSON
		}
		lit := string(sc.s[sc.i:j])
		sc.i = j
		switch {
		case lit == "true" || lit == "false" || lit == "null":
			sc.b.WriteString(lit)
		case strings.ContainsAny(lit, ".eE"):
			f, err := strconv.ParseFloat(lit, 64)
			if err != nil && !errors.Is(err, strconv.ErrRange) {
				return errBadJSON
			}
			sc.b.WriteString(pyFloat(f))
		case lit == "-0":
			sc.b.WriteByte('0') // Python reads -0 as the integer 0
		default:
			sc.b.WriteString(lit) // integers are exact in Python, any size
		}
		return nil
	}
}

// str re-encodes the JSON string at sc.i the way Python's json.dumps writes it.
func (sc *pyScanner) str() error {
	if sc.i >= len(sc.s) || sc.s[sc.i] != '"' {
		return errBadJSON
	}
	sc.i++
	sc.b.WriteByte('"')
	for sc.i < len(sc.s) {
		c := sc.s[sc.i]
		switch {
		case c == '"':
			sc.i++
			sc.b.WriteByte('"')
			return nil
		case c == '\\':
			if sc.i+1 >= len(sc.s) {
				return errBadJSON
			}
			e := sc.s[sc.i+1]
			sc.i += 2
			switch e {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				sc.b.WriteByte('\\')
				sc.b.WriteByte(e)
			case '/':
				sc.b.WriteByte('/')
			case 'u':
				r, ok := sc.hex4()
				if !ok {
					return errBadJSON
				}
				if utf16.IsSurrogate(r) && sc.i+6 <= len(sc.s) && sc.s[sc.i] == '\\' && sc.s[sc.i+1] == 'u' {
					sc.i += 2
					r2, ok := sc.hex4()
					if !ok {
						return errBadJSON
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						writeRunePy(sc.b, dec)
						continue
					}
					writeRunePy(sc.b, utf8.RuneError)
					r = r2
				}
				if utf16.IsSurrogate(r) {
					r = utf8.RuneError // Go's decoder does the same with a lone surrogate
				}
				writeRunePy(sc.b, r)
			default:
				return errBadJSON
			}
		case c < utf8.RuneSelf:
			sc.i++
			writeRunePy(sc.b, rune(c))
		default:
			r, n := utf8.DecodeRune(sc.s[sc.i:])
			sc.i += n
			writeRunePy(sc.b, r)
		}
	}
	return errBadJSON
}

func (sc *pyScanner) hex4() (rune, bool) {
	if sc.i+4 > len(sc.s) {
		return 0, false
	}
	var r rune
	for _, c := range sc.s[sc.i : sc.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	sc.i += 4
	return r, true
}

func writeIndent(b *strings.Builder, depth int) {
	for range depth {
		b.WriteString("    ")
	}
}

const hexDigits = "0123456789abcdef"

// pyString writes s as Python's json.dumps does with ensure_ascii=True.
func pyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		writeRunePy(b, r)
	}
	b.WriteByte('"')
}

func writeRunePy(b *strings.Builder, r rune) {
	switch {
	case r == '"':
		b.WriteString(`\"`)
	case r == '\\':
		b.WriteString(`\\`)
	case r == '\n':
		b.WriteString(`\n`)
	case r == '\r':
		b.WriteString(`\r`)
	case r == '\t':
		b.WriteString(`\t`)
	case r == '\b':
		b.WriteString(`\b`)
	case r == '\f':
		b.WriteString(`\f`)
	case r < 0x20 || (r >= 0x7f && r <= 0xffff):
		writeU(b, r)
	case r > 0xffff:
		r1, r2 := utf16.EncodeRune(r)
		writeU(b, r1)
		writeU(b, r2)
	default:
		b.WriteByte(byte(r))
	}
}

func writeU(b *strings.Builder, r rune) {
	b.WriteString(`\u`)
	b.WriteByte(hexDigits[r>>12&0xf])
	b.WriteByte(hexDigits[r>>8&0xf])
	b.WriteByte(hexDigits[r>>4&0xf])
	b.WriteByte(hexDigits[r&0xf])
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
