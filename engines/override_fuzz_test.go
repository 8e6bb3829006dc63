package engines_test

import (
	"testing"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/models/builtin"
	"google.golang.org/protobuf/encoding/protojson"
)

// FuzzConfigOverride feeds a load request's "config" parameter, as a client sends it, through
// the decoding and checks RepositoryModelLoad applies: whatever it accepts must be a config the
// registry can serve, within the bounds on batch size and instance counts.
func FuzzConfigOverride(f *testing.F) {
	f.Add(`{"max_batch_size":4,"dynamic_batching":{"preferred_batch_size":[2,4],"max_queue_delay_microseconds":100}}`)
	f.Add(`{"name":"simple","instance_group":[{"kind":"KIND_CPU","count":3}]}`)
	f.Add(`{"dynamic_batching":{"priority_levels":2,"default_priority_level":1,"priority_queue_policy":{"2":{"max_queue_size":1}}}}`)
	f.Add(`{"input":[{"name":"INPUT0","data_type":"TYPE_INT32","dims":[16]}]}`)
	f.Add(`{"max_batch_size":-1}`)
	reg := engines.NewRegistry()
	if err := builtin.Register(reg); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, config string) {
		var override inference.ModelConfig
		if protojson.Unmarshal([]byte(config), &override) != nil {
			return
		}
		for _, name := range []string{"simple", "simple_sequence"} {
			e := reg.Lookup(name)
			cfg, err := e.OverrideConfig(&override)
			if err != nil {
				continue
			}
			if cfg.GetName() != name || cfg.GetMaxBatchSize() < 1 || cfg.GetMaxBatchSize() > engines.MaxOverrideBatchSize {
				t.Fatalf("accepted config for %s: name %q, max_batch_size %d", name, cfg.GetName(), cfg.GetMaxBatchSize())
			}
			for _, g := range cfg.GetInstanceGroup() {
				if g.GetCount() < 1 || g.GetCount() > 1024 {
					t.Fatalf("accepted instance count %d", g.GetCount())
				}
			}
			if cfg.GetDynamicBatching() != nil && cfg.GetSequenceBatching() != nil {
				t.Fatal("accepted dynamic batching on a sequence model")
			}
			if len(cfg.GetInput()) != len(e.Config().GetInput()) {
				t.Fatal("accepted a change of inputs")
			}
		}
	})
}
