package dense

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"testing"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/nlpodyssey/safetensors"
	"github.com/stretchr/testify/require"
)

// A two-layer network small enough to check by hand: relu([1,2]·W0ᵀ + b0)·W1ᵀ + b1.
func TestForwardByHand(t *testing.T) {
	net := &Network{Layers: []Layer{
		{In: 2, Out: 2, W: []float32{1, 0, -1, -1}, B: []float32{0.5, 0}, ReLU: true},
		{In: 2, Out: 1, W: []float32{2, 3}, B: []float32{-1}},
	}}
	y := make([]float32, 2)
	net.Forward(y, []float32{1, 2, -4, 1}, 2, nil)
	// Row 1: layer 0 gives [1.5, -3] → relu [1.5, 0]; layer 1: 3 - 1 = 2.
	// Row 2: layer 0 gives [-3.5, 3] → relu [0, 3]; layer 1: 9 - 1 = 8.
	require.Equal(t, []float32{2, 8}, y)
}

func TestEncodeLoad(t *testing.T) {
	net := Random(1, 5, 7, 3)
	b, err := net.Encode()
	require.NoError(t, err)
	got, err := Load(b)
	require.NoError(t, err)
	require.Equal(t, net, got)
}

// Layers are ordered by the numbers in their names, as nn.Sequential numbers them.
func TestLoadOrdersLayersByNumber(t *testing.T) {
	views := map[string]safetensors.TensorView{}
	widths := []int{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 2} // 11 layers: 10 sorts after 2
	for i := 0; i+1 < len(widths); i++ {
		name := strconv.Itoa(2 * i) // 0, 2, 4, ..., 20: "10" sorts before "2" as text
		w, _ := safetensors.NewTensorView(safetensors.F32, []uint64{uint64(widths[i+1]), uint64(widths[i])}, make([]byte, 4*widths[i]*widths[i+1]))
		b, _ := safetensors.NewTensorView(safetensors.F32, []uint64{uint64(widths[i+1])}, make([]byte, 4*widths[i+1]))
		views[name+".weight"], views[name+".bias"] = w, b
	}
	file, err := safetensors.Serialize(views, nil)
	require.NoError(t, err)
	net, err := Load(file)
	require.NoError(t, err)
	require.Len(t, net.Layers, 11)
	require.Equal(t, 3, net.In())
	require.Equal(t, 2, net.Out())
	require.True(t, net.Layers[0].ReLU)
	require.False(t, net.Layers[10].ReLU)
}

func TestLoadRefuses(t *testing.T) {
	tensor := func(dt safetensors.DType, shape ...uint64) safetensors.TensorView {
		n := uint64(dt.Size())
		for _, d := range shape {
			n *= d
		}
		v, err := safetensors.NewTensorView(dt, shape, make([]byte, n))
		require.NoError(t, err)
		return v
	}
	for name, c := range map[string]struct {
		views map[string]safetensors.TensorView
		meta  map[string]string
		want  string
	}{
		"no bias":         {map[string]safetensors.TensorView{"0.weight": tensor(safetensors.F32, 2, 3)}, nil, "needs both"},
		"F16 weights":     {map[string]safetensors.TensorView{"0.weight": tensor(safetensors.F16, 2, 3), "0.bias": tensor(safetensors.F32, 2)}, nil, "must be F32"},
		"bias too short":  {map[string]safetensors.TensorView{"0.weight": tensor(safetensors.F32, 2, 3), "0.bias": tensor(safetensors.F32, 1)}, nil, "want [out, in]"},
		"layers disagree": {map[string]safetensors.TensorView{"0.weight": tensor(safetensors.F32, 2, 3), "0.bias": tensor(safetensors.F32, 2), "1.weight": tensor(safetensors.F32, 2, 4), "1.bias": tensor(safetensors.F32, 2)}, nil, "takes 4 inputs"},
		"other tensor":    {map[string]safetensors.TensorView{"0.running_mean": tensor(safetensors.F32, 2)}, nil, "want <layer>.weight"},
		"activation":      {map[string]safetensors.TensorView{"0.weight": tensor(safetensors.F32, 2, 3), "0.bias": tensor(safetensors.F32, 2)}, map[string]string{"activation": "gelu"}, "activation"},
	} {
		t.Run(name, func(t *testing.T) {
			file, err := safetensors.Serialize(c.views, c.meta)
			require.NoError(t, err)
			_, err = Load(file)
			require.ErrorContains(t, err, c.want)
		})
	}
	_, err := Load([]byte("not a safetensors file"))
	require.Error(t, err)
}

func TestModelExecute(t *testing.T) {
	net := Random(2, 4, 8, 3)
	m := NewModel("dense", net, 8)
	require.Equal(t, inference.ModelInstanceGroup_KIND_CPU, m.Config().GetInstanceGroup()[0].GetKind())
	x := []float32{1, -2, 3, 0.5, 0, 0, 1, 1}
	raw := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	var got *engines.Response
	err := m.Execute(context.Background(), &engines.Request{Inputs: []engines.Tensor{{Name: Input, Datatype: inference.DataType_TYPE_FP32, Shape: []int64{2, 4}, Data: raw}}},
		func(r *engines.Response) error { got = r; return nil })
	require.NoError(t, err)
	want := make([]float32, 6)
	net.Forward(want, x, 2, nil)
	out := got.Outputs[0]
	require.Equal(t, []int64{2, 3}, out.Shape)
	for i, w := range want {
		require.Equal(t, w, math.Float32frombits(binary.LittleEndian.Uint32(out.Data[4*i:])))
	}
}

// FuzzLoad: any bytes give a network or an error, never a panic or an allocation the file's
// own size does not bound.
func FuzzLoad(f *testing.F) {
	good, err := Random(3, 3, 4, 2).Encode()
	require.NoError(f, err)
	f.Add(good)
	f.Add([]byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '})
	f.Fuzz(func(t *testing.T, b []byte) {
		net, err := Load(b)
		if err != nil {
			return
		}
		params := 0
		for _, l := range net.Layers {
			params += len(l.W) + len(l.B)
		}
		if 4*params > len(b) {
			t.Fatalf("%d parameters from %d bytes", params, len(b))
		}
	})
}
