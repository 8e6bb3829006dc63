// Package dense serves a dense network, a stack of fully connected layers, loaded from a
// safetensors file: y = act(x·Wᵀ + b) per layer, ReLU between layers and none after the last,
// the network PyTorch's nn.Sequential(nn.Linear, nn.ReLU, ..., nn.Linear) computes and saves.
// The CPU model here is the reference the GPU engine (engines/cuda) is tested against.
//
// The file is read with github.com/nlpodyssey/safetensors, a port of Hugging Face's reference
// reader that checks every offset against the file's size.
package dense

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/nlpodyssey/safetensors"
)

// Layer is one fully connected layer: Out×In weights, row-major (nn.Linear's layout), Out
// biases, and whether ReLU follows.
type Layer struct {
	In, Out int
	W, B    []float32
	ReLU    bool
}

// Network is a stack of layers, each one's In the previous one's Out.
type Network struct {
	Layers []Layer
}

// In is the width of the network's input; Out of its output.
func (n *Network) In() int  { return n.Layers[0].In }
func (n *Network) Out() int { return n.Layers[len(n.Layers)-1].Out }

// Widest is the widest layer output, which sizes a forward pass's scratch buffers.
func (n *Network) Widest() int {
	w := 0
	for _, l := range n.Layers {
		w = max(w, l.Out)
	}
	return w
}

// Bounds on what a file may declare: a network is an operator's file, but a corrupt one must be
// refused with a message, not take the process down.
const (
	maxLayers = 1024
	maxWidth  = 1 << 20
)

// Load reads a network from the bytes of a safetensors file. Its tensors are F32 pairs named
// <prefix>.weight ([out, in]) and <prefix>.bias ([out]), ordered by the numbers in their
// prefixes (0, 2, 4 in an nn.Sequential; layers.0, layers.1, ...); the file's metadata may set
// "activation" to "relu" (the default) or "none", applied after every layer but the last.
func Load(file []byte) (*Network, error) {
	_, meta, err := safetensors.ReadMetadata(file)
	if err != nil {
		return nil, fmt.Errorf("dense: reading the safetensors header: %w", err)
	}
	st, err := safetensors.Deserialize(file)
	if err != nil {
		return nil, fmt.Errorf("dense: reading the safetensors file: %w", err)
	}
	relu := true
	switch a := meta.Metadata()["activation"]; a {
	case "", "relu":
	case "none":
		relu = false
	default:
		return nil, fmt.Errorf(`dense: activation %q: want "relu" or "none"`, a)
	}
	type pair struct{ w, b *safetensors.TensorView }
	layers := map[string]*pair{}
	for _, t := range st.Tensors() {
		prefix, kind, ok := cutLast(t.Name, ".")
		if !ok || kind != "weight" && kind != "bias" {
			return nil, fmt.Errorf("dense: tensor %q: want <layer>.weight or <layer>.bias", t.Name)
		}
		p := layers[prefix]
		if p == nil {
			p = &pair{}
			layers[prefix] = p
		}
		v := t.TensorView
		if kind == "weight" {
			p.w = &v
		} else {
			p.b = &v
		}
	}
	if len(layers) == 0 || len(layers) > maxLayers {
		return nil, fmt.Errorf("dense: %d layers: want 1 to %d", len(layers), maxLayers)
	}
	names := make([]string, 0, len(layers))
	for name := range layers {
		names = append(names, name)
	}
	slices.SortFunc(names, naturalCompare)
	net := &Network{Layers: make([]Layer, len(names))}
	for i, name := range names {
		p := layers[name]
		if p.w == nil || p.b == nil {
			return nil, fmt.Errorf("dense: layer %q needs both its weight and its bias", name)
		}
		ws, bs := p.w.Shape(), p.b.Shape()
		if p.w.DType() != safetensors.F32 || p.b.DType() != safetensors.F32 {
			return nil, fmt.Errorf("dense: layer %q: weights and biases must be F32, not %s and %s", name, p.w.DType(), p.b.DType())
		}
		if len(ws) != 2 || len(bs) != 1 || ws[0] != bs[0] || ws[0] == 0 || ws[1] == 0 || ws[0] > maxWidth || ws[1] > maxWidth {
			return nil, fmt.Errorf("dense: layer %q: weight %v and bias %v: want [out, in] and [out], 1 to %d each", name, ws, bs, maxWidth)
		}
		l := Layer{In: int(ws[1]), Out: int(ws[0]), W: floats(p.w.Data()), B: floats(p.b.Data()), ReLU: relu && i < len(names)-1}
		if i > 0 && l.In != net.Layers[i-1].Out {
			return nil, fmt.Errorf("dense: layer %q takes %d inputs, but layer %q gives %d", name, l.In, names[i-1], net.Layers[i-1].Out)
		}
		net.Layers[i] = l
	}
	return net, nil
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// naturalCompare orders names by their runs of digits as numbers: layers.2 before layers.10.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		if da, db := digits(a), digits(b); da > 0 && db > 0 {
			x, y := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(x), len(y)); c != 0 {
				return c
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// floats decodes little-endian F32s.
func floats(b []byte) []float32 {
	return decodeFloats(make([]float32, len(b)/4), b)
}

// decodeFloats decodes len(dst) little-endian F32s from b into dst.
func decodeFloats(dst []float32, b []byte) []float32 {
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return dst
}

// Forward computes the network on rows inputs of In() each, held in x, into dst (rows×Out()).
// scratch holds two buffers of rows×Widest() (nil: allocated here).
func (n *Network) Forward(dst, x []float32, rows int, scratch *[2][]float32) {
	if scratch == nil {
		scratch = new([2][]float32)
	}
	need := rows * n.Widest()
	for i := range scratch {
		if cap(scratch[i]) < need {
			scratch[i] = make([]float32, need)
		}
	}
	in := x
	for li, l := range n.Layers {
		out := scratch[li%2][:rows*l.Out]
		if li == len(n.Layers)-1 {
			out = dst[:rows*l.Out]
		}
		for r := range rows {
			xr := in[r*l.In : (r+1)*l.In]
			yr := out[r*l.Out : (r+1)*l.Out]
			for j := range l.Out {
				v := l.B[j] + dot(l.W[j*l.In:(j+1)*l.In], xr)
				if l.ReLU && v < 0 {
					v = 0
				}
				yr[j] = v
			}
		}
		in = out
	}
}

// dot is a four-way unrolled dot product: its sums are kept apart so that the loop is not one
// long dependency chain.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Input and Output are the model's tensor names.
const (
	Input  = "INPUT"
	Output = "OUTPUT"
)

// Config is the Triton config of a dense model: INPUT [batch, in] to OUTPUT [batch, out], FP32,
// batched up to maxBatch, with count instances of kind (KIND_CPU or KIND_GPU).
func Config(name string, net *Network, maxBatch int32, kind inference.ModelInstanceGroup_Kind, count int32, platform string) *inference.ModelConfig {
	return &inference.ModelConfig{
		Name: name, Platform: platform, Backend: "dense", MaxBatchSize: maxBatch,
		VersionPolicy: &inference.ModelVersionPolicy{
			PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}},
		},
		Input:         []*inference.ModelInput{{Name: Input, DataType: inference.DataType_TYPE_FP32, Dims: []int64{int64(net.In())}}},
		Output:        []*inference.ModelOutput{{Name: Output, DataType: inference.DataType_TYPE_FP32, Dims: []int64{int64(net.Out())}}},
		InstanceGroup: []*inference.ModelInstanceGroup{{Name: name, Kind: kind, Count: count}},
	}
}

// Model is a dense network served on the CPU.
type Model struct {
	net     *Network
	cfg     *inference.ModelConfig
	scratch sync.Pool // *buffers
}

type buffers struct {
	x, y    []float32
	scratch [2][]float32
}

// NewModel serves net on the CPU as name, batched up to maxBatch.
func NewModel(name string, net *Network, maxBatch int32) *Model {
	return &Model{net: net, cfg: Config(name, net, maxBatch, inference.ModelInstanceGroup_KIND_CPU, 1, "infergate_cpu")}
}

// Network is the model's network.
func (m *Model) Network() *Network { return m.net }

// Config implements engines.Model.
func (m *Model) Config() *inference.ModelConfig { return m.cfg }

// Rows checks a validated request's input and returns its batch size.
func Rows(req *engines.Request, net *Network) (*engines.Tensor, int, error) {
	in := req.Input(Input)
	if in == nil || len(in.Shape) != 2 || in.Shape[1] != int64(net.In()) {
		return nil, 0, connect.NewError(connect.CodeInvalidArgument, errors.New("dense: INPUT must be [batch, "+strconv.Itoa(net.In())+"]"))
	}
	return in, int(in.Shape[0]), nil
}

// Execute implements engines.Model.
func (m *Model) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in, rows, err := Rows(req, m.net)
	if err != nil {
		return err
	}
	b, _ := m.scratch.Get().(*buffers)
	if b == nil {
		b = &buffers{}
	}
	defer m.scratch.Put(b)
	b.x = decodeFloats(slices.Grow(b.x[:0], rows*m.net.In())[:rows*m.net.In()], in.Data)
	b.y = slices.Grow(b.y[:0], rows*m.net.Out())[:rows*m.net.Out()]
	m.net.Forward(b.y, b.x, rows, &b.scratch)
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: Output, Datatype: inference.DataType_TYPE_FP32, Shape: []int64{int64(rows), int64(m.net.Out())}, Data: floatBytes(b.y)}}})
}

// Encode writes the network as a safetensors file Load reads back: layers.<i>.weight and
// layers.<i>.bias, and the activation in the metadata.
func (n *Network) Encode() ([]byte, error) {
	views := map[string]safetensors.TensorView{}
	relu := false
	for i, l := range n.Layers {
		relu = relu || l.ReLU
		w, err := safetensors.NewTensorView(safetensors.F32, []uint64{uint64(l.Out), uint64(l.In)}, floatBytes(l.W))
		if err != nil {
			return nil, err
		}
		b, err := safetensors.NewTensorView(safetensors.F32, []uint64{uint64(l.Out)}, floatBytes(l.B))
		if err != nil {
			return nil, err
		}
		views["layers."+strconv.Itoa(i)+".weight"], views["layers."+strconv.Itoa(i)+".bias"] = w, b
	}
	act := "none"
	if relu {
		act = "relu"
	}
	return safetensors.Serialize(views, map[string]string{"activation": act})
}

func floatBytes(f []float32) []byte {
	b := make([]byte, 4*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// Random is a network of the given widths (widths[0] in, the last out) with weights drawn
// from seed, scaled as PyTorch initializes nn.Linear (uniform in ±1/sqrt(in)): for tests and
// benchmarks.
func Random(seed uint64, widths ...int) *Network {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	net := &Network{}
	for i := 0; i+1 < len(widths); i++ {
		in, out := widths[i], widths[i+1]
		bound := float32(1 / math.Sqrt(float64(in)))
		l := Layer{In: in, Out: out, W: make([]float32, in*out), B: make([]float32, out), ReLU: i+2 < len(widths)}
		for j := range l.W {
			l.W[j] = (2*r.Float32() - 1) * bound
		}
		for j := range l.B {
			l.B[j] = (2*r.Float32() - 1) * bound
		}
		net.Layers = append(net.Layers, l)
	}
	return net
}

// OnInstances sets the instance group the model's config declares: kind KIND_GPU makes the
// registry place it on a GPU (engines.Placer) when it is registered.
func (m *Model) OnInstances(kind inference.ModelInstanceGroup_Kind, count int32, gpus []int32) *Model {
	m.cfg.InstanceGroup = []*inference.ModelInstanceGroup{{Name: m.cfg.GetName(), Kind: kind, Count: max(count, 1), Gpus: gpus}}
	return m
}
