package cpu

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/adapters/tensor"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
)

// repeat is Triton's decoupled `repeat_int32`: for each element i of IN it waits DELAY[i]
// milliseconds and sends one response with OUT = IN[i] and IDX = i. Like Triton's Python backend
// it then ends with a flags-only final, so an empty IN yields no data responses at all.
type repeat struct {
	cfg *inference.ModelConfig
}

func newRepeat() *repeat {
	cfg := decoupled(baseConfig("repeat_int32", 0))
	cfg.Input = []*inference.ModelInput{
		input("IN", inference.DataType_TYPE_INT32, -1),
		input("DELAY", inference.DataType_TYPE_UINT32, -1),
		input("WAIT", inference.DataType_TYPE_UINT32, 1),
	}
	cfg.Output = []*inference.ModelOutput{
		output("OUT", inference.DataType_TYPE_INT32, 1),
		output("IDX", inference.DataType_TYPE_UINT32, 1),
	}
	return &repeat{cfg: cfg}
}

func (m *repeat) Config() *inference.ModelConfig { return m.cfg }

func (m *repeat) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := tensor.View[int32](req.Input("IN").Data)
	delay := tensor.View[uint32](req.Input("DELAY").Data)
	if len(delay) != len(in) {
		return connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("model 'repeat_int32' expects DELAY to have one element per IN element: IN has %d, DELAY has %d", len(in), len(delay)))
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, v := range in {
		if delay[i] > 0 {
			timer.Reset(time.Duration(delay[i]) * time.Millisecond)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		}
		err := send(&engines.Response{Outputs: []engines.Tensor{
			{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1}, Data: tensor.Bytes([]int32{v})},
			{Name: "IDX", Datatype: inference.DataType_TYPE_UINT32, Shape: []int64{1}, Data: tensor.Bytes([]uint32{uint32(i)})},
		}})
		if err != nil {
			return err
		}
	}
	return nil
}

// square is Triton's decoupled `square_int32`: for IN = [n] it sends n responses, each OUT = [n].
type square struct {
	cfg *inference.ModelConfig
}

func newSquare() *square {
	cfg := decoupled(baseConfig("square_int32", 0))
	cfg.Input = []*inference.ModelInput{input("IN", inference.DataType_TYPE_INT32, 1)}
	cfg.Output = []*inference.ModelOutput{output("OUT", inference.DataType_TYPE_INT32, 1)}
	return &square{cfg: cfg}
}

func (m *square) Config() *inference.ModelConfig { return m.cfg }

func (m *square) Execute(ctx context.Context, req *engines.Request, send func(*engines.Response) error) error {
	n := tensor.View[int32](req.Input("IN").Data)[0]
	if n < 0 {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("model 'square_int32' needs IN >= 0, got %d", n))
	}
	data := tensor.Bytes([]int32{n})
	for range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := send(&engines.Response{Outputs: []engines.Tensor{
			{Name: "OUT", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1}, Data: data},
		}})
		if err != nil {
			return err
		}
	}
	return nil
}
