package registry

import (
	"testing"

	"github.com/infergate/infergate/gen/inference"
	registryv1 "github.com/infergate/infergate/gen/infergate/registry/v1"
	tensorv1 "github.com/infergate/infergate/gen/infergate/tensor/v1"
	"google.golang.org/protobuf/proto"
)

func fuzzSeedBackends(f *testing.F) [][]byte {
	triton, err := proto.Marshal(&inference.ModelConfig{Name: "t", Output: []*inference.ModelOutput{{Name: "o", DataType: inference.DataType_TYPE_FP32, Dims: []int64{1}}}})
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, b := range []*registryv1.Backend{
		chat("llama", "http://127.0.0.1:8000"),
		normalize(&registryv1.Backend{ModelName: "t", ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR, Url: "https://h:8001", TensorModelConfig: tensorDesc("t")}),
		normalize(&registryv1.Backend{ModelName: "t", ModelType: registryv1.ModelType_MODEL_TYPE_TENSOR, Url: "http://h", TensorModelConfig: &tensorv1.TensorModelConfig{TritonModelConfig: triton}}),
		{ModelName: "e", ModelType: registryv1.ModelType_MODEL_TYPE_EMBEDDINGS, ModelInput: registryv1.ModelInput_MODEL_INPUT_TOKENS, Url: "http://h/base", Priority: 2},
	} {
		p, err := encodeBackend(b)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// FuzzParseChange: change messages come from a Redis channel anyone with access can publish on.
// Parsing and decoding never panic; what parses re-encodes to the same message, and a decoded
// backend passes validation.
func FuzzParseChange(f *testing.F) {
	id := "0123456789abcdef0123456789abcdef"
	for _, p := range fuzzSeedBackends(f) {
		f.Add("+1:" + id + ":" + string(p))
		f.Add("~42:" + id + ":" + string(p))
	}
	for _, s := range []string{"-7:" + id + ":", "", "+", "+1", "+1:", "+1:" + id, "-1:" + id + ":x", "?1:" + id + ":", "+-1:" + id + ":",
		"+99999999999999999999:" + id + ":", "+1:" + id[:31] + "g:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		c, err := parseChange(msg)
		if err != nil {
			return
		}
		if got := encodeChange(c); got != msg {
			t.Fatalf("re-encoded %q as %q", msg, got)
		}
		if !validLeaseID(c.leaseID) || c.seq <= 0 {
			t.Fatalf("accepted %+v", c)
		}
		if c.op == '-' {
			return
		}
		b, err := decodeBackend(c.payload)
		if err != nil {
			return
		}
		if err := ValidateBackend(b); err != nil {
			t.Fatalf("decoded backend fails validation: %v", err)
		}
	})
}

// FuzzDecodeBackend: stored backends are read back from Redis. Decoding never panics, and what
// decodes is valid, survives normalization and re-encodes to bytes that decode the same.
func FuzzDecodeBackend(f *testing.F) {
	for _, p := range fuzzSeedBackends(f) {
		f.Add(p)
		f.Add(p[:len(p)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := decodeBackend(string(payload))
		if err != nil {
			return
		}
		if err := ValidateBackend(normalize(b)); err != nil {
			t.Fatalf("normalized backend fails validation: %v", err)
		}
		p, err := encodeBackend(b)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeBackend(string(p))
		if err != nil {
			t.Fatalf("re-encoded backend does not decode: %v", err)
		}
		if !proto.Equal(b, again) {
			t.Fatalf("round trip changed the backend")
		}
	})
}
