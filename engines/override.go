package engines

import (
	"fmt"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// MaxOverrideBatchSize bounds the max_batch_size a config override may set: the batch size bounds
// the memory one request may claim, so a client cannot lift it without limit.
const MaxOverrideBatchSize = 1 << 16

// overridable are the ModelConfig fields a load-time override may change on a model that allows
// it; every other field it sets must equal the model's own.
var overridable = map[protoreflect.Name]bool{
	"name": true, "max_batch_size": true, "dynamic_batching": true, "instance_group": true,
}

// OverrideConfig returns the config e's model would serve under override, a Triton ModelConfig
// sent with a load request: max_batch_size, dynamic_batching and instance_group counts change;
// any other field the override sets must equal the model's own. Errors are INVALID_ARGUMENT with
// Triton's words where Triton has them.
func (e *Entry) OverrideConfig(override *inference.ModelConfig) (*inference.ModelConfig, error) {
	base := e.model.Config()
	name := base.GetName()
	if n := override.GetName(); n != "" && n != name {
		return nil, invalid("unexpected directory name '%s' for model '%s', directory name must equal model name", name, n)
	}
	var bad error
	cur := base.ProtoReflect()
	override.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if overridable[fd.Name()] {
			return true
		}
		if !cur.Has(fd) || !cur.Get(fd).Equal(v) {
			bad = connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
				"failed to load '%s': the config override changes '%s', which infergate cannot change on this model; only max_batch_size, dynamic_batching and instance_group counts can be overridden", name, fd.Name()))
			return false
		}
		return true
	})
	if bad != nil {
		return nil, bad
	}
	if len(override.ProtoReflect().GetUnknown()) > 0 {
		return nil, invalid("failed to load '%s', failed to poll from model repository: Invalid config override: unknown fields", name)
	}
	cfg := proto.Clone(base).(*inference.ModelConfig)
	// proto3 cannot tell an absent max_batch_size from 0: 0 keeps the model's own.
	mbs := override.GetMaxBatchSize()
	if mbs == 0 {
		mbs = base.GetMaxBatchSize()
	}
	if (mbs > 0) != (base.GetMaxBatchSize() > 0) {
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
			"failed to load '%s': max_batch_size cannot change between 0 and a positive size: the model's tensors have a batch dimension only when it is positive", name))
	}
	if mbs < 0 || mbs > MaxOverrideBatchSize {
		return nil, invalid("failed to load '%s': max_batch_size %d is out of range [1, %d]", name, mbs, MaxOverrideBatchSize)
	}
	cfg.MaxBatchSize = mbs
	if db := override.GetDynamicBatching(); db != nil {
		if cfg.GetSequenceBatching() != nil || cfg.GetModelTransactionPolicy().GetDecoupled() {
			return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
				"failed to load '%s': dynamic batching cannot be enabled on a sequence or decoupled model", name))
		}
		if err := checkDynamicBatching(name, db, mbs); err != nil {
			return nil, err
		}
		cfg.SchedulingChoice = &inference.ModelConfig_DynamicBatching{DynamicBatching: db}
	} else if base.GetDynamicBatching() != nil {
		// Triton's override replaces the whole config: one without dynamic_batching turns it off.
		cfg.SchedulingChoice = nil
	}
	if groups := override.GetInstanceGroup(); len(groups) > 0 {
		cfg.InstanceGroup = nil
		for i, g := range groups {
			kind := g.GetKind()
			switch {
			case kind == inference.ModelInstanceGroup_KIND_AUTO:
				kind = inference.ModelInstanceGroup_KIND_CPU
			case kind == inference.ModelInstanceGroup_KIND_GPU && (e.reg == nil || e.reg.placer.Load() == nil):
				return nil, noGPUEngine(name)
			case kind != inference.ModelInstanceGroup_KIND_CPU && kind != inference.ModelInstanceGroup_KIND_GPU:
				return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
					"failed to load '%s': instance group %d has kind %s; infergate runs models on the CPU or a GPU only", name, i, g.GetKind()))
			}
			if kind != inference.ModelInstanceGroup_KIND_GPU && len(g.GetGpus()) > 0 {
				return nil, invalid("failed to load '%s': instance group %d names gpus but is not KIND_GPU", name, i)
			}
			if g.GetProfile() != nil || g.GetHostPolicy() != "" || g.GetSecondaryDevices() != nil || g.GetPassive() || g.GetRateLimiter() != nil {
				return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
					"failed to load '%s': instance group %d sets more than its name, kind, count and gpus, which infergate cannot honour", name, i))
			}
			count := g.GetCount()
			if count == 0 {
				count = 1 // Triton's default
			}
			if count < 1 || count > 1024 {
				return nil, invalid("failed to load '%s': instance group %d count %d is out of range [1, 1024]", name, i, g.GetCount())
			}
			gn := g.GetName()
			if gn == "" {
				gn = name
			}
			cfg.InstanceGroup = append(cfg.InstanceGroup, &inference.ModelInstanceGroup{Name: gn, Kind: kind, Count: count, Gpus: g.GetGpus()})
		}
	}
	return cfg, nil
}

// checkDynamicBatching checks a dynamic_batching setting as Triton's config validation does.
func checkDynamicBatching(model string, db *inference.ModelDynamicBatching, maxBatch int32) error {
	if maxBatch <= 0 {
		return invalid("dynamic batching requires max_batch_size > 0 for %s", model)
	}
	for _, p := range db.GetPreferredBatchSize() {
		if p < 1 {
			return invalid("dynamic batching preferred size must be positive for %s", model)
		}
		if p > maxBatch {
			return invalid("dynamic batching preferred size must be <= max batch size for %s", model)
		}
	}
	levels := db.GetPriorityLevels()
	if levels > 1<<10 {
		return invalid("failed to load '%s': priority_levels %d is out of range [0, %d]", model, levels, 1<<10)
	}
	if levels > 0 && (db.GetDefaultPriorityLevel() < 1 || db.GetDefaultPriorityLevel() > levels) {
		return invalid("default priority level must be in range [1, %d] for %s", levels, model)
	}
	for lvl := range db.GetPriorityQueuePolicy() {
		if lvl < 1 || lvl > levels {
			return invalid("priority queue policy must have priority level in range [1, %d] for %s", levels, model)
		}
	}
	return nil
}

// Reconfigure makes the named model serve under cfg (from OverrideConfig; nil: the model's own
// config), as a reload with a new config does in Triton: a fresh entry with fresh statistics and
// scheduler replaces the old one in place, ready. Requests already running finish on the old one.
func (r *Registry) Reconfigure(name string, cfg *inference.ModelConfig) error {
	r.mu.Lock()
	old, ok := r.entries[name]
	if !ok {
		r.mu.Unlock()
		return UnknownLoad(name)
	}
	if cfg == nil {
		cfg = old.model.Config()
	}
	e := newEntry(old.model, cfg)
	e.reg = r
	if onGPU(cfg) {
		// Placing uploads weights and makes streams: done under the lock, so two loads of one
		// model cannot race to place it twice. Loads are rare and operator-driven.
		m, err := r.place(old.model, cfg)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		e.run = m
	}
	r.schedule(e)
	r.entries[name] = e
	r.mu.Unlock()
	old.ready.Store(false)
	if old.seq != nil {
		old.seq.reset()
	}
	return nil
}

// onGPU reports whether cfg has a KIND_GPU instance group.
func onGPU(cfg *inference.ModelConfig) bool {
	for _, g := range cfg.GetInstanceGroup() {
		if g.GetKind() == inference.ModelInstanceGroup_KIND_GPU {
			return true
		}
	}
	return false
}

// Overridden reports whether the entry serves under a config other than its model's own.
func (e *Entry) Overridden() bool { return e.cfg != e.model.Config() }
