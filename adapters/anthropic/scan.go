package anthropic

import "github.com/infergate/infergate/internal/jsonscan"

// scanner walks one streamed chunk's JSON without decoding what it does not need: a chunk's text
// is copied into the Anthropic event as the JSON string literal it already is, so a chunk costs
// one pass over its bytes and no allocation. It validates what it walks (string literals
// especially, since they are copied out) and fails on anything malformed.
type scanner struct {
	b   []byte
	i   int
	bad bool
}

// maxDepth bounds nesting in values the scanner skips.
const maxDepth = 64

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

func (s *scanner) fail() bool {
	s.bad = true
	return false
}

// peek is the next byte after white space, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) lit(l string) bool {
	s.ws()
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// str reads a string literal and returns it raw, quotes included: valid JSON (escapes checked,
// no control characters), safe to copy into another document and into one SSE data line.
func (s *scanner) str() []byte {
	if s.peek() != '"' {
		s.fail()
		return nil
	}
	start := s.i
	s.i++
	for {
		s.i = jsonscan.SkipPlain(s.b, s.i)
		if s.i >= len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start:s.i]
		case c < 0x20:
			s.fail()
			return nil
		case c == '\\':
			if s.i+1 >= len(s.b) {
				s.fail()
				return nil
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) || !isHex4(s.b[s.i+2:s.i+6]) {
					s.fail()
					return nil
				}
				s.i += 6
			default:
				s.fail()
				return nil
			}
		default: // SkipPlain stops at nothing else; a byte passed is never looked at twice
			s.i++
		}
	}
	s.fail()
	return nil
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// strOrNull reads a string literal or null (nil, without failing).
func (s *scanner) strOrNull() []byte {
	if s.lit("null") {
		return nil
	}
	return s.str()
}

// int reads a whole number; other numbers are skipped as 0.
func (s *scanner) int() int64 {
	s.ws()
	start := s.i
	if !s.skip(0) {
		return 0
	}
	var n int64
	for _, c := range s.b[start:s.i] {
		if c < '0' || c > '9' || n > 1<<53 {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// skip passes over one value of any type.
func (s *scanner) skip(depth int) bool {
	if depth > maxDepth {
		return s.fail()
	}
	switch c := s.peek(); c {
	case '"':
		return s.str() != nil
	case '{':
		return s.object(func(*scanner, []byte) bool { return s.skip(depth + 1) })
	case '[':
		return s.array(func(*scanner, int) bool { return s.skip(depth + 1) })
	case 't':
		return s.lit("true") || s.fail()
	case 'f':
		return s.lit("false") || s.fail()
	case 'n':
		return s.lit("null") || s.fail()
	default:
		return s.number() || s.fail()
	}
}

// number passes over a number as JSON's grammar has it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return false
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	s.i = i
	return true
}

// object walks an object (or null), calling fn for each member with the scanner at its value,
// which fn must consume. key is the raw key literal, quotes included.
func (s *scanner) object(fn func(s *scanner, key []byte) bool) bool {
	if s.lit("null") {
		return true
	}
	if !s.eat('{') {
		return s.fail()
	}
	if s.eat('}') {
		return true
	}
	for {
		key := s.str()
		if key == nil || !s.eat(':') || !fn(s, key) || s.bad {
			return s.fail()
		}
		if s.eat(',') {
			continue
		}
		return s.eat('}') || s.fail()
	}
}

// array walks an array (or null), calling fn for each element with its position.
func (s *scanner) array(fn func(s *scanner, i int) bool) bool {
	if s.lit("null") {
		return true
	}
	if !s.eat('[') {
		return s.fail()
	}
	if s.eat(']') {
		return true
	}
	for i := 0; ; i++ {
		if !fn(s, i) || s.bad {
			return s.fail()
		}
		if s.eat(',') {
			continue
		}
		return s.eat(']') || s.fail()
	}
}
