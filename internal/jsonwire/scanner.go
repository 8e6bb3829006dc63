package jsonwire

import (
	"math"
	"unicode/utf8"
)

// DefaultMaxDepth is the nesting bound when Options.MaxDepth is 0: encoding/json's, so that
// what Valid accepts and what encoding/json accepts agree; a body nested that deep costs the
// skip no stack, since it loops rather than recurses.
const DefaultMaxDepth = 10000

// Options set how strict a Scanner is. The zero value accepts exactly what encoding/json's Valid
// accepts.
type Options struct {
	// MaxDepth bounds how many objects and arrays may be open at once: 10,000 when 0, no bound
	// when negative (the KServe tensor reader takes any nesting of arrays; the skip's memory
	// grows by a bit per level). A value nested deeper is a SyntaxError wrapping ErrTooDeep.
	MaxDepth int
	// StrictUTF8 rejects strings whose raw bytes are not valid UTF-8, and \u escapes that are a
	// lone UTF-16 surrogate (a high one not followed by a low one, or a low one alone), as
	// RFC 8259 section 8.1 and RFC 7493 (I-JSON) require. encoding/json accepts both (it
	// decodes them as U+FFFD), and so does every scanner the gateway had, so it is off by
	// default; a caller that copies string literals into its output as they are can turn it on
	// to stop invalid text at the door instead.
	StrictUTF8 bool
}

// Kind is the type of a JSON value, told by its first byte.
type Kind uint8

const (
	Invalid Kind = iota
	Null
	False
	True
	Number
	String
	Object
	Array
)

func (k Kind) String() string {
	switch k {
	case Null:
		return "null"
	case False:
		return "false"
	case True:
		return "true"
	case Number:
		return "number"
	case String:
		return "string"
	case Object:
		return "object"
	case Array:
		return "array"
	}
	return "invalid"
}

// KindOf is the kind of the value that starts with byte c (Invalid if none can).
func KindOf(c byte) Kind {
	switch c {
	case '"':
		return String
	case '{':
		return Object
	case '[':
		return Array
	case 't':
		return True
	case 'f':
		return False
	case 'n':
		return Null
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return Number
	}
	return Invalid
}

// Flags describe a scanned string or number, so that the caller can take the fast road.
type Flags uint8

const (
	// Escaped: the string holds a backslash escape; its value is not its contents as they are
	// (Unescape it).
	Escaped Flags = 1 << iota
	// NonASCII: the string holds a byte above 0x7F. Without StrictUTF8 it may be invalid UTF-8.
	NonASCII
	// Fraction: the number has a fraction part ('.').
	Fraction
	// Exponent: the number has an exponent ('e' or 'E').
	Exponent
)

// Token is one value found in the input: where it is, what kind, and for a string or a number,
// its Flags. It holds offsets, not bytes: the bytes are the caller's input, never copied.
type Token struct {
	// Start and End bound the value: input[Start:End], a string's quotes included.
	Start, End int
	Kind       Kind
	Flags      Flags
}

// Raw is the token's bytes in b (the input it was scanned from), capped so that appending to
// them cannot overwrite what follows.
func (t Token) Raw(b []byte) []byte { return b[t.Start:t.End:t.End] }

// Contents is a string token's bytes between its quotes, as they are (escapes not decoded).
func (t Token) Contents(b []byte) []byte { return b[t.Start+1 : t.End-1 : t.End-1] }

// Plain reports whether a string's contents are its value and plain ASCII: no escape, no byte
// above 0x7F. Such a string needs neither unescaping nor a UTF-8 check.
func (t Token) Plain() bool { return t.Flags&(Escaped|NonASCII) == 0 }

// Integer reports whether a number has neither a fraction nor an exponent.
func (t Token) Integer() bool { return t.Kind == Number && t.Flags&(Fraction|Exponent) == 0 }

// Valid reports whether b is one JSON value, white space around it allowed: exactly what
// encoding/json's Valid accepts (invalid UTF-8 in strings included; nesting up to 10,000).
func Valid(b []byte) bool { return Validate(b, Options{}) == nil }

// Validate checks that b is one JSON value, white space around it allowed, under o, and says
// where it is not.
func Validate(b []byte, o Options) error {
	s := NewScanner(b, o)
	if _, err := s.ReadValue(); err != nil {
		return err
	}
	return s.Finish()
}

// SkipValue returns the end of the JSON value that starts at b[i] (after white space), checking
// it as Validate does, within o's bounds, with i's own nesting taken as zero.
func SkipValue(b []byte, i int, o Options) (end int, err error) {
	s := NewScanner(b, o)
	if i < 0 || i > len(b) {
		return i, s.fail(eof, i)
	}
	s.i = i
	t, err := s.ReadValue()
	return t.End, err
}

// Scanner is a validating pull scanner over one JSON document in memory. A caller asks for what
// it expects next (a string, a number, an object's next member, any value to skip) and gets
// offsets into the input; nothing is copied or decoded unless the caller asks (Unescape).
// Everything it passes over is checked as encoding/json checks it, so a document read through
// a Scanner to Finish is one encoding/json's Valid accepts.
//
// The zero value is not ready: use NewScanner. A Scanner is a small value that allocates
// nothing unless the caller enters more than 256 levels of containers; it is not safe for
// concurrent use. After an error every method returns that error again (or the zero result), so
// a caller may check once at the end.
type Scanner struct {
	b      []byte
	i      int
	depth  int // objects and arrays entered with EnterObject and EnterArray, not yet closed
	limit  int
	strict bool
	// first: the container entered last has had no member or element yet (no ',' expected).
	first bool
	err   error
	// objects has a bit per open container, set for an object, so that NextMember and
	// NextElement called out of order fail rather than close the wrong kind: the first 256
	// levels here, deeper ones in more.
	objects [4]uint64
	more    []uint64
}

// setObject records whether the container at depth d (0 the outermost) is an object.
func (s *Scanner) setObject(d int, object bool) {
	var w *uint64
	if d < 256 {
		w = &s.objects[d/64]
	} else {
		for len(s.more) <= (d-256)/64 {
			s.more = append(s.more, 0)
		}
		w = &s.more[(d-256)/64]
	}
	if object {
		*w |= 1 << (d % 64)
	} else {
		*w &^= 1 << (d % 64)
	}
}

// isObject says whether the container at depth d is an object. The inline levels are tested in
// unsigned arithmetic (a shift and a mask), for NextScalar's loop.
func (s *Scanner) isObject(d int) bool {
	if u := uint(d); u < 256 {
		return s.objects[u/64]>>(u%64)&1 != 0
	}
	return s.more[(d-256)/64]>>(d%64)&1 != 0
}

// NewScanner returns a Scanner at the start of b.
func NewScanner(b []byte, o Options) Scanner {
	limit := o.MaxDepth
	switch {
	case limit == 0:
		limit = DefaultMaxDepth
	case limit < 0:
		limit = math.MaxInt
	}
	return Scanner{b: b, limit: limit, strict: o.StrictUTF8}
}

// Reset starts the Scanner over on b, with the same options.
func (s *Scanner) Reset(b []byte) {
	*s = Scanner{b: b, limit: s.limit, strict: s.strict, more: s.more[:0]}
}

// Input is the document being scanned.
func (s *Scanner) Input() []byte { return s.b }

// Offset is the index of the next byte the Scanner will read.
func (s *Scanner) Offset() int { return s.i }

// Depth is how many objects and arrays entered with EnterObject or EnterArray are still open.
func (s *Scanner) Depth() int { return s.depth }

// Err is the error that stopped the Scanner, or nil.
func (s *Scanner) Err() error { return s.err }

func (s *Scanner) fail(p problem, off int) error {
	if s.err == nil {
		s.err = p.at(off, s.limit)
	}
	return s.err
}

// Peek skips white space and returns the next byte (0 at the end of the input or after an
// error): '{', '[', '"', a digit or '-', 't', 'f', 'n', or a delimiter. KindOf tells the kind.
func (s *Scanner) Peek() byte {
	if s.err != nil {
		return 0
	}
	s.i = skipSpace(s.b, s.i)
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// ReadString reads the string that must come next.
func (s *Scanner) ReadString() (Token, error) {
	if c := s.Peek(); c != '"' {
		return Token{}, s.expected(expectedString)
	}
	start := s.i
	end, f, p := scanString(s.b, start, s.strict)
	if p != okay {
		return Token{}, s.fail(p, end)
	}
	s.i = end
	return Token{Start: start, End: end, Kind: String, Flags: f}, nil
}

// ReadNumber reads the number that must come next, with JSON's grammar exactly:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *Scanner) ReadNumber() (Token, error) {
	c := s.Peek()
	if c != '-' && (c < '0' || c > '9') {
		return Token{}, s.expected(badNumber)
	}
	start := s.i
	end, f, p := scanNumber(s.b, start)
	if p != okay {
		return Token{}, s.fail(p, end)
	}
	s.i = end
	return Token{Start: start, End: end, Kind: Number, Flags: f}, nil
}

// ReadBool reads the true or false that must come next.
func (s *Scanner) ReadBool() (bool, error) {
	switch s.Peek() {
	case 't':
		if hasLiteral(s.b, s.i, "true") {
			s.i += 4
			return true, nil
		}
	case 'f':
		if hasLiteral(s.b, s.i, "false") {
			s.i += 5
			return false, nil
		}
	}
	return false, s.expected(expectedBool)
}

// ReadNull reads a null if one comes next, and reports whether it did: encoding/json's "null
// leaves the field as it was" is then one test.
func (s *Scanner) ReadNull() bool {
	if s.Peek() == 'n' && hasLiteral(s.b, s.i, "null") {
		s.i += 4
		return true
	}
	return false
}

// expected fails with p at the next byte, or with eof at the end of the input.
func (s *Scanner) expected(p problem) error {
	if s.err != nil {
		return s.err
	}
	if s.i >= len(s.b) {
		return s.fail(eof, s.i)
	}
	return s.fail(p, s.i)
}

// ReadValue passes over the value that must come next, of any kind, checking it, and returns
// its extent (Flags only for a string or a number). Objects and arrays are walked in a loop,
// not a recursion: a value nested to the limit costs no deep stack. Nesting counts from the
// containers the Scanner has entered.
func (s *Scanner) ReadValue() (Token, error) {
	c := s.Peek()
	if s.err != nil {
		return Token{}, s.err
	}
	start := s.i
	t := Token{Start: start, Kind: KindOf(c)}
	var end int
	var p problem
	switch t.Kind {
	case String:
		end, t.Flags, p = scanString(s.b, start, s.strict)
	case Number:
		end, t.Flags, p = scanNumber(s.b, start)
	case True, False, Null:
		end, p = scanLiteral(s.b, start, t.Kind)
	case Object, Array:
		end, p = skipNested(s.b, start, s.depth, s.limit, s.strict)
	default:
		return Token{}, s.expected(expectedValue)
	}
	if p != okay {
		return Token{}, s.fail(p, end)
	}
	s.i, t.End = end, end
	return t, nil
}

// EnterObject reads the '{' that must come next; NextMember then walks the members.
func (s *Scanner) EnterObject() error { return s.enter('{', expectedObject) }

// EnterArray reads the '[' that must come next; NextElement then walks the elements.
func (s *Scanner) EnterArray() error { return s.enter('[', expectedArray) }

func (s *Scanner) enter(open byte, p problem) error {
	if s.Peek() != open {
		return s.expected(p)
	}
	if s.depth >= s.limit {
		return s.fail(tooDeep, s.i)
	}
	s.setObject(s.depth, open == '{')
	s.i++
	s.depth++
	s.first = true
	return nil
}

// NextMember moves to the next member of the object entered last: it reads the ',' before it
// (or, at the end, the '}', and returns more false), the key and the ':'. The Scanner is then at
// the member's value, which the caller must read (ReadValue to skip it) before the next call.
func (s *Scanner) NextMember() (key Token, more bool, err error) {
	if !s.next('}', expectedCommaOrBrace) {
		return Token{}, false, s.err
	}
	// The key and its ':' are read here rather than through ReadString and Peek: this runs once
	// per member of every object the gateway reads (a stream's every chunk), and most keys
	// follow their ',' or '{' and precede their ':' with no white space between.
	i := s.i
	if i < len(s.b) && s.b[i] != '"' {
		i = skipSpace(s.b, i)
	}
	if i >= len(s.b) || s.b[i] != '"' {
		s.i = i
		return Token{}, false, s.expected(expectedString)
	}
	end, f, p := scanString(s.b, i, s.strict)
	if p != okay {
		return Token{}, false, s.fail(p, end)
	}
	key = Token{Start: i, End: end, Kind: String, Flags: f}
	if end < len(s.b) && s.b[end] == ':' {
		s.i = end + 1
		return key, true, nil
	}
	s.i = skipSpace(s.b, end)
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return Token{}, false, s.expected(expectedColon)
	}
	s.i++
	return key, true, nil
}

// NextElement moves to the next element of the array entered last: it reads the ',' before it
// and reports true, or reads the ']' and reports false. The caller reads the element.
func (s *Scanner) NextElement() (more bool, err error) {
	if !s.next(']', expectedCommaOrBracket) {
		return false, s.err
	}
	return true, nil
}

// next reads what comes before a member or an element: nothing for the first, else ','; or the
// closer, which ends the container (false, with s.err nil).
func (s *Scanner) next(closer byte, p problem) bool {
	c := s.Peek()
	if s.err != nil {
		return false
	}
	if s.depth == 0 || s.isObject(s.depth-1) != (closer == '}') {
		s.fail(notInContainer, s.i)
		return false
	}
	switch {
	case c == closer:
		s.i++
		s.depth--
		s.first = false // the enclosing container has had this one as a member or element
		return false
	case s.first:
		s.first = false
		return true
	case c == ',':
		s.i++
		return true
	}
	s.expected(p)
	return false
}

// Finish checks that the document ends here: every container entered is closed and only white
// space is left.
func (s *Scanner) Finish() error {
	if s.err != nil {
		return s.err
	}
	s.i = skipSpace(s.b, s.i)
	if s.depth != 0 {
		return s.fail(unclosed, s.i)
	}
	if s.i != len(s.b) {
		return s.fail(trailingData, s.i)
	}
	return nil
}

// scanString scans the string whose opening quote is b[i]: it returns the index after the
// closing quote and what the string holds, or, on a problem, the offset of the byte at fault.
// Without strict, invalid UTF-8 is passed over as encoding/json's scanner passes it.
func scanString(b []byte, i int, strict bool) (int, Flags, problem) {
	var f Flags
	j := i + 1
	for {
		// Until a byte above 0x7F is seen, stop at each (to set NonASCII); after, pass over
		// them eight at a time.
		if f&NonASCII == 0 {
			j = SkipPlainASCII(b, j)
		} else {
			j = SkipPlain(b, j)
		}
		if j >= len(b) {
			return len(b), f, unterminatedString
		}
		switch c := b[j]; {
		case c == '"':
			if strict && f&NonASCII != 0 && !utf8.Valid(b[i+1:j]) {
				return firstInvalid(b, i+1), f, invalidUTF8
			}
			return j + 1, f, okay
		case c == '\\':
			f |= Escaped
			if j+1 >= len(b) {
				return len(b), f, unterminatedString
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				r, ok := hex4(b, j+2)
				if !ok {
					return j, f, badUnicodeEscape
				}
				if strict && r >= 0xD800 && r < 0xE000 {
					lo, ok := hex4(b, j+8)
					if r >= 0xDC00 || j+8 > len(b) || b[j+6] != '\\' || b[j+7] != 'u' || !ok || lo < 0xDC00 || lo >= 0xE000 {
						return j, f, loneSurrogate
					}
					j += 6
				}
				j += 6
			default:
				return j, f, badEscape
			}
		case c < 0x20:
			return j, f, controlInString
		default: // above 0x7F: the skips stop at nothing else
			f |= NonASCII
			j++
		}
	}
}

// firstInvalid is the offset of the first byte of b at or after i that does not start valid
// UTF-8 (only called when there is one before the string's end).
func firstInvalid(b []byte, i int) int {
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return i
}

// hex4 reads the four hex digits at b[i:], if there are four.
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// scanNumber scans the number that starts at b[i] ('-' or a digit), JSON's grammar exactly. On
// a problem it returns the offset of the byte where a digit was wanted.
func scanNumber(b []byte, i int) (int, Flags, problem) {
	var f Flags
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, f, badNumber
	case b[i] == '0':
		i++ // no leading zeros: "01" is 0 and then a stray 1
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, f, badNumber
	}
	if i < len(b) && b[i] == '.' {
		f |= Fraction
		if i++; i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, f, badNumber
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		f |= Exponent
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, f, badNumber
		}
		i = digits(b, i+1)
	}
	return i, f, okay
}

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// scanLiteral scans true, false or null (k says which must be) at b[i]. Each case passes a
// constant, which the compiler compares with b in one load.
func scanLiteral(b []byte, i int, k Kind) (int, problem) {
	switch k {
	case True:
		return literal(b, i, "true")
	case False:
		return literal(b, i, "false")
	}
	return literal(b, i, "null")
}

func literal(b []byte, i int, lit string) (int, problem) {
	if !hasLiteral(b, i, lit) {
		return i, badLiteral
	}
	return i + len(lit), okay
}

// skipNested passes over the object or array whose opening byte is b[i], checking everything in
// it; depth containers enclose it, and at most limit may be open. It returns the index after
// its closing byte or, on a problem, the offset of the byte at fault.
func skipNested(b []byte, i, depth, limit int, strict bool) (int, problem) {
	// One bit per open container, set for an object: the first 256 levels in this frame, more
	// on the heap (a document nested that deep is rare, and costs 157 words at the limit).
	var inline [4]uint64
	kinds := inline[:]
	open := 0
	for {
		// A value is next (i is at it, white space skipped).
		if i >= len(b) {
			return i, eof
		}
		var p problem
		switch c := b[i]; c {
		case '{', '[':
			if depth+open >= limit {
				return i, tooDeep
			}
			if open/64 == len(kinds) {
				kinds = append(kinds, 0)
			}
			bit := uint64(1) << (open % 64)
			closer := byte(']')
			if c == '{' {
				kinds[open/64] |= bit
				closer = '}'
			} else {
				kinds[open/64] &^= bit
			}
			open++
			if i = skipSpace(b, i+1); i < len(b) && b[i] == closer {
				i++
				open--
				break // an empty container: a value that has ended
			}
			if c == '{' {
				if i, p = key(b, i, strict); p != okay {
					return i, p
				}
			}
			continue // the first member's value, or the first element
		case '"':
			i, _, p = scanString(b, i, strict)
		case 't':
			i, p = scanLiteral(b, i, True)
		case 'f':
			i, p = scanLiteral(b, i, False)
		case 'n':
			i, p = scanLiteral(b, i, Null)
		default:
			if c != '-' && (c < '0' || c > '9') {
				return i, expectedValue
			}
			i, _, p = scanNumber(b, i)
		}
		if p != okay {
			return i, p
		}
		// A value has ended: close the containers that end here, or move to the next member
		// or element.
		for {
			if open == 0 {
				return i, okay
			}
			top := open - 1
			object := kinds[top/64]>>(top%64)&1 != 0
			if i = skipSpace(b, i); i >= len(b) {
				return i, eof
			}
			c := b[i]
			if c == ',' {
				i = skipSpace(b, i+1)
				if object {
					if i, p = key(b, i, strict); p != okay {
						return i, p
					}
				}
				break
			}
			switch {
			case object && c == '}', !object && c == ']':
				i++
				open--
				continue
			case object:
				return i, expectedCommaOrBrace
			}
			return i, expectedCommaOrBracket
		}
	}
}

// key scans an object key at b[i] and the ':' after it, returning the index of the value (white
// space skipped).
func key(b []byte, i int, strict bool) (int, problem) {
	if i >= len(b) {
		return i, eof
	}
	if b[i] != '"' {
		return i, expectedString
	}
	i, _, p := scanString(b, i, strict)
	if p != okay {
		return i, p
	}
	if i = skipSpace(b, i); i >= len(b) {
		return i, eof
	}
	if b[i] != ':' {
		return i, expectedColon
	}
	return skipSpace(b, i+1), okay
}
