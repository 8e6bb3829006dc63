package tensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/internal/jsonwire"
)

// The KServe v2 REST protocol carries tensor data as JSON: an array of numbers, booleans or strings
// in row-major order, flat or nested. This file converts between that form and raw bytes. It
// walks the data with jsonwire's pull scanner rather than decoding into []any, which would
// allocate a boxed value per element and make a large tensor cost many times its size.

// JSONError describes tensor data that is not valid JSON for its datatype.
type JSONError struct {
	// Offset is the byte offset in the JSON data where the problem was found, -1 where there is
	// no JSON to point into (encoding, or a datatype with no JSON form).
	Offset int
	// Msg says what is wrong, naming the element and the value where there is one.
	Msg string
}

func (e *JSONError) Error() string {
	if e.Offset < 0 {
		return e.Msg
	}
	return e.Msg + " (at offset " + strconv.Itoa(e.Offset) + ")"
}

// AppendFromJSON decodes JSON tensor data of datatype dt and appends it to dst in raw form
// (little-endian; BYTES elements framed with uint32 length prefixes). data is an array, flat or
// nested in row-major order, or one scalar; numbers must be integers within range for integer
// datatypes, BOOL takes true and false, BYTES takes strings. It returns the extended dst and the
// number of elements. FP16 and BF16 have no JSON form, as in Triton, and fail.
//
// Output grows only with what data actually holds (every element takes at least one byte of
// JSON), never with a size the caller declares.
func AppendFromJSON(dst []byte, dt inference.DataType, data []byte) ([]byte, int, error) {
	if dt == inference.DataType_TYPE_FP16 || dt == inference.DataType_TYPE_BF16 || !Valid(dt) {
		return dst, 0, &JSONError{Offset: -1, Msg: fmt.Sprintf("%s data cannot be carried in JSON", Name(dt))}
	}
	lo, hi := intRange(dt)
	var maxNeg uint64
	if lo < 0 {
		// The magnitude of the most negative value: 0 for unsigned types, so only -0 passes.
		maxNeg = uint64(-(lo + 1)) + 1
	}
	d := jsonDecoder{data: data, dt: dt, size: ElementSize(dt), dst: dst, hi: hi, maxNeg: maxNeg}
	err := d.run()
	return d.dst, d.count, err
}

type jsonDecoder struct {
	data  []byte
	dt    inference.DataType
	size  int
	dst   []byte
	count int
	// hi and maxNeg bound an integer datatype's elements: the largest value, and the magnitude
	// of the most negative one.
	hi, maxNeg uint64
}

func (d *jsonDecoder) fail(off int, format string, args ...any) error {
	return &JSONError{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// offset is where the scanner found the fault err reports.
func offset(err error) int {
	var se *jsonwire.SyntaxError
	if errors.As(err, &se) {
		return se.Offset
	}
	return -1
}

// run walks the array structure iteratively (the scanner counts the open arrays, no recursion),
// so deeply nested brackets cost nothing but the bytes they take.
func (d *jsonDecoder) run() error {
	data := d.data
	// No bound on nesting: the scanner keeps a bit per open array, and no stack.
	scanner := jsonwire.NewScanner(data, jsonwire.Options{MaxDepth: -1})
	s := &scanner
	for {
		// A value is expected: an element or a nested array.
		c := s.Peek()
		i := s.Offset()
		switch {
		case i >= len(data):
			return d.fail(i, "unexpected end of JSON data")
		case c == '[':
			_ = s.EnterArray() // no depth bound: cannot fail
		default:
			t, err := d.read(s, i, c)
			if err != nil {
				return err
			}
			if err := d.element(t); err != nil {
				return err
			}
		}
		// After a value: a separator, the end of an array, or the end of the data.
		for {
			if s.Depth() == 0 {
				if err := s.Finish(); err != nil {
					i := offset(err)
					return d.fail(i, "unexpected %s after the end of the JSON data", describe(data, i))
				}
				return nil
			}
			// The common case, a ',' and the next element (or an array's first), in one call;
			// anything else, or anything wrong with it, the general way.
			if t, ok := s.NextScalar(); ok {
				// element's commonest cases here, a call saved per element.
				var err error
				switch {
				case t.Kind == jsonwire.Number && d.delimited(t.End):
					if err = d.number(t.Raw(data), t.Integer(), t.Start); err == nil {
						d.count++
					}
				case t.Kind == jsonwire.True && d.dt == inference.DataType_TYPE_BOOL && d.delimited(t.End):
					d.dst = append(d.dst, 1)
					d.count++
				case t.Kind == jsonwire.False && d.dt == inference.DataType_TYPE_BOOL && d.delimited(t.End):
					d.dst = append(d.dst, 0)
					d.count++
				default:
					err = d.element(t)
				}
				if err != nil {
					return err
				}
				continue
			}
			more, err := s.NextElement()
			if err != nil {
				if i := offset(err); i < len(data) {
					return d.fail(i, "expected ',' or ']' after element %d, got %s", d.count-1, describe(data, i))
				}
				return d.fail(len(data), "unexpected end of JSON data: %d array(s) not closed", s.Depth())
			}
			if more {
				break
			}
		}
	}
}

// read reads with s the scalar at data[i:], whose first byte is c, saying what is wrong with it as
// the element it is to be.
func (d *jsonDecoder) read(s *jsonwire.Scanner, i int, c byte) (jsonwire.Token, error) {
	data := d.data
	var t jsonwire.Token
	var err error
	switch jsonwire.KindOf(c) {
	case jsonwire.String:
		if d.dt != inference.DataType_TYPE_STRING { // said before the string is looked at
			return t, d.wrongType(i, "a string")
		}
		if t, err = s.ReadString(); err != nil {
			return t, d.stringError(i, err)
		}
		return t, nil
	case jsonwire.Number:
		if t, err = s.ReadNumber(); err != nil {
			return t, d.fail(i, "invalid JSON number %s in element %d", describe(data, i), d.count)
		}
		return t, nil
	case jsonwire.True, jsonwire.False, jsonwire.Null:
		if t, err = s.ReadValue(); err == nil {
			return t, nil
		}
	case jsonwire.Object:
		return t, d.wrongType(i, "an object")
	}
	return t, d.fail(i, "invalid JSON value %s in element %d", describe(data, i), d.count)
}

// element decodes the scalar t as the next element.
func (d *jsonDecoder) element(t jsonwire.Token) error {
	switch t.Kind {
	case jsonwire.Number:
		if !d.delimited(t.End) { // "12abc" is not 12
			return d.fail(t.Start, "invalid JSON number %s in element %d", describe(d.data, t.Start), d.count)
		}
		if err := d.number(t.Raw(d.data), t.Integer(), t.Start); err != nil {
			return err
		}
	case jsonwire.String:
		if d.dt != inference.DataType_TYPE_STRING {
			return d.wrongType(t.Start, "a string")
		}
		at := len(d.dst)
		d.dst = append(d.dst, 0, 0, 0, 0)
		// Bytes that are not valid UTF-8 are kept as they are: a BYTES element is bytes, not
		// text. The scanner checked the escapes; without any, the contents are the value.
		if t.Flags&jsonwire.Escaped == 0 {
			d.dst = append(d.dst, t.Contents(d.data)...)
		} else {
			d.dst, _ = jsonwire.Unescape(d.dst, t.Contents(d.data), jsonwire.KeepInvalid)
		}
		n := len(d.dst) - at - 4
		if uint64(n) > math.MaxUint32 {
			return d.fail(t.Start, "element %d is longer than a BYTES element can be (4 GiB)", d.count)
		}
		binary.LittleEndian.PutUint32(d.dst[at:], uint32(n))
	case jsonwire.True, jsonwire.False:
		if !d.delimited(t.End) { // "truex" is not true
			return d.fail(t.Start, "invalid JSON value %s in element %d", describe(d.data, t.Start), d.count)
		}
		if d.dt != inference.DataType_TYPE_BOOL {
			return d.wrongType(t.Start, "a boolean")
		}
		var b byte
		if t.Kind == jsonwire.True {
			b = 1
		}
		d.dst = append(d.dst, b)
	default: // null ("nullx" too, as it always was)
		return d.wrongType(t.Start, "null")
	}
	d.count++
	return nil
}

// wrongType is the error for an element at off of the wrong kind (what) for d.dt.
func (d *jsonDecoder) wrongType(off int, what string) error {
	return d.fail(off, "element %d is %s, but %s data must be %s", d.count, what, Name(d.dt), kindOf(d.dt))
}

// delimited reports whether a literal or a number that ends at end is followed by what may
// follow an element, or by nothing.
func (d *jsonDecoder) delimited(end int) bool {
	if end >= len(d.data) {
		return true
	}
	switch d.data[end] {
	case ',', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// stringError words the scanner's error err in the string of the element at data[i].
func (d *jsonDecoder) stringError(i int, err error) error {
	var se *jsonwire.SyntaxError
	if !errors.As(err, &se) {
		return err
	}
	j := se.Offset
	switch se.Fault {
	case jsonwire.FaultControlInString:
		return d.fail(j, "control character 0x%02x inside the string of element %d must be escaped", d.data[j], d.count)
	case jsonwire.FaultBadUnicodeEscape:
		return d.fail(j, "invalid \\u escape in the string of element %d", d.count)
	case jsonwire.FaultBadEscape:
		return d.fail(j, "invalid escape '\\%c' in the string of element %d", d.data[j+1], d.count)
	}
	return d.fail(i, "unterminated string in element %d", d.count) // the one other fault
}

// number appends one JSON number token as an element of d.dt.
func (d *jsonDecoder) number(tok []byte, integer bool, off int) error {
	switch d.dt {
	case inference.DataType_TYPE_BOOL:
		return d.fail(off, "element %d is the number %s, but BOOL data must be true or false", d.count, tok)
	case inference.DataType_TYPE_STRING:
		return d.fail(off, "element %d is the number %s, but BYTES data must be strings", d.count, tok)
	case inference.DataType_TYPE_FP32, inference.DataType_TYPE_FP64:
		bits := 64
		if d.dt == inference.DataType_TYPE_FP32 {
			bits = 32
		}
		// The token is already checked to be JSON number syntax, which ParseFloat accepts a
		// superset of; the unsafe string is only read during the call.
		f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(tok), len(tok)), bits)
		if err != nil {
			return d.fail(off, "element %d (%s) is out of range for %s", d.count, tok, Name(d.dt))
		}
		if bits == 32 {
			d.dst = binary.LittleEndian.AppendUint32(d.dst, math.Float32bits(float32(f)))
		} else {
			d.dst = binary.LittleEndian.AppendUint64(d.dst, math.Float64bits(f))
		}
		return nil
	}
	if !integer {
		return d.fail(off, "element %d (%s) is not an integer, as %s data must be", d.count, tok, Name(d.dt))
	}
	neg := tok[0] == '-'
	digits := tok
	if neg {
		digits = tok[1:]
	}
	var u uint64
	if len(digits) <= 19 { // at most 9,999,999,999,999,999,999: no uint64 overflows
		for _, c := range digits {
			u = u*10 + uint64(c-'0')
		}
	} else {
		for _, c := range digits {
			digit := uint64(c - '0')
			if u > (math.MaxUint64-digit)/10 {
				return d.rangeErr(off, tok)
			}
			u = u*10 + digit
		}
	}
	if neg && u > d.maxNeg || !neg && u > d.hi {
		return d.rangeErr(off, tok)
	}
	v := u
	if neg {
		v = -u // two's complement of the magnitude
	}
	switch d.size {
	case 1:
		d.dst = append(d.dst, byte(v))
	case 2:
		d.dst = binary.LittleEndian.AppendUint16(d.dst, uint16(v))
	case 4:
		d.dst = binary.LittleEndian.AppendUint32(d.dst, uint32(v))
	default:
		d.dst = binary.LittleEndian.AppendUint64(d.dst, v)
	}
	return nil
}

func (d *jsonDecoder) rangeErr(off int, tok []byte) error {
	lo, hi := intRange(d.dt)
	return d.fail(off, "element %d (%s) is out of range for %s [%d, %d]", d.count, tok, Name(d.dt), lo, hi)
}

// intRange is the range of an integer datatype; lo is at most 0 and hi at least 0.
func intRange(dt inference.DataType) (lo int64, hi uint64) {
	switch dt {
	case inference.DataType_TYPE_INT8:
		return math.MinInt8, math.MaxInt8
	case inference.DataType_TYPE_INT16:
		return math.MinInt16, math.MaxInt16
	case inference.DataType_TYPE_INT32:
		return math.MinInt32, math.MaxInt32
	case inference.DataType_TYPE_INT64:
		return math.MinInt64, math.MaxInt64
	case inference.DataType_TYPE_UINT8:
		return 0, math.MaxUint8
	case inference.DataType_TYPE_UINT16:
		return 0, math.MaxUint16
	case inference.DataType_TYPE_UINT32:
		return 0, math.MaxUint32
	}
	return 0, math.MaxUint64
}

func kindOf(dt inference.DataType) string {
	switch dt {
	case inference.DataType_TYPE_BOOL:
		return "true or false"
	case inference.DataType_TYPE_STRING:
		return "strings"
	}
	return "numbers"
}

// describe quotes a short stretch of data at i for an error message.
func describe(data []byte, i int) string {
	if i >= len(data) {
		return "end of data"
	}
	end := min(i+16, len(data))
	return strconv.Quote(string(data[i:end]))
}

// AppendJSON appends raw data of datatype dt to dst as a flat JSON array in row-major order.
// Floats are written in their shortest form that reads back to the same value; BYTES elements
// become JSON strings (see AppendJSONString). FP16 and BF16 have no JSON form, and neither have
// NaN and infinities, which JSON numbers cannot express: those fail, and the caller should send
// the tensor as binary data instead.
func AppendJSON(dst []byte, dt inference.DataType, raw []byte) ([]byte, error) {
	if dt == inference.DataType_TYPE_FP16 || dt == inference.DataType_TYPE_BF16 || !Valid(dt) {
		return dst, &JSONError{Offset: -1, Msg: fmt.Sprintf("%s data cannot be carried in JSON", Name(dt))}
	}
	if dt == inference.DataType_TYPE_STRING {
		dst = append(dst, '[')
		first := true
		_, err := walkBytes(raw, func(elem []byte) {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = AppendJSONString(dst, elem)
		})
		if err != nil {
			return dst, &JSONError{Offset: -1, Msg: "malformed BYTES data: " + err.Error()}
		}
		return append(dst, ']'), nil
	}
	size := ElementSize(dt)
	if len(raw)%size != 0 {
		return dst, &JSONError{Offset: -1, Msg: fmt.Sprintf("%d bytes is not a whole number of %s elements", len(raw), Name(dt))}
	}
	dst = append(dst, '[')
	for i := 0; i < len(raw); i += size {
		if i > 0 {
			dst = append(dst, ',')
		}
		b := raw[i:]
		switch dt {
		case inference.DataType_TYPE_BOOL:
			if b[0] != 0 {
				dst = append(dst, "true"...)
			} else {
				dst = append(dst, "false"...)
			}
		case inference.DataType_TYPE_UINT8:
			dst = strconv.AppendUint(dst, uint64(b[0]), 10)
		case inference.DataType_TYPE_UINT16:
			dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint16(b)), 10)
		case inference.DataType_TYPE_UINT32:
			dst = strconv.AppendUint(dst, uint64(binary.LittleEndian.Uint32(b)), 10)
		case inference.DataType_TYPE_UINT64:
			dst = strconv.AppendUint(dst, binary.LittleEndian.Uint64(b), 10)
		case inference.DataType_TYPE_INT8:
			dst = strconv.AppendInt(dst, int64(int8(b[0])), 10)
		case inference.DataType_TYPE_INT16:
			dst = strconv.AppendInt(dst, int64(int16(binary.LittleEndian.Uint16(b))), 10)
		case inference.DataType_TYPE_INT32:
			dst = strconv.AppendInt(dst, int64(int32(binary.LittleEndian.Uint32(b))), 10)
		case inference.DataType_TYPE_INT64:
			dst = strconv.AppendInt(dst, int64(binary.LittleEndian.Uint64(b)), 10)
		case inference.DataType_TYPE_FP32, inference.DataType_TYPE_FP64:
			var f float64
			bits := 64
			if dt == inference.DataType_TYPE_FP32 {
				f, bits = float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), 32
			} else {
				f = math.Float64frombits(binary.LittleEndian.Uint64(b))
			}
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return dst, &JSONError{Offset: -1, Msg: fmt.Sprintf("element %d is %v, which JSON cannot represent", i/size, f)}
			}
			dst = appendFloat(dst, f, bits)
		}
	}
	return append(dst, ']'), nil
}

// appendFloat writes f as encoding/json does: plain decimal for ordinary magnitudes, exponent form
// (with a short exponent) for very large or small ones.
func appendFloat(dst []byte, f float64, bits int) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// AppendJSONString appends s to dst as a JSON string. Quotes, backslashes and control characters
// are escaped (\b, \f, \n, \r and \t short, others \u00XX); bytes that are not valid UTF-8 become
// U+FFFD, because a JSON document must be UTF-8 and strict parsers reject the whole response
// otherwise (arbitrary bytes travel intact as binary data).
func AppendJSONString[S ~string | ~[]byte](dst []byte, s S) []byte {
	return jsonwire.AppendString(dst, s, jsonwire.MinimalShort)
}
