package granite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// pyIndentJSON appends v (valid JSON) to b in Python's indent=4 form at the given depth.
func pyIndentJSON(b *strings.Builder, v json.RawMessage, depth int) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if err := pyValue(b, dec, depth); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after JSON value")
	}
	return nil
}

func pyValue(b *strings.Builder, dec *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return errJSONDepth
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return pyToken(b, dec, tok, depth)
}

func pyToken(b *strings.Builder, dec *json.Decoder, tok json.Token, depth int) error {
	switch t := tok.(type) {
	case json.Delim:
		closing := json.Delim(']')
		if t == '{' {
			closing = '}'
		}
		b.WriteByte(byte(t))
		n := 0
		for {
			next, err := dec.Token()
			if err != nil {
				return err
			}
			if next == closing {
				break
			}
			if n > 0 {
				b.WriteByte(',')
			}
			n++
			b.WriteByte('\n')
			writeIndent(b, depth+1)
			if t == '{' {
				key, ok := next.(string)
				if !ok {
					return fmt.Errorf("object key is %T", next)
				}
				pyString(b, key)
				b.WriteString(": ")
				if err := pyValue(b, dec, depth+1); err != nil {
					return err
				}
				continue
			}
			if depth+1 > maxJSONDepth {
				return errJSONDepth
			}
			if err := pyToken(b, dec, next, depth+1); err != nil {
				return err
			}
		}
		if n > 0 {
			b.WriteByte('\n')
			writeIndent(b, depth)
		}
		b.WriteByte(byte(closing))
	case string:
		pyString(b, t)
	case json.Number:
		// Python re-prints parsed numbers; integers and plain decimals read back the same.
		// Exponent forms (1e5 -> 100000.0) are kept as sent: a documented difference.
		b.WriteString(string(t))
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	default:
		return fmt.Errorf("unexpected JSON token %T", tok)
	}
	return nil
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
			if r == 0x7f {
				b.WriteRune(r) // DEL is ASCII: Python leaves it
				continue
			}
			writeU(b, r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			writeU(b, r1)
			writeU(b, r2)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
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
