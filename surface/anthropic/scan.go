package anthropic

import "github.com/infergate/infergate/internal/jsonwire"

// scanner walks one streamed chunk's JSON (or a whole answer's, or the request's) without
// decoding what it does not need: a chunk's text is copied into the Anthropic event as the JSON
// string literal it already is, so a chunk costs one pass over its bytes and no allocation. The
// JSON is jsonwire's to check (string literals especially, since they are copied out); scanner
// only adds the few reads this package's readers are written in.
type scanner struct {
	jsonwire.Scanner
}

// maxDepth bounds how deeply a value may nest, counted from the top of its document: encoding/json's
// limit (jsonwire's default), and the gateway's everywhere (core/pipeline's scanner, which reads
// every OpenAI body, has the same), so what /v1/chat/completions takes as valid JSON /v1/messages
// takes too. jsonwire's skip is a loop, not a recursion: a value nested that deep costs no deep
// stack.
const maxDepth = jsonwire.DefaultMaxDepth

func newScanner(b []byte) scanner {
	return scanner{jsonwire.NewScanner(b, jsonwire.Options{})}
}

// bad reports whether the JSON was found malformed (or nested too deeply).
func (s *scanner) bad() bool { return s.Err() != nil }

// str reads a string literal and returns it raw, quotes included: valid JSON (escapes checked,
// no control characters), safe to copy into another document and into one SSE data line. nil
// when the next value is not a string.
func (s *scanner) str() []byte {
	t, err := s.ReadString()
	if err != nil {
		return nil
	}
	return t.Raw(s.Input())
}

// strOrNull reads a string literal or null (nil, without failing).
func (s *scanner) strOrNull() []byte {
	if s.Peek() == 'n' && s.ReadNull() {
		return nil
	}
	return s.str()
}

// int reads a whole number; any other value is skipped as 0 (a fraction, an exponent, a minus
// sign, a number past 2^53 or so, a string, null).
func (s *scanner) int() int64 {
	t, err := s.ReadValue()
	if err != nil || !t.Integer() {
		return 0
	}
	var n int64
	for _, c := range t.Raw(s.Input()) {
		if c < '0' || c > '9' || n > 1<<53 {
			return 0
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// skip passes over one value of any type, checking it.
func (s *scanner) skip() bool {
	_, err := s.ReadValue()
	return err == nil
}

// raw passes over one value and returns its bytes (nil when it is malformed).
func (s *scanner) raw() []byte {
	t, err := s.ReadValue()
	if err != nil {
		return nil
	}
	return t.Raw(s.Input())
}

// The walks are loops, errors being the scanner's to keep (a read after one fails too):
//
//	if sc.enterObject() {
//		for key, ok := sc.member(); ok; key, ok = sc.member() {
//			switch string(key) { ... default: sc.skip() }
//		}
//	}
//	if sc.bad() { ... }

// enterObject enters the object that must come next: false for null (no members, as
// encoding/json reads it into a struct) and for anything else (then bad).
func (s *scanner) enterObject() bool {
	if s.Peek() == 'n' && s.ReadNull() {
		return false
	}
	return s.EnterObject() == nil
}

// enterArray enters the array that must come next: false for null (no elements) and for
// anything else (then bad).
func (s *scanner) enterArray() bool {
	if s.Peek() == 'n' && s.ReadNull() {
		return false
	}
	return s.EnterArray() == nil
}

// member moves to the next member of the object entered last, the scanner then at its value
// (which must be read), and returns its key as the raw literal, quotes included. false at the
// object's end, and on malformed JSON.
func (s *scanner) member() ([]byte, bool) {
	key, more, _ := s.NextMember() // more is false on an error
	return s.Input()[key.Start:key.End], more
}

// element moves to the next element of the array entered last (which must be read): false at
// the array's end, and on malformed JSON.
func (s *scanner) element() bool {
	more, _ := s.NextElement() // false on an error
	return more
}

// end reports whether the document ends here, as the chunk and answer readers have always taken
// it: nothing but white space left, or a NUL byte (read as the end).
func (s *scanner) end() bool { return s.Peek() == 0 }
