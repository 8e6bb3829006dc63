package engines_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// named answers with its own name, so a test sees which model ran.
type named struct {
	cfg  *inference.ModelConfig
	name string
}

func (m *named) Config() *inference.ModelConfig { return m.cfg }
func (m *named) Execute(_ context.Context, _ *engines.Request, send func(*engines.Response) error) error {
	return send(&engines.Response{Outputs: []engines.Tensor{{Name: "WHO", Data: []byte(m.name)}}})
}

// fakePlacer puts a model "on the GPU" by answering as "gpu", and records what it was given.
type fakePlacer struct{ cfgs []*inference.ModelConfig }

func (p *fakePlacer) Place(m engines.Model, cfg *inference.ModelConfig) (engines.Model, error) {
	p.cfgs = append(p.cfgs, cfg)
	return &named{cfg: cfg, name: "gpu"}, nil
}

func modelConfig(kind inference.ModelInstanceGroup_Kind) *inference.ModelConfig {
	return &inference.ModelConfig{Name: "m", MaxBatchSize: 4,
		InstanceGroup: []*inference.ModelInstanceGroup{{Name: "m", Kind: kind, Count: 1}}}
}

func who(t *testing.T, e *engines.Entry) string {
	t.Helper()
	var got string
	require.NoError(t, e.Execute(context.Background(), &engines.Request{}, func(r *engines.Response) error {
		got = string(r.Outputs[0].Data)
		return nil
	}))
	return got
}

// A load whose config override asks for KIND_GPU runs the model's GPU placement; without a GPU
// engine it is refused, and a reload with the model's own config runs it on the CPU again.
func TestKindGPUOverride(t *testing.T) {
	reg := engines.NewRegistry()
	e, err := reg.Register(&named{cfg: modelConfig(inference.ModelInstanceGroup_KIND_CPU), name: "cpu"})
	require.NoError(t, err)
	gpu := &inference.ModelConfig{InstanceGroup: []*inference.ModelInstanceGroup{{Kind: inference.ModelInstanceGroup_KIND_GPU, Count: 2, Gpus: []int32{0}}}}

	_, err = e.OverrideConfig(gpu)
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err))
	require.ErrorContains(t, err, "no GPU engine")

	p := &fakePlacer{}
	reg.SetPlacer(p)
	cfg, err := e.OverrideConfig(gpu)
	require.NoError(t, err)
	require.True(t, proto.Equal(&inference.ModelInstanceGroup{Name: "m", Kind: inference.ModelInstanceGroup_KIND_GPU, Count: 2, Gpus: []int32{0}}, cfg.GetInstanceGroup()[0]))
	require.NoError(t, reg.Reconfigure("m", cfg))
	require.Equal(t, "gpu", who(t, reg.Lookup("m")))
	require.Len(t, p.cfgs, 1)

	require.NoError(t, reg.Reconfigure("m", nil))
	require.Equal(t, "cpu", who(t, reg.Lookup("m")))

	// gpus on a CPU group is a mistake, not something to ignore.
	_, err = reg.Lookup("m").OverrideConfig(&inference.ModelConfig{InstanceGroup: []*inference.ModelInstanceGroup{{Kind: inference.ModelInstanceGroup_KIND_CPU, Count: 1, Gpus: []int32{0}}}})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
}

// A model whose own config is KIND_GPU is placed when it is registered, and refused where
// there is no GPU engine.
func TestRegisterKindGPU(t *testing.T) {
	reg := engines.NewRegistry()
	_, err := reg.Register(&named{cfg: modelConfig(inference.ModelInstanceGroup_KIND_GPU), name: "cpu"})
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err))
	require.Nil(t, reg.Lookup("m"))

	reg.SetPlacer(&fakePlacer{})
	e, err := reg.Register(&named{cfg: modelConfig(inference.ModelInstanceGroup_KIND_GPU), name: "cpu"})
	require.NoError(t, err)
	require.Equal(t, "gpu", who(t, e))
}

// onGPU is a model already on a GPU, as the CUDA engine's are.
type onGPU struct{ named }

func (*onGPU) GPU() int { return 0 }

// A model that runs on a GPU itself is served as it is, without a placer; a count left out of
// an override's instance group is Triton's default, 1.
func TestGPUModelAndDefaultCount(t *testing.T) {
	reg := engines.NewRegistry()
	e, err := reg.Register(&onGPU{named{cfg: modelConfig(inference.ModelInstanceGroup_KIND_GPU), name: "own"}})
	require.NoError(t, err)
	require.Equal(t, "own", who(t, e))

	reg2 := engines.NewRegistry()
	e, err = reg2.Register(&named{cfg: modelConfig(inference.ModelInstanceGroup_KIND_CPU), name: "cpu"})
	require.NoError(t, err)
	cfg, err := e.OverrideConfig(&inference.ModelConfig{InstanceGroup: []*inference.ModelInstanceGroup{{Kind: inference.ModelInstanceGroup_KIND_CPU}}})
	require.NoError(t, err)
	require.Equal(t, int32(1), cfg.GetInstanceGroup()[0].GetCount())
}
