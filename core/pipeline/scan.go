package pipeline

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/infergate/infergate/internal/jsonwire"
)

var errNotObject = errors.New("request body must be a JSON object")

// scanRouting reads the top-level "model" and "stream" members of a JSON object without decoding
// anything else: every other value is skipped (and checked) by jsonwire's scanner, string
// contents eight bytes at a time. Like encoding/json, a duplicate key's last value wins, escaped
// keys match, and null leaves a field unset. It rejects malformed JSON it walks over, so a bad
// body is a 400 from the gateway, not a round trip to the upstream.
func scanRouting(b []byte) (Routing, error) {
	r, maxTokens, maxCompl, err := scanTop(b)
	r.MaxTokens = maxCompl
	if r.MaxTokens < 0 {
		r.MaxTokens = maxTokens
	}
	return r, err
}

// The top-level members scanTop reads.
const (
	otherKey = iota
	modelKey
	streamKey
	maxTokensKey
	maxComplKey
)

// scanTop walks the body's top level for scanRouting, and returns max_tokens's and
// max_completion_tokens's values beside (-1 when absent). Any error is worded by explain.
func scanTop(b []byte) (r Routing, maxTokens, maxCompl int, err error) {
	r, maxTokens, maxCompl = Routing{MaxTokens: -1}, -1, -1
	fail := func(err error) (Routing, int, int, error) { return r, maxTokens, maxCompl, explain(b, err) }
	s := jsonwire.NewScanner(b, jsonwire.Options{})
	if s.Peek() != '{' {
		return r, maxTokens, maxCompl, errNotObject
	}
	if err := s.EnterObject(); err != nil {
		return fail(err)
	}
	for {
		key, more, err := s.NextMember()
		if err != nil {
			return fail(err)
		}
		if !more {
			break
		}
		switch k := whichKey(b, key); k {
		case modelKey:
			if s.ReadNull() {
				r.Model, r.ModelStart, r.ModelEnd = "", 0, 0
				continue
			}
			t, err := s.ReadString()
			if err != nil {
				return fail(err)
			}
			m, err := jsonwire.UnescapeString(t.Contents(b), jsonwire.ReplaceInvalid)
			if err != nil { // the scanner checked the string: not reached
				return r, maxTokens, maxCompl, fmt.Errorf("bad JSON string: %w", err)
			}
			r.Model, r.ModelStart, r.ModelEnd = m, t.Start, t.End
		case streamKey:
			if s.ReadNull() {
				r.Stream = false
				continue
			}
			v, err := s.ReadBool()
			if err != nil {
				return fail(err)
			}
			r.Stream = v
		case maxTokensKey, maxComplKey:
			t, err := s.ReadValue()
			if err != nil {
				return fail(err)
			}
			if n := wholeNumber(t.Raw(b)); k == maxTokensKey {
				maxTokens = n
			} else {
				maxCompl = n
			}
		default:
			if _, err := s.ReadValue(); err != nil {
				return fail(err)
			}
		}
	}
	if err := s.Finish(); err != nil {
		return fail(err)
	}
	return r, maxTokens, maxCompl, nil
}

// whichKey says which of the members scanTop reads key names. An escaped key matches its value,
// as encoding/json has it.
func whichKey(b []byte, key jsonwire.Token) int {
	k := key.Contents(b)
	if key.Flags&jsonwire.Escaped != 0 {
		var buf [32]byte
		k, _ = jsonwire.Unescape(buf[:0], k, jsonwire.ReplaceInvalid)
	}
	switch string(k) {
	case "model":
		return modelKey
	case "stream":
		return streamKey
	case "max_tokens":
		return maxTokensKey
	case "max_completion_tokens":
		return maxComplKey
	}
	return otherKey
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

// explain reads a body the scan refused again, a token at a time, to say what is wrong in the
// router's own words: clients see them in the 400 ("We could not parse the JSON body of your
// request: malformed JSON at byte N: ..."), and jsonwire words some faults otherwise and, at the
// end of the input, cannot tell which of several things was expected. Only refused bodies take
// this road; scanErr, the scan's own error, is the answer should this walk find no fault. Nesting
// is bounded as encoding/json bounds it (jsonwire's DefaultMaxDepth, the top object counted), the
// fault at the bracket that goes too deep.
func explain(b []byte, scanErr error) error {
	x := explainer{b: b, s: jsonwire.NewScanner(b, jsonwire.Options{})}
	if x.s.Peek() != '{' {
		return errNotObject
	}
	if err := x.s.EnterObject(); err != nil {
		return x.token(err)
	}
	for first := true; ; first = false {
		c, at := x.s.Peek(), x.s.Offset()
		if c == '}' {
			_, _, _ = x.s.NextMember() // the object's end
			if err := x.s.Finish(); err != nil {
				return x.at(x.offset(err), "unexpected data after the top-level object")
			}
			return scanErr // not reached: the scan found a fault
		}
		if !first && c != ',' {
			return x.at(at, "expected ',' or '}' in object")
		}
		key, _, err := x.s.NextMember()
		if err != nil {
			return x.member(err, first, at)
		}
		switch whichKey(b, key) {
		case modelKey:
			if x.s.ReadNull() {
				continue
			}
			if x.s.Peek() != '"' {
				return x.at(x.s.Offset(), `"model" must be a string`)
			}
			if _, err := x.s.ReadString(); err != nil {
				return x.token(err)
			}
		case streamKey:
			if x.s.ReadNull() {
				continue
			}
			x.s.Peek()
			at := x.s.Offset()
			if _, err := x.s.ReadBool(); err != nil {
				return x.at(at, `"stream" must be a boolean`)
			}
		default:
			if err := x.value(); err != nil {
				return err
			}
		}
	}
}

type explainer struct {
	b []byte
	s jsonwire.Scanner
}

func (x *explainer) at(off int, msg string) error {
	return fmt.Errorf("malformed JSON at byte %d: %s", off, msg)
}

func (x *explainer) offset(err error) int {
	var se *jsonwire.SyntaxError
	if errors.As(err, &se) {
		return se.Offset
	}
	return x.s.Offset()
}

// value explains the value that comes next, of any kind, as the router's scanner read it.
func (x *explainer) value() error {
	c, at := x.s.Peek(), x.s.Offset()
	if x.s.Err() != nil {
		return x.token(x.s.Err())
	}
	switch jsonwire.KindOf(c) {
	case jsonwire.String:
		if _, err := x.s.ReadString(); err != nil {
			return x.token(err)
		}
		return nil
	case jsonwire.Number:
		if _, err := x.s.ReadNumber(); err != nil {
			return x.token(err)
		}
		return nil
	case jsonwire.True, jsonwire.False, jsonwire.Null:
		if _, err := x.s.ReadValue(); err != nil {
			return x.at(at, fmt.Sprintf("unexpected character %q", c))
		}
		return nil
	case jsonwire.Object, jsonwire.Array:
	default:
		if c == 0 && at == len(x.b) {
			return x.at(at, "unexpected end of input")
		}
		return x.at(at, fmt.Sprintf("unexpected character %q", c))
	}
	object := c == '{'
	closer := byte(']')
	enter, next := x.s.EnterArray, func() error { _, err := x.s.NextElement(); return err }
	if object {
		closer = '}'
		enter = x.s.EnterObject
		next = func() error { _, _, err := x.s.NextMember(); return err }
	}
	if err := enter(); err != nil {
		return x.token(err) // nested too deeply
	}
	for first := true; ; first = false {
		c, at := x.s.Peek(), x.s.Offset()
		if c == closer {
			_ = next() // the container's end
			return nil
		}
		if !first && c != ',' {
			return x.at(at, fmt.Sprintf("expected ',' or '%c'", closer))
		}
		if err := next(); err != nil {
			return x.member(err, first, at)
		}
		if err := x.value(); err != nil {
			return err
		}
	}
}

// member explains NextMember's error: before it the scanner was at, at the object's first
// member (first) or at the ',' before the next. It failed at the key or at the ':' after it.
func (x *explainer) member(err error, first bool, at int) error {
	var se *jsonwire.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	switch se.Fault {
	case jsonwire.FaultEOF:
		// The end came where the key should start, or after it, where the ':' should be.
		keyAt := at
		if !first {
			keyAt = len(x.b) - len(bytes.TrimLeft(x.b[at+1:], " \t\n\r"))
		}
		if keyAt == len(x.b) {
			return x.at(se.Offset, "expected a string")
		}
		return x.at(se.Offset, "expected ':' after object key")
	case jsonwire.FaultExpectedString:
		return x.at(se.Offset, "expected a string")
	case jsonwire.FaultExpectedColon:
		return x.at(se.Offset, "expected ':' after object key")
	}
	return x.token(err)
}

// token words the error of a string, a number or a nesting bound as the router's scanner did.
func (x *explainer) token(err error) error {
	var se *jsonwire.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	b, off := x.b, se.Offset
	msg := se.Msg
	switch se.Fault { // jsonwire's "nesting deeper than 10000" is the router's already
	case jsonwire.FaultUnterminatedString:
		// A backslash as the last byte is an escape cut short: the router pointed at it.
		n := len(b) - len(bytes.TrimRight(b, `\`))
		if off == len(b) && n%2 == 1 {
			off--
		}
	case jsonwire.FaultControlInString:
		msg = "control character in string"
	case jsonwire.FaultBadEscape:
		msg = "bad escape"
	case jsonwire.FaultBadUnicodeEscape:
		msg = `bad \u escape`
		if off+6 > len(b) {
			msg = `short \u escape`
		}
	case jsonwire.FaultBadNumber:
		// Where a digit was wanted: in the fraction, the exponent, or the integer part.
		msg = "bad number"
		switch before := b[off-1]; {
		case before == '.':
			msg = "bad number fraction"
		case before == 'e' || before == 'E' || (before == '+' || before == '-') && off >= 2 && (b[off-2] == 'e' || b[off-2] == 'E'):
			msg = "bad number exponent"
		}
	}
	return x.at(off, msg)
}
