package anthropic

import "github.com/infergate/infergate/internal/jsonscan"

// scanner walks one streamed chunk's JSON without decoding what it does not need: a chunk's text
// is copied into the Anthropic event as the JSON string literal it already is, so a chunk costs
// one pass over its bytes and no allocation. It validates what it walks (string literals
// especially, since they are copied out) and fails on anything malformed.
type scanner struct {
	b    []byte
	i    int
	bad  bool
	deep bool // bad because a value nested deeper than maxDepth
}

// maxDepth bounds how deeply a value may nest, counted from the top of its document: encoding/json's
// limit, and the gateway's everywhere (core/pipeline's scanner, which reads every OpenAI body,
// has the same), so what /v1/chat/completions takes as valid JSON /v1/messages takes too. The
// scanner's skip is a loop, not a recursion: a value nested that deep costs no deep stack.
const maxDepth = 10000

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

// skip passes over one value of any type; depth is how many objects and arrays enclose it, for
// maxDepth.
func (s *scanner) skip(depth int) bool {
	switch s.peek() {
	case '{', '[':
		return s.skipNested(depth)
	case '"':
		return s.str() != nil
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

// skipNested passes over an object or an array, in a loop rather than a recursion: a value
// nested 10,000 levels deep costs no deep stack.
func (s *scanner) skipNested(depth int) bool {
	// The kinds of the containers open, a bit each (1 for an object): the first 128 in this frame,
	// more on the heap, 157 words at most.
	var inline [2]uint64
	kinds := inline[:]
	open := 0
	for {
		// A value.
		if c := s.peek(); c == '{' || c == '[' {
			if depth+open >= maxDepth {
				s.deep = true
				return s.fail()
			}
			if w := open / 64; w == len(kinds) {
				kinds = append(kinds, 0)
			}
			bit := uint64(1) << (open % 64)
			if c == '{' {
				kinds[open/64] |= bit
			} else {
				kinds[open/64] &^= bit
			}
			open++
			s.i++
			switch {
			case c == '{' && s.eat('}'), c == '[' && s.eat(']'):
				open--
			case c == '[':
				continue // the first element
			case s.str() == nil || !s.eat(':'):
				return s.fail()
			default:
				continue // the first member's value
			}
		} else if !s.skip(0) { // a scalar: skip does not come back here
			return false
		}
		// After a value: close the containers that end here, or go on to the next member or
		// element.
		for {
			if open == 0 {
				return true
			}
			top := open - 1
			object := kinds[top/64]>>(top%64)&1 != 0
			if s.eat(',') {
				if object && (s.str() == nil || !s.eat(':')) {
					return s.fail()
				}
				break
			}
			closer := byte(']')
			if object {
				closer = '}'
			}
			if !s.eat(closer) {
				return s.fail()
			}
			open--
		}
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
