package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/infergate/infergate/internal/jsonscan"
)

var errNotObject = errors.New("request body must be a JSON object")

// scanRouting reads the top-level "model" and "stream" members of a JSON object without decoding
// anything else: every other value is skipped, string contents eight bytes at a time. Like
// encoding/json, a duplicate key's last value wins, escaped keys match, and null leaves a field
// unset. It rejects malformed JSON it walks over, so a bad body is a 400 from the gateway, not a
// round trip to the upstream.
func scanRouting(b []byte) (Routing, error) {
	r, err := scanTop(b)
	r.MaxTokens = r.maxCompl
	if r.MaxTokens < 0 {
		r.MaxTokens = r.maxTokens
	}
	return r, err
}

// scanTop walks the body's top level for scanRouting.
func scanTop(b []byte) (Routing, error) {
	r := Routing{MaxTokens: -1, maxTokens: -1, maxCompl: -1}
	s := scanner{b: b}
	s.ws()
	if !s.eat('{') {
		return r, errNotObject
	}
	s.ws()
	if s.eat('}') {
		return r, s.end()
	}
	for {
		s.ws()
		ks := s.i
		if err := s.str(); err != nil {
			return r, err
		}
		key := b[ks:s.i]
		s.ws()
		if !s.eat(':') {
			return r, s.errorf("expected ':' after object key")
		}
		s.ws()
		vs := s.i
		switch keyIs(key, "model", "stream", "max_tokens", "max_completion_tokens") {
		case 0:
			if s.lit("null") {
				r.Model, r.ModelStart, r.ModelEnd = "", 0, 0
				break
			}
			if s.i >= len(b) || b[s.i] != '"' {
				return r, s.errorf("\"model\" must be a string")
			}
			if err := s.str(); err != nil {
				return r, err
			}
			m, err := unquote(b[vs:s.i])
			if err != nil {
				return r, err
			}
			r.Model, r.ModelStart, r.ModelEnd = m, vs, s.i
		case 1:
			switch {
			case s.lit("true"):
				r.Stream = true
			case s.lit("false"), s.lit("null"):
				r.Stream = false
			default:
				return r, s.errorf("\"stream\" must be a boolean")
			}
		case 2, 3:
			if err := s.value(0); err != nil {
				return r, err
			}
			n := wholeNumber(b[vs:s.i])
			if keyIs(key, "max_tokens") == 0 {
				r.maxTokens = n
			} else {
				r.maxCompl = n
			}
		default:
			if err := s.value(0); err != nil {
				return r, err
			}
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			return r, s.end()
		}
		return r, s.errorf("expected ',' or '}' in object")
	}
}

// keyIs returns which of names the raw (quoted) key equals, or -1. Escaped keys take the slow path.
func keyIs(raw []byte, names ...string) int {
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c == '\\' {
			k, err := unquote(raw)
			if err != nil {
				return -1
			}
			for i, n := range names {
				if k == n {
					return i
				}
			}
			return -1
		}
	}
	for i, n := range names {
		if string(inner) == n {
			return i
		}
	}
	return -1
}

// unquote decodes a JSON string token that scanner.str accepted.
func unquote(raw []byte) (string, error) {
	inner := raw[1 : len(raw)-1]
	plain := true
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain || (utf8.Valid(inner) && !containsByte(inner, '\\')) {
		return string(inner), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("bad JSON string: %w", err)
	}
	return s, nil
}

func containsByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// maxDepth bounds nesting so a hostile body cannot run the recursion away.
const maxDepth = 10000 // encoding/json's limit, so both agree on what is valid

type scanner struct {
	b []byte
	i int
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("malformed JSON at byte %d: %s", s.i, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) lit(l string) bool {
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.errorf("unexpected data after the top-level object")
	}
	return nil
}

// str skips a string token, checking escapes and rejecting control characters.
func (s *scanner) str() error {
	if !s.eat('"') {
		return s.errorf("expected a string")
	}
	for {
		if s.i = jsonscan.SkipPlain(s.b, s.i); s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return s.errorf("unterminated string")
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) {
					return s.errorf("short \\u escape")
				}
				for _, h := range s.b[s.i+2 : s.i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return s.errorf("bad \\u escape")
					}
				}
				s.i += 6
			default:
				return s.errorf("bad escape")
			}
		default: // below 0x20: SkipPlain stops at nothing else
			return s.errorf("control character in string")
		}
	}
	return s.errorf("unterminated string")
}

// value skips any JSON value.
func (s *scanner) value(depth int) error {
	if depth > maxDepth {
		return s.errorf("nesting deeper than %d", maxDepth)
	}
	if s.i >= len(s.b) {
		return s.errorf("unexpected end of input")
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.str()
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		s.ws()
		if s.eat(closer) {
			return nil
		}
		for {
			s.ws()
			if c == '{' {
				if err := s.str(); err != nil {
					return err
				}
				s.ws()
				if !s.eat(':') {
					return s.errorf("expected ':' after object key")
				}
				s.ws()
			}
			if err := s.value(depth + 1); err != nil {
				return err
			}
			s.ws()
			if s.eat(',') {
				continue
			}
			if s.eat(closer) {
				return nil
			}
			return s.errorf("expected ',' or '%c'", closer)
		}
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case s.lit("true"), s.lit("false"), s.lit("null"):
		return nil
	default:
		return s.errorf("unexpected character %q", c)
	}
}

// number skips a number with JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	s.eat('-')
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.eat('0') {
		// no leading zeros
	} else if digits() == 0 {
		return s.errorf("bad number")
	}
	if s.eat('.') && digits() == 0 {
		return s.errorf("bad number fraction")
	}
	if s.eat('e') || s.eat('E') {
		if !s.eat('+') {
			s.eat('-')
		}
		if digits() == 0 {
			return s.errorf("bad number exponent")
		}
	}
	return nil
}

// wholeNumber is the value of a JSON number token that is a non-negative integer that fits an
// int, else -1 (the upstream judges other values; the estimate ignores them).
func wholeNumber(tok []byte) int {
	if len(tok) == 0 || len(tok) > 15 {
		return -1
	}
	n := 0
	for _, c := range tok {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}
