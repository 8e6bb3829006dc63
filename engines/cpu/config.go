// Package cpu holds infergate's built-in models, pure Go equivalents of Triton's example models
// (simple, simple_int8, simple_string, simple_identity, simple_sequence, simple_dyna_sequence,
// repeat_int32, square_int32) plus identity_fp32 for large-tensor tests. Their configs and
// semantics follow Triton's so that Triton's own example clients work against them unchanged.
package cpu

import (
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
)

// Platform is the platform string the built-in models report in metadata and config.
const Platform = "infergate_cpu"

// Models returns a fresh instance of every built-in model.
func Models() []engines.Model {
	return []engines.Model{
		newArith("simple", inference.DataType_TYPE_INT32),
		newArith("simple_int8", inference.DataType_TYPE_INT8),
		newSimpleString(),
		newSimpleIdentity(),
		newSimpleSequence(),
		newSimpleDynaSequence(),
		newRepeat(),
		newSquare(),
		newIdentityFP32(),
	}
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

func io(name string, dt inference.DataType, dims ...int64) (*inference.ModelInput, *inference.ModelOutput) {
	return &inference.ModelInput{Name: name, DataType: dt, Dims: dims},
		&inference.ModelOutput{Name: name, DataType: dt, Dims: dims}
}

func input(name string, dt inference.DataType, dims ...int64) *inference.ModelInput {
	in, _ := io(name, dt, dims...)
	return in
}

func output(name string, dt inference.DataType, dims ...int64) *inference.ModelOutput {
	_, out := io(name, dt, dims...)
	return out
}

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

func decoupled(cfg *inference.ModelConfig) *inference.ModelConfig {
	cfg.ModelTransactionPolicy = &inference.ModelTransactionPolicy{Decoupled: true}
	return cfg
}

// int32Control is a sequence control input carried as INT32 0/1, as Triton's examples declare them.
func int32Control(name string, kind inference.ModelSequenceBatching_Control_Kind) *inference.ModelSequenceBatching_ControlInput {
	return &inference.ModelSequenceBatching_ControlInput{
		Name:    name,
		Control: []*inference.ModelSequenceBatching_Control{{Kind: kind, Int32FalseTrue: []int32{0, 1}}},
	}
}
