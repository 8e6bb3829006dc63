package embed

import (
	"math"
	"testing"
)

// FuzzParseEmbeddings feeds arbitrary response bodies to the parser: it must
// never panic, and whatever it accepts must be n finite, unit-length vectors
// of one length within the bound.
func FuzzParseEmbeddings(f *testing.F) {
	seeds := []string{
		`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-0.2,0.3]}],"model":"m","usage":{"prompt_tokens":2,"total_tokens":2}}`,
		`{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}`,
		`{"data":[{"index":0,"embedding":[1e38,1e38]},{"index":1,"embedding":[-1e-45,1]}]}`,
		`{"data":[{"index":0,"embedding":"AAAAAA=="}]}`,
		`{"data":[{"index":-1,"embedding":[1]}]}`,
		`{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}`,
		`{"error":{"message":"nope","type":"invalid_request_error"}}`,
		`{"data":null}`,
		`[]`,
		``,
	}
	for i, s := range seeds {
		f.Add([]byte(s), uint8(i%3))
	}
	f.Fuzz(func(t *testing.T, body []byte, n8 uint8) {
		n := int(n8%4) + 1
		const maxDim = 16
		vecs, err := parseEmbeddings(body, n, maxDim)
		if err != nil {
			return
		}
		if len(vecs) != n {
			t.Fatalf("%d vectors, want %d", len(vecs), n)
		}
		for i, v := range vecs {
			if len(v) != len(vecs[0]) || len(v) < 1 || len(v) > maxDim {
				t.Fatalf("vector %d has length %d", i, len(v))
			}
			var s float64
			for _, f := range v {
				if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
					t.Fatalf("vector %d not finite", i)
				}
				s += float64(f) * float64(f)
			}
			if math.Abs(s-1) > 1e-3 {
				t.Fatalf("vector %d squared norm %v", i, s)
			}
		}
	})
}
