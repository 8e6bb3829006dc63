package jsonwire

import (
	"errors"
	"strconv"
)

// ErrTooDeep is what a SyntaxError wraps when a value nests deeper than the Scanner's MaxDepth:
// callers tell "refuse, too deep" (a 400 with its own reason, a cache bypass) from malformed
// JSON with errors.Is.
var ErrTooDeep = errors.New("nested too deeply")

// SyntaxError is malformed JSON (or, under Options.StrictUTF8 or RejectInvalid, text that is not
// UTF-8), with where it was found.
type SyntaxError struct {
	// Offset is the byte offset in the input of the byte at fault, or len(input) when the input
	// ended too soon. For Unescape it counts from the start of the contents it was given.
	Offset int
	// Msg says what was expected or found there.
	Msg string
	// Fault is the kind of fault, for a caller that words its own message (Msg is for people,
	// Fault for code: compare it with the Fault constants).
	Fault Fault
	// err is ErrTooDeep for a nesting error, else nil.
	err error
}

func (e *SyntaxError) Error() string {
	return "malformed JSON at byte " + strconv.Itoa(e.Offset) + ": " + e.Msg
}

// Unwrap returns ErrTooDeep for a nesting error.
func (e *SyntaxError) Unwrap() error { return e.err }

// Fault names what went wrong. The hot loops return one and an offset without building an
// error there; the error (with its allocation) is made only on the way out of a failed scan.
type Fault uint8

// problem is Fault under the name the scanner's loops use.
type problem = Fault

// The faults a caller may tell apart to word its own error (the others are all "malformed").
const (
	FaultEOF                = eof                // the input ended where more was expected
	FaultUnterminatedString = unterminatedString // a string without its closing quote
	FaultControlInString    = controlInString    // an unescaped control character in a string
	FaultBadEscape          = badEscape          // a backslash followed by a byte no escape starts with
	FaultBadUnicodeEscape   = badUnicodeEscape   // \u not followed by four hex digits
	FaultBadNumber          = badNumber          // a number that does not follow JSON's grammar
	FaultExpectedString     = expectedString     // an object key (or a string) was expected
	FaultExpectedColon      = expectedColon      // the ':' after an object key is missing
	FaultTooDeep            = tooDeep            // nested deeper than Options.MaxDepth
)

const (
	okay problem = iota
	eof
	unterminatedString
	controlInString
	badEscape
	badUnicodeEscape
	loneSurrogate
	invalidUTF8
	badNumber
	badLiteral
	expectedValue
	expectedString
	expectedColon
	expectedCommaOrBrace
	expectedCommaOrBracket
	expectedObject
	expectedArray
	trailingData
	expectedBool
	notInContainer
	tooDeep // made into an error by deepAt, which names the limit
	unclosed
)

// String says what the fault is, for SyntaxError.Msg.
func (p Fault) String() string {
	switch p {
	case eof:
		return "unexpected end of input"
	case unterminatedString:
		return "unterminated string"
	case controlInString:
		return "control character in string (it must be escaped)"
	case badEscape:
		return "invalid escape in string"
	case badUnicodeEscape:
		return `invalid \u escape in string (four hex digits expected)`
	case loneSurrogate:
		return `lone UTF-16 surrogate in \u escape`
	case invalidUTF8:
		return "invalid UTF-8 in string"
	case badNumber:
		return "invalid number"
	case badLiteral:
		return "invalid literal (true, false or null expected)"
	case expectedValue:
		return "a value expected"
	case expectedString:
		return "a string expected"
	case expectedColon:
		return "':' expected after an object key"
	case expectedCommaOrBrace:
		return "',' or '}' expected in object"
	case expectedCommaOrBracket:
		return "',' or ']' expected in array"
	case expectedObject:
		return "an object expected"
	case expectedArray:
		return "an array expected"
	case trailingData:
		return "unexpected data after the top-level value"
	case expectedBool:
		return "true or false expected"
	case unclosed:
		return "an object or array is not closed"
	case tooDeep:
		return "nesting too deep"
	case notInContainer:
		return "no object (for NextMember) or array (for NextElement) is open here: a Scanner used out of order"
	}
	return "no error"
}

// at is p found at byte off; limit is the nesting limit in force, for tooDeep.
func (p Fault) at(off, limit int) *SyntaxError {
	if p == tooDeep {
		return deepAt(off, limit)
	}
	return &SyntaxError{Offset: off, Msg: p.String(), Fault: p}
}

// deepAt is the nesting error, naming the limit.
func deepAt(off, limit int) *SyntaxError {
	return &SyntaxError{Offset: off, Msg: "nesting deeper than " + strconv.Itoa(limit), Fault: tooDeep, err: ErrTooDeep}
}
