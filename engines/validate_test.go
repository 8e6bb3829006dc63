package engines

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestByteSizeMessageNeverOverflows(t *testing.T) {
	for _, shape := range [][]int64{{1 << 62}, {1<<61 + 1}} {
		err := checkData(&Tensor{Name: "X", Datatype: inference.DataType_TYPE_FP32, Shape: shape, Data: make([]byte, 8)}, "m")
		require.Error(t, err)
		assert.Equal(t, "input 'X' for model 'm' has a shape with too many elements: "+dimsString(shape), err.(*connect.Error).Message())
	}
	err := checkData(&Tensor{Name: "X", Datatype: inference.DataType_TYPE_FP32, Shape: []int64{3}, Data: make([]byte, 8)}, "m")
	assert.Equal(t, "input byte size mismatch for input 'X' for model 'm'. Expected 12, got 8", err.(*connect.Error).Message())
}

func TestBatchSizeIsCheckedBeforeDatatypes(t *testing.T) {
	reg := NewRegistry()
	e, err := reg.Register(fixedModel{cfg: &inference.ModelConfig{Name: "m", MaxBatchSize: 8,
		Input: []*inference.ModelInput{
			{Name: "A", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}},
			{Name: "B", DataType: inference.DataType_TYPE_INT32, Dims: []int64{1}},
		}}})
	require.NoError(t, err)
	err = e.Validate(&Request{Inputs: []Tensor{
		{Name: "A", Datatype: inference.DataType_TYPE_FP32, Shape: []int64{1, 1}, Data: make([]byte, 4)},
		{Name: "B", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{2, 1}, Data: make([]byte, 8)},
	}})
	require.Error(t, err)
	assert.Equal(t, "input 'B' batch size does not match other inputs for 'm'", err.(*connect.Error).Message())
}

// fixedModel is a model with a given config that is never executed.
type fixedModel struct{ cfg *inference.ModelConfig }

func (m fixedModel) Config() *inference.ModelConfig { return m.cfg }
func (fixedModel) Execute(context.Context, *Request, func(*Response) error) error {
	return nil
}
