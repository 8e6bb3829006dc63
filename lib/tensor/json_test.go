package tensor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jsonCase is one datatype's values as JSON and as the raw bytes they must decode to, built by an
// independent little-endian encoder (encoding/binary), not by the code under test.
type jsonCase struct {
	dt   inference.DataType
	json string
	raw  []byte
}

func le[T int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64 | bool](vs ...T) []byte {
	var out []byte
	for _, v := range vs {
		out, _ = binary.Append(out, binary.LittleEndian, v)
	}
	return out
}

func jsonCases() []jsonCase {
	return []jsonCase{
		{inference.DataType_TYPE_BOOL, `[true,false,true]`, []byte{1, 0, 1}},
		{inference.DataType_TYPE_UINT8, `[0,1,255]`, le[uint8](0, 1, 255)},
		{inference.DataType_TYPE_UINT16, `[0,65535]`, le[uint16](0, 65535)},
		{inference.DataType_TYPE_UINT32, `[0,4294967295]`, le[uint32](0, math.MaxUint32)},
		{inference.DataType_TYPE_UINT64, `[0,18446744073709551615]`, le[uint64](0, math.MaxUint64)},
		{inference.DataType_TYPE_INT8, `[-128,0,127]`, le[int8](-128, 0, 127)},
		{inference.DataType_TYPE_INT16, `[-32768,32767]`, le[int16](-32768, 32767)},
		{inference.DataType_TYPE_INT32, `[-2147483648,-1,2147483647]`, le[int32](math.MinInt32, -1, math.MaxInt32)},
		{inference.DataType_TYPE_INT64, `[-9223372036854775808,9223372036854775807]`, le[int64](math.MinInt64, math.MaxInt64)},
		{inference.DataType_TYPE_FP32, `[0,1.5,-0.1,3.4028235e+38,1e-7]`, le[float32](0, 1.5, -0.1, math.MaxFloat32, 1e-7)},
		{inference.DataType_TYPE_FP64, `[0,1.5,-0.1,1.7976931348623157e+308,5e-324]`, le[float64](0, 1.5, -0.1, math.MaxFloat64, 5e-324)},
		{inference.DataType_TYPE_STRING, `["","a\u0000b","ü€😀","quote\"back\\slash\n"]`, frameLE("", "a\x00b", "ü€😀", "quote\"back\\slash\n")},
	}
}

func TestJSONDecodeEveryDatatype(t *testing.T) {
	for _, c := range jsonCases() {
		t.Run(Name(c.dt), func(t *testing.T) {
			raw, n, err := AppendFromJSON(nil, c.dt, []byte(c.json))
			require.NoError(t, err)
			assert.Equal(t, c.raw, raw)
			var ref []any
			require.NoError(t, json.Unmarshal([]byte(c.json), &ref))
			assert.Equal(t, len(ref), n)
		})
	}
}

func TestJSONEncodeRoundTripsEveryDatatype(t *testing.T) {
	for _, c := range jsonCases() {
		t.Run(Name(c.dt), func(t *testing.T) {
			out, err := AppendJSON(nil, c.dt, c.raw)
			require.NoError(t, err)
			require.True(t, json.Valid(out), "%s", out)
			back, _, err := AppendFromJSON(nil, c.dt, out)
			require.NoError(t, err)
			assert.Equal(t, c.raw, back, "%s", out)
		})
	}
}

func TestJSONEncodeLiteral(t *testing.T) {
	for _, c := range []struct {
		dt   inference.DataType
		raw  []byte
		want string
	}{
		{inference.DataType_TYPE_INT32, le[int32](1, -2, 3), `[1,-2,3]`},
		{inference.DataType_TYPE_BOOL, []byte{0, 1, 7}, `[false,true,true]`},
		{inference.DataType_TYPE_FP32, le[float32](0.1, 1e6, 1e21, 1e-7, -0.5), `[0.1,1000000,1e+21,1e-7,-0.5]`},
		{inference.DataType_TYPE_FP64, le[float64](0.1, 123456789.125), `[0.1,123456789.125]`},
		{inference.DataType_TYPE_UINT8, nil, `[]`},
		{inference.DataType_TYPE_STRING, nil, `[]`},
		{inference.DataType_TYPE_STRING, frameLE("", "\x00\x01\"\\\n\t", "<&>"), `["","\u0000\u0001\"\\\n\t","<&>"]`},
		{inference.DataType_TYPE_STRING, frameLE("ok\xff\xfe", "é"), `["ok\ufffd\ufffd","é"]`},
	} {
		out, err := AppendJSON([]byte("x"), c.dt, c.raw)
		require.NoError(t, err)
		assert.Equal(t, "x"+c.want, string(out), "%s", Name(c.dt))
	}
}

func TestJSONDecodeNestedAndScalars(t *testing.T) {
	raw, n, err := AppendFromJSON(nil, inference.DataType_TYPE_INT32, []byte(" [ [1, 2] ,\n[3,\t4] ] "))
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	assert.Equal(t, le[int32](1, 2, 3, 4), raw)

	raw, n, err = AppendFromJSON(nil, inference.DataType_TYPE_INT32, []byte(`[[[]],[],[[5]]]`))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, le[int32](5), raw)

	raw, n, err = AppendFromJSON([]byte{9}, inference.DataType_TYPE_FP64, []byte(`2.5`))
	require.NoError(t, err, "a scalar is one element")
	assert.Equal(t, 1, n)
	assert.Equal(t, append([]byte{9}, le[float64](2.5)...), raw, "appends to dst")

	raw, n, err = AppendFromJSON(nil, inference.DataType_TYPE_STRING, []byte(`"hi"`))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.Equal(t, frameLE("hi"), raw)

	raw, n, err = AppendFromJSON(nil, inference.DataType_TYPE_FP32, []byte(`[1, -2, 3e2]`))
	require.NoError(t, err, "integers are valid floats")
	assert.Equal(t, 3, n)
	assert.Equal(t, le[float32](1, -2, 300), raw)

	deep := strings.Repeat("[", 100000) + "7" + strings.Repeat("]", 100000)
	raw, n, err = AppendFromJSON(nil, inference.DataType_TYPE_UINT8, []byte(deep))
	require.NoError(t, err, "nesting depth costs no stack")
	assert.Equal(t, 1, n)
	assert.Equal(t, []byte{7}, raw)
}

func TestJSONDecodeStringEscapes(t *testing.T) {
	for in, want := range map[string]string{
		`"\"\\\/\b\f\n\r\t"`:    "\"\\/\b\f\n\r\t",
		`"\u00e9\u20AC"`:        "é€",
		`"\ud83d\ude00"`:        "😀",
		`"\ud83d"`:              "\uFFFD",
		`"\ud83dx"`:             "\uFFFDx",
		`"\ude00\u0041"`:        "\uFFFDA",
		"\"raw\xff\xfe bytes\"": "raw\xff\xfe bytes", // kept: BYTES are bytes
		`""`:                    "",
	} {
		raw, n, err := AppendFromJSON(nil, inference.DataType_TYPE_STRING, []byte(in))
		require.NoError(t, err, in)
		require.Equal(t, 1, n)
		assert.Equal(t, frameLE(want), raw, in)
	}
}

func TestJSONDecodeErrors(t *testing.T) {
	for _, c := range []struct {
		dt   inference.DataType
		in   string
		want string
	}{
		{inference.DataType_TYPE_UINT8, `[0,256]`, "element 1 (256) is out of range for UINT8 [0, 255]"},
		{inference.DataType_TYPE_UINT8, `[-1]`, "element 0 (-1) is out of range for UINT8 [0, 255]"},
		{inference.DataType_TYPE_INT8, `[-129]`, "element 0 (-129) is out of range for INT8 [-128, 127]"},
		{inference.DataType_TYPE_INT8, `[128]`, "out of range for INT8"},
		{inference.DataType_TYPE_INT16, `[32768]`, "out of range for INT16"},
		{inference.DataType_TYPE_INT32, `[1,2,2147483648]`, "element 2 (2147483648) is out of range for INT32 [-2147483648, 2147483647]"},
		{inference.DataType_TYPE_INT32, `[-2147483649]`, "out of range for INT32"},
		{inference.DataType_TYPE_UINT16, `[65536]`, "out of range for UINT16"},
		{inference.DataType_TYPE_UINT32, `[4294967296]`, "out of range for UINT32"},
		{inference.DataType_TYPE_INT64, `[9223372036854775808]`, "out of range for INT64"},
		{inference.DataType_TYPE_INT64, `[-9223372036854775809]`, "out of range for INT64"},
		{inference.DataType_TYPE_UINT64, `[18446744073709551616]`, "out of range for UINT64"},
		{inference.DataType_TYPE_UINT64, `[99999999999999999999999]`, "out of range for UINT64"},
		{inference.DataType_TYPE_FP32, `[3.5e38]`, "element 0 (3.5e38) is out of range for FP32"},
		{inference.DataType_TYPE_FP64, `[1e309]`, "out of range for FP64"},
		{inference.DataType_TYPE_INT32, `[1.5]`, "element 0 (1.5) is not an integer, as INT32 data must be"},
		{inference.DataType_TYPE_INT32, `[1e2]`, "is not an integer"},
		{inference.DataType_TYPE_INT32, `["1"]`, "element 0 is a string, but INT32 data must be numbers"},
		{inference.DataType_TYPE_INT32, `[true]`, "element 0 is a boolean, but INT32 data must be numbers"},
		{inference.DataType_TYPE_INT32, `[null]`, "element 0 is null"},
		{inference.DataType_TYPE_INT32, `[{}]`, "element 0 is an object"},
		{inference.DataType_TYPE_BOOL, `[1]`, "element 0 is the number 1, but BOOL data must be true or false"},
		{inference.DataType_TYPE_STRING, `[1]`, "BYTES data must be strings"},
		{inference.DataType_TYPE_STRING, `["a`, "unterminated string in element 0"},
		{inference.DataType_TYPE_STRING, "[\"a\nb\"]", "control character 0x0a inside the string of element 0 must be escaped"},
		{inference.DataType_TYPE_STRING, `["\x"]`, `invalid escape '\x'`},
		{inference.DataType_TYPE_STRING, `["\u12"]`, `invalid \u escape`},
		{inference.DataType_TYPE_INT32, `[1 2]`, "expected ',' or ']' after element 0"},
		{inference.DataType_TYPE_INT32, `[1,]`, `invalid JSON value "]" in element 1`},
		{inference.DataType_TYPE_INT32, `[1,2`, "unexpected end of JSON data: 1 array(s) not closed"},
		{inference.DataType_TYPE_INT32, `[1]]`, "unexpected \"]\" after the end of the JSON data"},
		{inference.DataType_TYPE_INT32, `[1] x`, "after the end of the JSON data"},
		{inference.DataType_TYPE_INT32, ``, "unexpected end of JSON data"},
		{inference.DataType_TYPE_INT32, `[01]`, "invalid JSON number"},
		{inference.DataType_TYPE_INT32, `[-]`, "invalid JSON number"},
		{inference.DataType_TYPE_INT32, `[1.]`, "invalid JSON number"},
		{inference.DataType_TYPE_INT32, `[12abc]`, "invalid JSON number"},
		{inference.DataType_TYPE_FP32, `[NaN]`, "invalid JSON value"},
		{inference.DataType_TYPE_BOOL, `[tru]`, "invalid JSON value"},
		{inference.DataType_TYPE_BOOL, `[truex]`, "invalid JSON value"},
		{inference.DataType_TYPE_FP16, `[1]`, "FP16 data cannot be carried in JSON"},
		{inference.DataType_TYPE_BF16, `[1]`, "BF16 data cannot be carried in JSON"},
		{inference.DataType_TYPE_INVALID, `[1]`, "<invalid> data cannot be carried in JSON"},
	} {
		_, _, err := AppendFromJSON(nil, c.dt, []byte(c.in))
		require.Error(t, err, "%s %s", Name(c.dt), c.in)
		var je *JSONError
		require.ErrorAs(t, err, &je)
		assert.Contains(t, err.Error(), c.want, "%s %s", Name(c.dt), c.in)
		assert.LessOrEqual(t, je.Offset, len(c.in))
		if je.Offset >= 0 {
			assert.Equal(t, je.Msg+" (at offset "+strconv.Itoa(je.Offset)+")", err.Error())
		}
	}
}

// TestJSONDecodeErrorMessages pins whole messages and offsets, as a client reads them in a 400,
// for faults in strings, in the array structure, and in literals and numbers cut short.
func TestJSONDecodeErrorMessages(t *testing.T) {
	for _, c := range []struct {
		dt       inference.DataType
		in, want string
	}{
		{inference.DataType_TYPE_STRING, "[\"ok\",\"a", "unterminated string in element 1 (at offset 6)"},
		{inference.DataType_TYPE_STRING, "[\"ok\",\"a\\", "unterminated string in element 1 (at offset 6)"},
		{inference.DataType_TYPE_STRING, "[\"ok\",\"a\x1fb\"]", "control character 0x1f inside the string of element 1 must be escaped (at offset 8)"},
		{inference.DataType_TYPE_STRING, "[\"ok\", \"\\x\"]", "invalid escape '\\x' in the string of element 1 (at offset 8)"},
		{inference.DataType_TYPE_STRING, "[\"ok\", \"\\u12x4\"]", "invalid \\u escape in the string of element 1 (at offset 8)"},
		{inference.DataType_TYPE_STRING, "[\"\\u12", "invalid \\u escape in the string of element 0 (at offset 2)"},
		{inference.DataType_TYPE_INT32, "[\"a\\q\"]", "element 0 is a string, but INT32 data must be numbers (at offset 1)"},
		{inference.DataType_TYPE_INT32, "[[1,2],[3 4]]", "expected ',' or ']' after element 2, got \"4]]\" (at offset 10)"},
		{inference.DataType_TYPE_INT32, "[[1,2],[3,", "unexpected end of JSON data (at offset 10)"},
		{inference.DataType_TYPE_INT32, "[[1,2],[3,4]", "unexpected end of JSON data: 1 array(s) not closed (at offset 12)"},
		{inference.DataType_TYPE_INT32, "[[] 1]", "expected ',' or ']' after element -1, got \"1]\" (at offset 4)"},
		{inference.DataType_TYPE_INT32, "[1,12abc]", "invalid JSON number \"12abc]\" in element 1 (at offset 3)"},
		{inference.DataType_TYPE_BOOL, "[true, truex]", "invalid JSON value \"truex]\" in element 1 (at offset 7)"},
		{inference.DataType_TYPE_BOOL, "[true, nullx]", "element 1 is null, but BOOL data must be true or false (at offset 7)"},
		{inference.DataType_TYPE_UINT8, "[1, {\"a\":1}]", "element 1 is an object, but UINT8 data must be numbers (at offset 4)"},
	} {
		_, _, err := AppendFromJSON(nil, c.dt, []byte(c.in))
		assert.EqualError(t, err, c.want, "%s %q", Name(c.dt), c.in)
	}
}

func TestJSONEncodeErrors(t *testing.T) {
	for _, c := range []struct {
		dt   inference.DataType
		raw  []byte
		want string
	}{
		{inference.DataType_TYPE_FP32, le[float32](1, float32(math.NaN())), "element 1 is NaN, which JSON cannot represent"},
		{inference.DataType_TYPE_FP64, le[float64](math.Inf(-1)), "element 0 is -Inf, which JSON cannot represent"},
		{inference.DataType_TYPE_FP16, []byte{0, 0}, "FP16 data cannot be carried in JSON"},
		{inference.DataType_TYPE_BF16, []byte{0, 0}, "BF16 data cannot be carried in JSON"},
		{inference.DataType_TYPE_INT32, []byte{1, 2, 3}, "3 bytes is not a whole number of INT32 elements"},
		{inference.DataType_TYPE_STRING, []byte{5, 0, 0, 0, 'a'}, "malformed BYTES data"},
	} {
		_, err := AppendJSON(nil, c.dt, c.raw)
		require.Error(t, err, Name(c.dt))
		assert.Contains(t, err.Error(), c.want)
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "tab\there", "\x00\x1f\x7f", `"\`, "<script>&</script>", "ü€😀", "\u2028\u2029", "bad\xffutf8\xc3"} {
		out := AppendJSONString(nil, s)
		require.True(t, json.Valid(out), "%q -> %s", s, out)
		var back string
		require.NoError(t, json.Unmarshal(out, &back))
		// encoding/json turns each invalid byte into its own U+FFFD; so must we.
		var ref string
		refJSON, _ := json.Marshal(s)
		require.NoError(t, json.Unmarshal(refJSON, &ref))
		assert.Equal(t, ref, back, "%q", s)
		assert.Equal(t, string(out), string(AppendJSONString(nil, []byte(s))), "string and []byte agree")
	}
}

// TestJSONDecodeAllocatesFromDataNotClaims checks that decoding a long array allocates about its
// raw size, growing only with the data.
func TestJSONDecodeAllocatesFromDataNotClaims(t *testing.T) {
	var b strings.Builder
	b.WriteByte('[')
	for i := range 100000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("12345")
	}
	b.WriteByte(']')
	data := []byte(b.String())
	dst := make([]byte, 0, 400000)
	allocs := testing.AllocsPerRun(10, func() {
		_, _, err := AppendFromJSON(dst[:0], inference.DataType_TYPE_INT32, data)
		if err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "decoding into a large enough dst allocates nothing")
}

// FuzzJSONData feeds arbitrary bytes to the decoder as every datatype. Whatever it accepts must be
// valid JSON with as many scalars as it reports elements (checked against encoding/json), and must
// survive encode-decode unchanged; whatever it rejects must be a *JSONError within the data.
func FuzzJSONData(f *testing.F) {
	for _, c := range jsonCases() {
		f.Add(byte(c.dt), []byte(c.json))
	}
	for _, s := range []string{`[[1,2],[3,4]]`, `7`, `[]`, `[[]]`, `[1,]`, `[-0]`, `["\ud83d\ude00"]`, `[1e400]`, `[0.000001]`, "[\"\xff\"]", `[true, false]`, `[18446744073709551615]`} {
		for dt := range inference.DataType_TYPE_BF16 + 1 {
			f.Add(byte(dt), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, dtByte byte, data []byte) {
		dt := inference.DataType(dtByte % byte(inference.DataType_TYPE_BF16+1))
		raw, n, err := AppendFromJSON(nil, dt, data)
		if err != nil {
			var je *JSONError
			if !errors.As(err, &je) {
				t.Fatalf("error %T, want *JSONError", err)
			}
			if je.Offset < -1 || je.Offset > len(data) || je.Offset == -1 && dt != inference.DataType_TYPE_FP16 && dt != inference.DataType_TYPE_BF16 && Valid(dt) {
				t.Fatalf("offset %d outside %d bytes of data", je.Offset, len(data))
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		var ref any
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatal(err)
		}
		if got := countScalars(ref); got != n {
			t.Fatalf("decoded %d elements, encoding/json sees %d in %q", n, got, data)
		}
		if size := ElementSize(dt); size > 0 && len(raw) != n*size {
			t.Fatalf("%d elements of %s in %d bytes", n, Name(dt), len(raw))
		}
		out, err := AppendJSON(nil, dt, raw)
		if err != nil {
			t.Fatalf("re-encoding %x: %v", raw, err)
		}
		back, m, err := AppendFromJSON(nil, dt, out)
		if err != nil || m != n {
			t.Fatalf("decoding own output %q: %d elements, %v", out, m, err)
		}
		if dt == inference.DataType_TYPE_STRING {
			elems, _ := SplitBytes(raw)
			for _, e := range elems {
				if !utf8.Valid(e) {
					return // invalid UTF-8 is replaced on the way out, by design
				}
			}
		}
		if !bytes.Equal(back, raw) {
			t.Fatalf("round trip of %q: %x, then %q, then %x", data, raw, out, back)
		}
	})
}

func countScalars(v any) int {
	if a, ok := v.([]any); ok {
		n := 0
		for _, x := range a {
			n += countScalars(x)
		}
		return n
	}
	return 1
}
