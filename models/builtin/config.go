// Package builtin holds infergate's built-in models, pure Go equivalents of Triton's example models
// (simple, simple_int8, simple_string, simple_identity, simple_sequence, simple_dyna_sequence,
// repeat_int32, square_int32) plus identity_fp32 for large-tensor tests. Their configs and
// semantics follow Triton's so that Triton's own example clients work against them unchanged.
//
// All but simple_dyna_sequence are declared in schema/infergate/builtin/v1/builtin.proto and
// served through the code protoc-gen-infergate generates from it (builtins implements the
// generated interface); simple_dyna_sequence is a hand-written engines.Model (sequence.go).
package builtin

import (
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/gen/infergate/builtin/v1/builtinv1infergate"
)

// Platform is the platform string the built-in models report in metadata and config.
const Platform = "infergate_cpu"

// order is the registration order of the built-ins, which model listings follow.
var order = []string{"simple", "simple_int8", "simple_string", "simple_identity", "simple_sequence",
	"simple_dyna_sequence", "repeat_int32", "square_int32", "identity_fp32"}

// Models returns a fresh instance of every built-in model.
func Models() []engines.Model {
	byName := map[string]engines.Model{}
	for _, m := range append(builtinv1infergate.NewBuiltinServiceModels(builtins{}), newSimpleDynaSequence()) {
		byName[m.Config().GetName()] = m
	}
	out := make([]engines.Model, 0, len(order))
	for _, name := range order {
		out = append(out, byName[name])
	}
	return out
}

// Register adds every built-in model to reg.
func Register(reg *engines.Registry) error {
	for _, m := range Models() {
		if _, err := reg.Register(m); err != nil {
			return err
		}
	}
	return nil
}

// baseConfig is the config every built-in shares: the generated ones get the same from their
// annotations (platform, backend "cpu", latest version policy, one CPU instance).
func baseConfig(name string, maxBatch int32) *inference.ModelConfig {
	return &inference.ModelConfig{
		Name:         name,
		Platform:     Platform,
		Backend:      "cpu",
		MaxBatchSize: maxBatch,
		VersionPolicy: &inference.ModelVersionPolicy{
			PolicyChoice: &inference.ModelVersionPolicy_Latest_{Latest: &inference.ModelVersionPolicy_Latest{NumVersions: 1}},
		},
		InstanceGroup: []*inference.ModelInstanceGroup{{
			Name: name, Kind: inference.ModelInstanceGroup_KIND_CPU, Count: 1,
		}},
	}
}
