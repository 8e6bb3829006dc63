package builtin_test

import (
	"context"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/lib/tensor"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/models/builtin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite testdata/*.textproto from the built-in models")

// The built-ins' ModelConfig and ModelMetadata are Triton-compatible contracts: testdata holds
// them as the hand-written models declared them, and every built-in, whether hand-written or
// generated from schema/infergate/builtin, must match them exactly (proto.Equal), in the same
// registration order.
func TestBuiltinConfigsAndMetadataUnchanged(t *testing.T) {
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	var names []string
	for _, e := range reg.Entries() {
		names = append(names, e.Name())
		for _, part := range []struct {
			kind string
			msg  proto.Message
			want proto.Message
		}{
			{"config", e.Config(), new(inference.ModelConfig)},
			{"metadata", e.Metadata(), new(inference.ModelMetadataResponse)},
		} {
			path := filepath.Join("testdata", e.Name()+"."+part.kind+".textproto")
			if *update {
				b, err := prototext.MarshalOptions{Multiline: true}.Marshal(part.msg)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(path, b, 0o644))
			}
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, prototext.Unmarshal(b, part.want))
			require.True(t, proto.Equal(part.want, part.msg), "%s %s differs from %s:\n got %v\nwant %v", e.Name(), part.kind, path, part.msg, part.want)
		}
	}
	require.Equal(t, []string{"simple", "simple_int8", "simple_string", "simple_identity", "simple_sequence",
		"simple_dyna_sequence", "repeat_int32", "square_int32", "identity_fp32"}, names)
}

// run validates and executes one request on a built-in, as the adapters do, and returns every
// response it sends.
func run(t *testing.T, model string, req *engines.Request) ([]*engines.Response, error) {
	t.Helper()
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	e, err := reg.Resolve(model, "")
	require.NoError(t, err)
	if err := e.Validate(req); err != nil {
		return nil, err
	}
	var got []*engines.Response
	err = e.Execute(context.Background(), req, func(r *engines.Response) error {
		got = append(got, r)
		return nil
	})
	return got, err
}

func in(name string, dt inference.DataType, shape []int64, data []byte) engines.Tensor {
	return engines.Tensor{Name: name, Datatype: dt, Shape: shape, Data: data}
}

func out(name string, dt inference.DataType, shape []int64, data []byte) engines.Tensor {
	return in(name, dt, shape, data)
}

func strs(v ...string) []byte {
	var b []byte
	for _, s := range v {
		b = tensor.AppendBytes(b, []byte(s))
	}
	return b
}

// The built-ins' results and error messages, exactly, whatever implements them.
func TestBuiltinResults(t *testing.T) {
	const (
		i8  = inference.DataType_TYPE_INT8
		i32 = inference.DataType_TYPE_INT32
		u32 = inference.DataType_TYPE_UINT32
		str = inference.DataType_TYPE_STRING
		f32 = inference.DataType_TYPE_FP32
	)
	seq16 := func(f func(i int) int32) []int32 {
		v := make([]int32, 16)
		for i := range v {
			v[i] = f(i)
		}
		return v
	}
	i8s := func(v []int32) []byte {
		b := make([]byte, len(v))
		for i, x := range v {
			b[i] = byte(int8(x))
		}
		return b
	}
	b16 := []int64{1, 16}
	t.Run("simple wraps in INT32", func(t *testing.T) {
		a, b := seq16(func(i int) int32 { return math.MaxInt32 - int32(i) }), seq16(func(int) int32 { return 2 })
		got, err := run(t, "simple", &engines.Request{Inputs: []engines.Tensor{
			in("INPUT0", i32, b16, tensor.Bytes(a)), in("INPUT1", i32, b16, tensor.Bytes(b))}})
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, []engines.Tensor{
			out("OUTPUT0", i32, b16, tensor.Bytes(seq16(func(i int) int32 { return math.MaxInt32 - int32(i) + 2 }))),
			out("OUTPUT1", i32, b16, tensor.Bytes(seq16(func(i int) int32 { return math.MaxInt32 - int32(i) - 2 }))),
		}, got[0].Outputs)
	})
	t.Run("simple_int8 wraps in INT8", func(t *testing.T) {
		a, b := seq16(func(i int) int32 { return 120 + int32(i%8) }), seq16(func(i int) int32 { return -int32(i * 8) })
		got, err := run(t, "simple_int8", &engines.Request{Inputs: []engines.Tensor{
			in("INPUT0", i8, b16, i8s(a)), in("INPUT1", i8, b16, i8s(b))}})
		require.NoError(t, err)
		sum, diff := make([]int32, 16), make([]int32, 16)
		for i := range a {
			sum[i], diff[i] = int32(int8(a[i])+int8(b[i])), int32(int8(a[i])-int8(b[i]))
		}
		require.Equal(t, int32(-127), diff[1], "121 - -8 wraps")
		assert.Equal(t, []engines.Tensor{out("OUTPUT0", i8, b16, i8s(sum)), out("OUTPUT1", i8, b16, i8s(diff))}, got[0].Outputs)
	})
	t.Run("simple_string", func(t *testing.T) {
		a, b := make([]string, 16), make([]string, 16)
		sum, diff := make([]string, 16), make([]string, 16)
		for i := range a {
			a[i], b[i] = strconv.Itoa(i), "1"
			sum[i], diff[i] = strconv.Itoa(i+1), strconv.Itoa(i-1)
		}
		a[3], sum[3], diff[3] = "2147483647", "-2147483648", "2147483646"
		got, err := run(t, "simple_string", &engines.Request{Inputs: []engines.Tensor{
			in("INPUT0", str, b16, strs(a...)), in("INPUT1", str, b16, strs(b...))}})
		require.NoError(t, err)
		assert.Equal(t, []engines.Tensor{out("OUTPUT0", str, b16, strs(sum...)), out("OUTPUT1", str, b16, strs(diff...))}, got[0].Outputs)

		b[7] = "x7"
		_, err = run(t, "simple_string", &engines.Request{Inputs: []engines.Tensor{
			in("INPUT0", str, b16, strs(a...)), in("INPUT1", str, b16, strs(b...))}})
		assert.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
		assert.EqualError(t, err, `invalid_argument: input 'INPUT1' for model 'simple_string': element 7 ("x7") is not a 32-bit decimal integer`)
		a[2] = "4294967296"
		_, err = run(t, "simple_string", &engines.Request{Inputs: []engines.Tensor{
			in("INPUT0", str, b16, strs(a...)), in("INPUT1", str, b16, strs(b...))}})
		assert.EqualError(t, err, `invalid_argument: input 'INPUT0' for model 'simple_string': element 2 ("4294967296") is not a 32-bit decimal integer`)
	})
	t.Run("simple_identity keeps shape and bytes", func(t *testing.T) {
		data := strs("a\x00b", "", "\xff\xfe")
		got, err := run(t, "simple_identity", &engines.Request{Inputs: []engines.Tensor{in("INPUT0", str, []int64{1, 3}, data)}})
		require.NoError(t, err)
		assert.Equal(t, []engines.Tensor{out("OUTPUT0", str, []int64{1, 3}, data)}, got[0].Outputs)
	})
	t.Run("identity_fp32 aliases its input", func(t *testing.T) {
		data := tensor.Bytes([]float32{1.5, -2, 3})
		got, err := run(t, "identity_fp32", &engines.Request{Inputs: []engines.Tensor{in("INPUT0", f32, []int64{3}, data)}})
		require.NoError(t, err)
		assert.Equal(t, []engines.Tensor{out("OUTPUT0", f32, []int64{3}, data)}, got[0].Outputs)
		assert.Same(t, &data[0], &got[0].Outputs[0].Data[0], "no copy")
	})
	t.Run("square_int32", func(t *testing.T) {
		got, err := run(t, "square_int32", &engines.Request{Inputs: []engines.Tensor{in("IN", i32, []int64{1}, tensor.Bytes([]int32{3}))}})
		require.NoError(t, err)
		require.Len(t, got, 3)
		for _, r := range got {
			assert.Equal(t, []engines.Tensor{out("OUT", i32, []int64{1}, tensor.Bytes([]int32{3}))}, r.Outputs)
			assert.False(t, r.Final)
		}
		_, err = run(t, "square_int32", &engines.Request{Inputs: []engines.Tensor{in("IN", i32, []int64{1}, tensor.Bytes([]int32{-2}))}})
		assert.EqualError(t, err, "invalid_argument: model 'square_int32' needs IN >= 0, got -2")
	})
	t.Run("repeat_int32", func(t *testing.T) {
		req := func(in0 []int32, delay []uint32) *engines.Request {
			return &engines.Request{Inputs: []engines.Tensor{
				in("IN", i32, []int64{int64(len(in0))}, tensor.Bytes(in0)),
				in("DELAY", u32, []int64{int64(len(delay))}, tensor.Bytes(delay)),
				in("WAIT", u32, []int64{1}, tensor.Bytes([]uint32{0})),
			}}
		}
		got, err := run(t, "repeat_int32", req([]int32{7, -8}, []uint32{0, 1}))
		require.NoError(t, err)
		require.Len(t, got, 2)
		for i, v := range []int32{7, -8} {
			assert.Equal(t, []engines.Tensor{
				out("OUT", i32, []int64{1}, tensor.Bytes([]int32{v})),
				out("IDX", u32, []int64{1}, tensor.Bytes([]uint32{uint32(i)})),
			}, got[i].Outputs)
			assert.False(t, got[i].Final, "the registry's flags-only final ends the stream")
		}
		got, err = run(t, "repeat_int32", req(nil, nil))
		require.NoError(t, err)
		assert.Empty(t, got)
		_, err = run(t, "repeat_int32", req([]int32{1, 2}, []uint32{0}))
		assert.EqualError(t, err, "invalid_argument: model 'repeat_int32' expects DELAY to have one element per IN element: IN has 2, DELAY has 1")
	})
	t.Run("simple_sequence and simple_dyna_sequence", func(t *testing.T) {
		reg := engines.NewRegistry()
		require.NoError(t, builtin.Register(reg))
		step := func(model string, id uint64, start, end bool, v int32) int32 {
			e, err := reg.Resolve(model, "")
			require.NoError(t, err)
			req := &engines.Request{
				Inputs:   []engines.Tensor{in("INPUT", i32, []int64{1, 1}, tensor.Bytes([]int32{v}))},
				Sequence: engines.Sequence{ID: engines.CorrelationID{Uint: id}, Start: start, End: end},
			}
			require.NoError(t, e.Validate(req))
			var got []*engines.Response
			require.NoError(t, e.Execute(context.Background(), req, func(r *engines.Response) error { got = append(got, r); return nil }))
			require.Len(t, got, 1)
			require.Equal(t, []int64{1, 1}, got[0].Outputs[0].Shape)
			return tensor.View[int32](got[0].Outputs[0].Data)[0]
		}
		assert.Equal(t, []int32{11, 20, 30}, []int32{
			step("simple_sequence", 5, true, false, 10), step("simple_sequence", 5, false, false, 20), step("simple_sequence", 5, false, true, 30)})
		assert.Equal(t, []int32{11, 20, 30 + 9}, []int32{
			step("simple_dyna_sequence", 9, true, false, 10), step("simple_dyna_sequence", 9, false, false, 20), step("simple_dyna_sequence", 9, false, true, 30)})
	})
}
