package kserve

import (
	"context"
	"errors"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/models/builtin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// fuzzModels are the built-in models a fuzzed request that names no known model is sent to,
// chosen by the fuzzer's second argument.
var fuzzModels = []string{"simple", "simple_string", "identity_fp32", "simple_sequence", "simple_int8", "simple_identity"}

func fuzzRegistry(tb testing.TB) *engines.Registry {
	tb.Helper()
	reg := engines.NewRegistry()
	require.NoError(tb, builtin.Register(reg))
	return reg
}

func fuzzInput(name, datatype string, shape ...int64) *inference.ModelInferRequest_InferInputTensor {
	return &inference.ModelInferRequest_InferInputTensor{Name: name, Datatype: datatype, Shape: shape}
}

func fuzzInt32s(n int, f func(int) int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func fuzzStrings(n int, s string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// fuzzSeeds are valid requests for several built-in models and malformed ones around every check
// prepare makes.
func fuzzSeeds() map[string]*inference.ModelInferRequest {
	ints := func(n int) []byte { return tensor.Bytes(fuzzInt32s(n, func(i int) int32 { return int32(i) })) }
	simpleRaw := func(shape ...int64) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "simple", Id: "1",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT0", "INT32", shape...), fuzzInput("INPUT1", "INT32", shape...)},
			RawInputContents: [][]byte{ints(16), ints(16)},
		}
	}
	stringRaw := func(in0 []byte, shape ...int64) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "simple_string",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT0", "BYTES", shape...), fuzzInput("INPUT1", "BYTES", 1, 16)},
			RawInputContents: [][]byte{in0, tensor.JoinBytes(fuzzStrings(16, "7"))},
		}
	}
	fp32 := func(data []byte, shape ...int64) *inference.ModelInferRequest {
		return &inference.ModelInferRequest{ModelName: "identity_fp32",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT0", "FP32", shape...)},
			RawInputContents: [][]byte{data},
		}
	}
	typed := func(model, dt string, c *inference.InferTensorContents, shape ...int64) *inference.ModelInferRequest {
		r := &inference.ModelInferRequest{ModelName: model}
		for _, name := range []string{"INPUT0", "INPUT1"} {
			in := fuzzInput(name, dt, shape...)
			in.Contents = c
			r.Inputs = append(r.Inputs, in)
		}
		return r
	}
	huge := append([]byte{0xff, 0xff, 0xff, 0xff}, "1234"...)

	scheduled := simpleRaw(1, 16) // the request parameters the dynamic batcher reads
	scheduled.Parameters = map[string]*inference.InferParameter{
		"priority": {ParameterChoice: &inference.InferParameter_Uint64Param{Uint64Param: 2}},
		"timeout":  {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 1000}},
	}
	seeds := map[string]*inference.ModelInferRequest{
		"simple priority, timeout": scheduled,
		"simple raw":               simpleRaw(1, 16),
		"simple raw batch 0":       {ModelName: "simple", Inputs: simpleRaw(0, 16).Inputs, RawInputContents: [][]byte{{}, {}}},
		"simple typed":             typed("simple", "INT32", &inference.InferTensorContents{IntContents: fuzzInt32s(16, func(i int) int32 { return int32(i) })}, 1, 16),
		"simple_int8 typed":        typed("simple_int8", "INT8", &inference.InferTensorContents{IntContents: fuzzInt32s(16, func(i int) int32 { return int32(i) * 100 })}, 1, 16),
		"simple_string raw":        stringRaw(tensor.JoinBytes(fuzzStrings(16, "12")), 1, 16),
		"simple_string typed":      typed("simple_string", "BYTES", &inference.InferTensorContents{BytesContents: [][]byte{[]byte("1"), []byte("2"), []byte("3"), []byte("4"), []byte("5"), []byte("6"), []byte("7"), []byte("8"), []byte("9"), []byte("10"), []byte("11"), []byte("12"), []byte("13"), []byte("14"), []byte("15"), []byte("16")}}, 1, 16),
		"simple_string not int":    stringRaw(tensor.JoinBytes(fuzzStrings(16, "x\x00\xff")), 1, 16),
		"identity_fp32 raw":        fp32(tensor.Bytes([]float32{1, 2, 3, float32(math.NaN())}), 4),
		"identity_fp32 typed": {ModelName: "identity_fp32", Inputs: []*inference.ModelInferRequest_InferInputTensor{{
			Name: "INPUT0", Datatype: "FP32", Shape: []int64{2}, Contents: &inference.InferTensorContents{Fp32Contents: []float32{1, 2}},
		}}},
		"identity_fp32 empty": fp32([]byte{}, 0),
		"simple_identity": {ModelName: "simple_identity",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT0", "BYTES", 1, 3)},
			RawInputContents: [][]byte{tensor.JoinBytes([]string{"", "\x00", "abc"})},
		},
		"simple_sequence start": {ModelName: "simple_sequence",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT", "INT32", 1, 1)},
			RawInputContents: [][]byte{ints(1)},
			Parameters: map[string]*inference.InferParameter{
				paramSequenceID:    {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: 7}},
				paramSequenceStart: {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
				"custom":           {ParameterChoice: &inference.InferParameter_StringParam{StringParam: "x"}},
			},
		},

		// Malformed.
		"BYTES length indicator cut":   stringRaw(append(tensor.JoinBytes(fuzzStrings(15, "1")), 1, 0), 1, 16),
		"BYTES element truncated":      stringRaw(append(tensor.JoinBytes(fuzzStrings(15, "1")), 9, 0, 0, 0, '1'), 1, 16),
		"BYTES huge declared length":   stringRaw(huge, 1, 16),
		"BYTES huge declared, 1 elem":  {ModelName: "simple_identity", Inputs: []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT0", "BYTES", 1, 1)}, RawInputContents: [][]byte{huge}},
		"BYTES wrong count":            stringRaw(tensor.JoinBytes(fuzzStrings(15, "1")), 1, 16),
		"-1 dims":                      simpleRaw(-1, 16),
		"min int64 dims":               simpleRaw(1, math.MinInt64),
		"shape 2^40 x 2^40":            fp32(huge, 1<<40, 1<<40),
		"string shape 2^40 x 2^40":     stringRaw(huge, 1<<40, 1<<40),
		"shape 2^31, 8 bytes":          fp32(huge, 1<<31),
		"shape 2^62, 8 bytes":          fp32(huge, 1<<62),
		"shape max int64, 8 bytes":     fp32(huge, math.MaxInt64),
		"shape 2^62, no bytes":         fp32([]byte{}, 1<<62), // 2^62 * 4 bytes wraps to 0
		"shape 2^62+2, too many":       fp32(huge, 1<<62+2),   // beyond ElementCount's bound
		"identity BYTES shape 2^62":    {ModelName: "simple_identity", Inputs: []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT0", "BYTES", 1, 1<<62)}, RawInputContents: [][]byte{huge}},
		"raw and typed mixed":          {ModelName: "identity_fp32", Inputs: fp32(nil).Inputs, RawInputContents: [][]byte{huge}},
		"fp32_contents for INT32":      typed("simple", "INT32", &inference.InferTensorContents{Fp32Contents: make([]float32, 16)}, 1, 16),
		"typed data for FP16":          typed("simple", "FP16", &inference.InferTensorContents{Fp32Contents: make([]float32, 16)}, 1, 16),
		"unknown datatype with typed":  typed("simple", "FOO", &inference.InferTensorContents{IntContents: make([]int32, 16)}, 1, 16),
		"surplus raw entry":            {ModelName: "identity_fp32", Inputs: fp32(nil, 0).Inputs, RawInputContents: [][]byte{{}, {}}},
		"missing raw entry":            {ModelName: "simple", Inputs: simpleRaw(1, 16).Inputs, RawInputContents: [][]byte{ints(16)}},
		"duplicate input":              {ModelName: "identity_fp32", Inputs: append(fp32(nil, 0).Inputs, fuzzInput("INPUT0", "FP32", 0)), RawInputContents: [][]byte{{}, {}}},
		"unknown output":               {ModelName: "simple", Inputs: simpleRaw(1, 16).Inputs, RawInputContents: simpleRaw(1, 16).RawInputContents, Outputs: []*inference.ModelInferRequest_InferRequestedOutputTensor{{Name: "NOPE"}}},
		"reserved parameter":           {ModelName: "identity_fp32", Inputs: fp32(nil, 0).Inputs, RawInputContents: [][]byte{{}}, Parameters: map[string]*inference.InferParameter{"triton_x": {}}},
		"parameter without value":      {ModelName: "identity_fp32", Inputs: fp32(nil, 0).Inputs, RawInputContents: [][]byte{{}}, Parameters: map[string]*inference.InferParameter{"k": {}}},
		"negative priority":            {ModelName: "identity_fp32", Inputs: fp32(nil, 0).Inputs, RawInputContents: [][]byte{{}}, Parameters: map[string]*inference.InferParameter{paramPriority: {ParameterChoice: &inference.InferParameter_Int64Param{Int64Param: -1}}}},
		"unknown model, falls back":    {ModelName: "nope", Inputs: simpleRaw(1, 16).Inputs, RawInputContents: simpleRaw(1, 16).RawInputContents},
		"batch over max":               simpleRaw(9, 16),
		"no inputs":                    {ModelName: "simple"},
		"input with no name or shape":  {ModelName: "simple", Inputs: []*inference.ModelInferRequest_InferInputTensor{{}}},
		"nil contents message present": {ModelName: "identity_fp32", Inputs: []*inference.ModelInferRequest_InferInputTensor{{Name: "INPUT0", Datatype: "FP32", Shape: []int64{0}, Contents: &inference.InferTensorContents{}}}},
	}
	seeds["raw and typed mixed"].Inputs[0].Contents = &inference.InferTensorContents{Fp32Contents: []float32{1}}
	return seeds
}

// FuzzModelInferRequest feeds arbitrary bytes, decoded as a ModelInferRequest, through prepare for
// a built-in model: it must never panic, and every rejection is INVALID_ARGUMENT. A request prepare
// accepts must be consistent with the model's config, and the stateless models must run it.
func FuzzModelInferRequest(f *testing.F) {
	seeds := fuzzSeeds()
	for _, name := range slices.Sorted(maps.Keys(seeds)) { // stable seed#N numbering
		b, err := proto.Marshal(seeds[name])
		require.NoError(f, err)
		f.Add(b, uint8(0))
	}
	f.Add([]byte{}, uint8(1))
	f.Add([]byte{0x0a, 0x03, 'f', 'o', 'o'}, uint8(2)) // model_name "foo"
	f.Add([]byte{0xff, 0xff, 0xff}, uint8(3))          // not a message
	reg := fuzzRegistry(f)
	f.Fuzz(func(t *testing.T, data []byte, pick uint8) {
		req := &inference.ModelInferRequest{}
		if err := proto.Unmarshal(data, req); err != nil {
			return
		}
		e := reg.Lookup(req.GetModelName())
		if e == nil {
			req.ModelName = fuzzModels[int(pick)%len(fuzzModels)]
			e = reg.Lookup(req.ModelName)
		}
		r, opts, err := prepare(e, req, shmScope{})
		if err != nil {
			requireInvalidArgument(t, err)
			return
		}
		checkPrepared(t, e, r, opts)
	})
}

func requireInvalidArgument(t *testing.T, err error) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %T %q is not a *connect.Error", err, err)
	}
	// The fuzz targets prepare without shared memory: a request naming a region is refused as
	// an extension that is off.
	if code := connect.CodeOf(err); code != connect.CodeInvalidArgument && (code != connect.CodeUnimplemented || !strings.Contains(err.Error(), "system_shared_memory")) {
		t.Fatalf("error code %v, want invalid_argument: %v", code, err)
	}
}

// checkPrepared checks a request prepare accepted against e's config, then runs it on the models
// that are cheap and safe to run from a fuzzer (non-decoupled; sequence models on a fresh registry
// so their sequence state does not leak between inputs).
func checkPrepared(t *testing.T, e *engines.Entry, r *engines.Request, opts callOptions) {
	t.Helper()
	cfg := e.Config()
	for _, in := range r.Inputs {
		idx := -1
		for i, mi := range cfg.GetInput() {
			if mi.GetName() == in.Name {
				idx = i
			}
		}
		if idx < 0 {
			t.Fatalf("accepted unknown input %q", in.Name)
		}
		if dt := cfg.GetInput()[idx].GetDataType(); in.Datatype != dt {
			t.Fatalf("accepted input %q as %s, model wants %s", in.Name, tensor.Name(in.Datatype), tensor.Name(dt))
		}
		n, ok := tensor.ElementCount(in.Shape)
		if !ok {
			t.Fatalf("accepted input %q with shape %v", in.Name, in.Shape)
		}
		if size := tensor.ElementSize(in.Datatype); size > 0 {
			// Division, not n*size, which a hostile shape can wrap around to len(in.Data).
			if l := int64(len(in.Data)); l%int64(size) != 0 || l/int64(size) != n {
				t.Fatalf("accepted input %q: %d bytes for %d elements of %d", in.Name, len(in.Data), n, size)
			}
		} else if got, err := tensor.CountBytes(in.Data); err != nil || int64(got) != n {
			t.Fatalf("accepted input %q: %d BYTES elements (%v) for shape %v", in.Name, got, err, in.Shape)
		}
	}
	if e.Decoupled() {
		return
	}
	if cfg.GetSequenceBatching() != nil {
		e = fuzzRegistry(t).Lookup(e.Name())
	}
	var res *engines.Response
	err := execute(context.Background(), e, r, callOptions{}, func(x *engines.Response) error {
		if res != nil {
			t.Fatalf("model %s sent two responses", e.Name())
		}
		res = x
		return nil
	})
	if err != nil {
		// Bad values the config cannot express (a BYTES element that is not a number, a sequence
		// request without START) are the client's fault.
		requireInvalidArgument(t, err)
		return
	}
	if res == nil {
		t.Fatalf("model %s sent no response", e.Name())
	}
	if _, err := encode(e, r, res, opts); err != nil {
		t.Fatalf("encode: %v", err)
	}
}

// TestFuzzSeedsExpectations pins what each hand-written seed is expected to do, so the corpus
// keeps covering both the accepting and the rejecting paths.
func TestFuzzSeedsExpectations(t *testing.T) {
	reg := fuzzRegistry(t)
	accepted := map[string]bool{
		"simple raw": true, "simple raw batch 0": true, "simple typed": true, "simple_int8 typed": true,
		"simple_string raw": true, "simple_string typed": true, "simple_string not int": true,
		"identity_fp32 raw": true, "identity_fp32 typed": true, "identity_fp32 empty": true,
		"simple_identity": true, "simple_sequence start": true, "nil contents message present": true,
		"unknown model, falls back": true, "simple priority, timeout": true,
	}
	for name, req := range fuzzSeeds() {
		t.Run(name, func(t *testing.T) {
			e := reg.Lookup(req.GetModelName())
			if e == nil {
				e = reg.Lookup(fuzzModels[0])
			}
			require.NotNil(t, e)
			r, opts, err := prepare(e, req, shmScope{})
			if accepted[name] {
				require.NoError(t, err)
				checkPrepared(t, e, r, opts)
				if name == "simple priority, timeout" {
					assert.Equal(t, uint64(2), r.Priority)
					assert.Equal(t, time.Millisecond, r.Timeout)
				}
				return
			}
			require.Error(t, err)
			assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
		})
	}
}

// TestPrepareHugeShapeAllocatesLittle: a shape claiming 2^31 FP32 elements with 8 bytes of data is
// rejected by comparing the claim with the bytes present, without allocating for the claim.
func TestPrepareHugeShapeAllocatesLittle(t *testing.T) {
	reg := fuzzRegistry(t)
	cases := []struct {
		name  string
		model string
		req   *inference.ModelInferRequest
		msg   string
	}{
		{"FP32 shape [2^31], 8 bytes", "identity_fp32", &inference.ModelInferRequest{ModelName: "identity_fp32",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT0", "FP32", 1<<31)},
			RawInputContents: [][]byte{make([]byte, 8)},
		}, "input byte size mismatch for input 'INPUT0' for model 'identity_fp32'. Expected " + strconv.FormatInt(4<<31, 10) + ", got 8"},
		{"BYTES shape [1, 2^40], length 0xFFFFFFFF", "simple_identity", &inference.ModelInferRequest{ModelName: "simple_identity",
			Inputs:           []*inference.ModelInferRequest_InferInputTensor{fuzzInput("INPUT0", "BYTES", 1, 1<<40)},
			RawInputContents: [][]byte{{0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4}},
		}, "incomplete string for inference input 'INPUT0' for model 'simple_identity', expecting string of length 4294967295 but only 4 bytes available"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := reg.Lookup(tc.model)
			require.NotNil(t, e)
			_, _, err := prepare(e, tc.req, shmScope{})
			require.Error(t, err)
			assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
			var ce *connect.Error
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.msg, ce.Message())

			allocs := testing.AllocsPerRun(100, func() { _, _, err = prepare(e, tc.req, shmScope{}) })
			require.Error(t, err)
			assert.LessOrEqual(t, allocs, 20.0, "allocations per rejected request")

			perCall := bytesPerCall(200, func() { _, _, _ = prepare(e, tc.req, shmScope{}) })
			assert.Less(t, perCall, uint64(4096), "bytes allocated per rejected request")
			t.Logf("%.0f allocations, %d bytes per rejected request", allocs, perCall)
		})
	}
}

// bytesPerCall returns the average heap bytes one call of f allocates.
func bytesPerCall(runs int, f func()) uint64 {
	f()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}
