package cpu

import (
	"context"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
)

// identity returns its single input as its single output. The output aliases the request's bytes,
// so even a 64 MiB tensor is never copied by the model.
type identity struct {
	cfg *inference.ModelConfig
}

// newSimpleIdentity is Triton's `simple_identity`: BYTES [-1] with batching.
func newSimpleIdentity() *identity {
	cfg := baseConfig("simple_identity", 8)
	cfg.Input = []*inference.ModelInput{input("INPUT0", inference.DataType_TYPE_STRING, -1)}
	cfg.Output = []*inference.ModelOutput{output("OUTPUT0", inference.DataType_TYPE_STRING, -1)}
	return &identity{cfg: cfg}
}

// newIdentityFP32 is a rank-1 FP32 identity of any length, without batching, for large tensors.
func newIdentityFP32() *identity {
	cfg := baseConfig("identity_fp32", 0)
	cfg.Input = []*inference.ModelInput{input("INPUT0", inference.DataType_TYPE_FP32, -1)}
	cfg.Output = []*inference.ModelOutput{output("OUTPUT0", inference.DataType_TYPE_FP32, -1)}
	return &identity{cfg: cfg}
}

func (m *identity) Config() *inference.ModelConfig { return m.cfg }

func (m *identity) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Inputs[0]
	in.Name = m.cfg.Output[0].Name
	return send(&engines.Response{Outputs: []engines.Tensor{in}})
}
