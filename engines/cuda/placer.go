//go:build cuda

package cuda

import (
	"fmt"
	"strconv"
	"sync"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/engines/dense"
	"github.com/infergate/infergate/gen/inference"
)

// Placer puts models on GPUs for the registry (engines.Placer): the built-in simple and
// identity_fp32, and dense networks. Devices are opened on first use; a model placed again with
// the same instances (a repeated load) is the one already placed, so loads do not pile up GPU
// memory.
type Placer struct {
	lim Limits

	mu      sync.Mutex
	devices map[int]*Device
	placed  map[string]engines.Model
}

// NewPlacer returns a placer whose devices' pools are bounded by lim.
func NewPlacer(lim Limits) *Placer {
	return &Placer{lim: lim, devices: map[int]*Device{}, placed: map[string]engines.Model{}}
}

// Place implements engines.Placer: m on the GPU its KIND_GPU instance groups name (GPU 0 when
// they name none), with as many instances as they count.
func (p *Placer) Place(m engines.Model, cfg *inference.ModelConfig) (engines.Model, error) {
	name := cfg.GetName()
	ordinal, count := -1, 0
	for _, g := range cfg.GetInstanceGroup() {
		if g.GetKind() != inference.ModelInstanceGroup_KIND_GPU {
			return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("failed to load '%s': infergate runs a model's instances on the CPU or on a GPU, not on both", name))
		}
		gpus := g.GetGpus()
		if len(gpus) == 0 {
			gpus = []int32{0}
		}
		for _, o := range gpus {
			if ordinal >= 0 && int(o) != ordinal {
				return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("failed to load '%s': infergate runs a model's instances on one GPU (%d and %d named)", name, ordinal, o))
			}
			ordinal = int(o)
		}
		count += int(max(g.GetCount(), 1))
	}
	key := name + "/" + strconv.Itoa(ordinal) + "/" + strconv.Itoa(count) + "/" + strconv.Itoa(int(cfg.GetMaxBatchSize()))
	p.mu.Lock()
	defer p.mu.Unlock()
	if placed, ok := p.placed[key]; ok {
		return placed, nil
	}
	d, err := p.deviceLocked(ordinal)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("failed to load '%s' on GPU %d: %w", name, ordinal, err))
	}
	var placed engines.Model
	network, isDense := m.(interface{ Network() *dense.Network })
	switch {
	case isDense:
		placed, err = NewDense(d, name, network.Network(), cfg.GetMaxBatchSize(), count)
	case m.Config().GetName() == "simple" && m.Config().GetPlatform() == "infergate_cpu":
		placed, err = NewSimple(d, cfg, count)
	case m.Config().GetName() == "identity_fp32" && m.Config().GetPlatform() == "infergate_cpu":
		placed, err = NewIdentity(d, cfg, count)
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
			"failed to load '%s': it has no GPU version (infergate runs simple, identity_fp32 and dense models on GPUs)", name))
	}
	if err != nil {
		return nil, status(name, err)
	}
	p.placed[key] = placed
	return placed, nil
}

// device opens GPU ordinal once.
func (p *Placer) device(ordinal int) (*Device, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deviceLocked(ordinal)
}

func (p *Placer) deviceLocked(ordinal int) (*Device, error) {
	if d := p.devices[ordinal]; d != nil {
		return d, nil
	}
	d, err := Open(ordinal, p.lim)
	if err != nil {
		return nil, err
	}
	p.devices[ordinal] = d
	return d, nil
}

// Close frees every placed model and device. Nothing may run on them afterwards.
func (p *Placer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.placed {
		if c, ok := m.(interface{ Close() }); ok {
			c.Close()
		}
	}
	p.placed = map[string]engines.Model{}
	var first error
	for _, d := range p.devices {
		if err := d.Close(); err != nil && first == nil {
			first = err
		}
	}
	p.devices = map[int]*Device{}
	return first
}
