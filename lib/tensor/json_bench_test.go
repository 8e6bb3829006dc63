package tensor

import (
	"strconv"
	"strings"
	"testing"

	"github.com/infergate/infergate/gen/inference"
)

// BenchmarkJSONDecode: KServe REST tensor data to raw bytes, for the shapes clients send: a flat
// INT32 array, an FP32 image-like [4][256] array, BYTES strings (prompts, some escaped), a BOOL
// mask, and a small INT32 input.
func BenchmarkJSONDecode(b *testing.B) {
	var ints, floats, strs strings.Builder
	ints.WriteByte('[')
	for i := range 4096 {
		if i > 0 {
			ints.WriteByte(',')
		}
		ints.WriteString(strconv.Itoa(i * 7919 % 100000))
	}
	ints.WriteByte(']')
	floats.WriteByte('[')
	for r := range 4 {
		if r > 0 {
			floats.WriteByte(',')
		}
		floats.WriteByte('[')
		for c := range 256 {
			if c > 0 {
				floats.WriteString(", ")
			}
			floats.WriteString(strconv.FormatFloat(float64(r*256+c)*0.0173-3.5, 'g', -1, 32))
		}
		floats.WriteByte(']')
	}
	floats.WriteByte(']')
	strs.WriteByte('[')
	for i := range 64 {
		if i > 0 {
			strs.WriteByte(',')
		}
		if i%4 == 0 {
			strs.WriteString(`"Line one\nLine \"two\"\tcaf\u00e9 \ud83d\ude00 and some more plain text to copy"`)
		} else {
			strs.WriteString(`"The gateway decodes BYTES elements as they come: plain text copied in one append."`)
		}
	}
	strs.WriteByte(']')
	for _, c := range []struct {
		name string
		dt   inference.DataType
		data string
	}{
		{"INT32x4096", inference.DataType_TYPE_INT32, ints.String()},
		{"FP32x4x256", inference.DataType_TYPE_FP32, floats.String()},
		{"BYTESx64", inference.DataType_TYPE_STRING, strs.String()},
		{"BOOLx1024", inference.DataType_TYPE_BOOL, "[" + strings.Repeat("true,false,", 511) + "true,false]"},
		{"INT32x16", inference.DataType_TYPE_INT32, "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]"}, // the "simple" model's input
	} {
		data := []byte(c.data)
		dst := make([]byte, 0, 1<<16)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := AppendFromJSON(dst[:0], c.dt, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJSONEncode: raw BYTES elements to a JSON array (AppendJSONString per element), plain
// text and text with characters to escape.
func BenchmarkJSONEncode(b *testing.B) {
	plain := make([]string, 64)
	mixed := make([]string, 64)
	for i := range plain {
		plain[i] = "The gateway writes BYTES elements back as JSON strings, most of them plain text."
		mixed[i] = "Line one\nLine \"two\"\tcafé 😀 \\ and <b>some</b> more text \x01 to escape"
	}
	for _, c := range []struct {
		name  string
		elems []string
	}{{"plain", plain}, {"mixed", mixed}} {
		raw := frameLE(c.elems...)
		dst := make([]byte, 0, 1<<16)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AppendJSON(dst[:0], inference.DataType_TYPE_STRING, raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
