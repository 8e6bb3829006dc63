package suite

import (
	"encoding/json"
	"testing"

	"github.com/infergate/infergate/gen/inference"
)

// FuzzAnswerDecoders feeds the decoders of a server's answers (BYTES framing, REST JSON data,
// output sizes) arbitrary bytes: a malformed answer must give an error or a verdict, never a panic
// or an allocation beyond the input's size.
func FuzzAnswerDecoders(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 'a', 'b', 'c'}, "BYTES")
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, "BYTES")
	f.Add([]byte(`[[1,2],[3,4]]`), "INT32")
	f.Add([]byte(`[true, 1, "x", null]`), "BOOL")
	f.Add([]byte(`[1e400]`), "FP32")
	f.Add([]byte(`["a", ["b"]]`), "BYTES")
	f.Fuzz(func(t *testing.T, data []byte, dt string) {
		if elems, err := unframe(data); err == nil {
			n := 0
			for _, e := range elems {
				n += len(e) + 4
			}
			if n != len(data) {
				t.Fatalf("unframe: %d framed bytes of %d", n, len(data))
			}
		}
		if json.Valid(data) {
			_, _ = jsonToRaw(dt, data)
		}
		o := &inference.ModelInferResponse_InferOutputTensor{Name: "o", Datatype: dt, Shape: []int64{int64(len(data) % 7), -1 + int64(len(data)%3)}}
		_ = outputSizeProblem(o, data)
	})
}
