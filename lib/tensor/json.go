package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/infergate/infergate/gen/inference"
)

// The KServe v2 REST protocol carries tensor data as JSON: an array of numbers, booleans or strings
// in row-major order, flat or nested. This file converts between that form and raw bytes. It is a
// hand-written scanner over the data bytes rather than a decode into []any, which would allocate a
// boxed value per element and make a large tensor cost many times its size.

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
	d := jsonDecoder{data: data, dt: dt, size: ElementSize(dt), dst: dst}
	err := d.run()
	return d.dst, d.count, err
}

type jsonDecoder struct {
	data  []byte
	dt    inference.DataType
	size  int
	dst   []byte
	count int
}

func (d *jsonDecoder) fail(off int, format string, args ...any) error {
	return &JSONError{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

// run walks the array structure iteratively (a depth counter, no recursion), so deeply nested
// brackets cost nothing but the bytes they take.
func (d *jsonDecoder) run() error {
	data := d.data
	i := skipSpace(data, 0)
	depth := 0
	for {
		// A value is expected: an element or a nested array.
		if i >= len(data) {
			return d.fail(i, "unexpected end of JSON data")
		}
		if data[i] == '[' {
			depth++
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == ']' {
				depth--
				i++
			} else {
				continue
			}
		} else {
			end, err := d.element(i)
			if err != nil {
				return err
			}
			i = end
		}
		// After a value: a separator, the end of an array, or the end of the data.
		for {
			i = skipSpace(data, i)
			if depth == 0 {
				if i != len(data) {
					return d.fail(i, "unexpected %s after the end of the JSON data", describe(data, i))
				}
				return nil
			}
			if i >= len(data) {
				return d.fail(i, "unexpected end of JSON data: %d array(s) not closed", depth)
			}
			switch data[i] {
			case ',':
				i = skipSpace(data, i+1)
			case ']':
				depth--
				i++
				continue
			default:
				return d.fail(i, "expected ',' or ']' after element %d, got %s", d.count-1, describe(data, i))
			}
			break
		}
	}
}

// element decodes the scalar at data[i:] and returns the offset just after it.
func (d *jsonDecoder) element(i int) (int, error) {
	data := d.data
	switch c := data[i]; {
	case c == '"':
		if d.dt != inference.DataType_TYPE_STRING {
			return 0, d.fail(i, "element %d is a string, but %s data must be %s", d.count, Name(d.dt), kindOf(d.dt))
		}
		at := len(d.dst)
		d.dst = append(d.dst, 0, 0, 0, 0)
		end, err := d.appendString(i)
		if err != nil {
			return 0, err
		}
		n := len(d.dst) - at - 4
		if uint64(n) > math.MaxUint32 {
			return 0, d.fail(i, "element %d is longer than a BYTES element can be (4 GiB)", d.count)
		}
		binary.LittleEndian.PutUint32(d.dst[at:], uint32(n))
		d.count++
		return end, nil
	case c == 't' || c == 'f':
		v, end, ok := literalBool(data, i)
		if !ok {
			return 0, d.fail(i, "invalid JSON value %s in element %d", describe(data, i), d.count)
		}
		if d.dt != inference.DataType_TYPE_BOOL {
			return 0, d.fail(i, "element %d is a boolean, but %s data must be %s", d.count, Name(d.dt), kindOf(d.dt))
		}
		var b byte
		if v {
			b = 1
		}
		d.dst = append(d.dst, b)
		d.count++
		return end, nil
	case c == '-' || (c >= '0' && c <= '9'):
		end, integer, ok := scanNumber(data, i)
		if !ok {
			return 0, d.fail(i, "invalid JSON number %s in element %d", describe(data, i), d.count)
		}
		if err := d.number(data[i:end], integer, i); err != nil {
			return 0, err
		}
		d.count++
		return end, nil
	case c == 'n' && hasPrefix(data[i:], "null"):
		return 0, d.fail(i, "element %d is null, but %s data must be %s", d.count, Name(d.dt), kindOf(d.dt))
	case c == '{':
		return 0, d.fail(i, "element %d is an object, but %s data must be %s", d.count, Name(d.dt), kindOf(d.dt))
	}
	return 0, d.fail(i, "invalid JSON value %s in element %d", describe(data, i), d.count)
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
	for _, c := range digits {
		digit := uint64(c - '0')
		if u > (math.MaxUint64-digit)/10 {
			return d.rangeErr(off, tok)
		}
		u = u*10 + digit
	}
	lo, hi := intRange(d.dt)
	if neg {
		// The magnitude of the most negative value: 0 for unsigned types, so only -0 passes.
		var maxNeg uint64
		if lo < 0 {
			maxNeg = uint64(-(lo + 1)) + 1
		}
		if u > maxNeg {
			return d.rangeErr(off, tok)
		}
	} else if u > hi {
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

// appendString decodes the JSON string starting at the quote at data[i] onto d.dst and returns
// the offset after the closing quote. Bytes that are not valid UTF-8 are kept as they are: a BYTES
// element is bytes, not text.
func (d *jsonDecoder) appendString(i int) (int, error) {
	data := d.data
	start := i
	i++
	for {
		// Copy the run of plain bytes in one append.
		j := i
		for j < len(data) && data[j] != '"' && data[j] != '\\' && data[j] >= 0x20 {
			j++
		}
		d.dst = append(d.dst, data[i:j]...)
		i = j
		if i >= len(data) {
			return 0, d.fail(start, "unterminated string in element %d", d.count)
		}
		switch c := data[i]; {
		case c == '"':
			return i + 1, nil
		case c < 0x20:
			return 0, d.fail(i, "control character 0x%02x inside the string of element %d must be escaped", c, d.count)
		}
		// An escape.
		if i+1 >= len(data) {
			return 0, d.fail(start, "unterminated string in element %d", d.count)
		}
		switch e := data[i+1]; e {
		case '"', '\\', '/':
			d.dst = append(d.dst, e)
			i += 2
		case 'b':
			d.dst = append(d.dst, '\b')
			i += 2
		case 'f':
			d.dst = append(d.dst, '\f')
			i += 2
		case 'n':
			d.dst = append(d.dst, '\n')
			i += 2
		case 'r':
			d.dst = append(d.dst, '\r')
			i += 2
		case 't':
			d.dst = append(d.dst, '\t')
			i += 2
		case 'u':
			r, ok := hex4(data, i+2)
			if !ok {
				return 0, d.fail(i, "invalid \\u escape in the string of element %d", d.count)
			}
			i += 6
			if utf16.IsSurrogate(r) {
				// A high surrogate followed by an escaped low one is one code point; a lone
				// surrogate becomes U+FFFD, as Go's encoding/json decodes it.
				r2, ok := rune(-1), false
				if i+1 < len(data) && data[i] == '\\' && data[i+1] == 'u' {
					r2, ok = hex4(data, i+2)
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			d.dst = utf8.AppendRune(d.dst, r)
		default:
			return 0, d.fail(i, "invalid escape '\\%c' in the string of element %d", e, d.count)
		}
	}
}

func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// scanNumber checks the JSON number grammar at data[i:] and returns where it ends and whether it
// is an integer (no fraction or exponent).
func scanNumber(data []byte, i int) (end int, integer, ok bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return i, false, false
	case data[i] == '0':
		i++
	case data[i] >= '1' && data[i] <= '9':
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
	default:
		return i, false, false
	}
	integer = true
	if i < len(data) && data[i] == '.' {
		integer = false
		i++
		n := i
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		if i == n {
			return i, false, false
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		integer = false
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		n := i
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
		}
		if i == n {
			return i, false, false
		}
	}
	// A number must end at a delimiter, so "12abc" is not read as 12.
	if i < len(data) && !isDelimiter(data[i]) {
		return i, false, false
	}
	return i, integer, true
}

func literalBool(data []byte, i int) (v bool, end int, ok bool) {
	switch {
	case hasPrefix(data[i:], "true"):
		v, end = true, i+4
	case hasPrefix(data[i:], "false"):
		v, end = false, i+5
	default:
		return false, i, false
	}
	if end < len(data) && !isDelimiter(data[end]) {
		return false, i, false
	}
	return v, end, true
}

func isDelimiter(c byte) bool {
	return c == ',' || c == ']' || c == '}' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
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
// are escaped; bytes that are not valid UTF-8 become U+FFFD, because a JSON document must be
// UTF-8 and strict parsers reject the whole response otherwise (arbitrary bytes travel intact as
// binary data).
func AppendJSONString[S ~string | ~[]byte](dst []byte, s S) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
