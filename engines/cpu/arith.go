package cpu

import (
	"context"
	"fmt"
	"strconv"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/adapters/tensor"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
)

// arith is Triton's `simple` (INT32) and `simple_int8`: OUTPUT0 = INPUT0 + INPUT1 and
// OUTPUT1 = INPUT0 - INPUT1, elementwise over [batch, 16], wrapping on overflow.
type arith struct {
	cfg *inference.ModelConfig
}

func newArith(name string, dt inference.DataType) *arith {
	cfg := baseConfig(name, 8)
	cfg.Input = []*inference.ModelInput{input("INPUT0", dt, 16), input("INPUT1", dt, 16)}
	cfg.Output = []*inference.ModelOutput{output("OUTPUT0", dt, 16), output("OUTPUT1", dt, 16)}
	return &arith{cfg: cfg}
}

func (m *arith) Config() *inference.ModelConfig { return m.cfg }

func (m *arith) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	a, b := req.Input("INPUT0"), req.Input("INPUT1")
	var sum, diff []byte
	if m.cfg.Input[0].DataType == inference.DataType_TYPE_INT8 {
		sum, diff = sumDiff(tensor.View[int8](a.Data), tensor.View[int8](b.Data))
	} else {
		sum, diff = sumDiff(tensor.View[int32](a.Data), tensor.View[int32](b.Data))
	}
	dt := m.cfg.Input[0].DataType
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "OUTPUT0", Datatype: dt, Shape: a.Shape, Data: sum},
		{Name: "OUTPUT1", Datatype: dt, Shape: a.Shape, Data: diff},
	}})
}

func sumDiff[T int8 | int32](a, b []T) (sum, diff []byte) {
	out := make([]T, 2*len(a))
	s, d := out[:len(a)], out[len(a):]
	for i := range a {
		s[i] = a[i] + b[i]
		d[i] = a[i] - b[i]
	}
	return tensor.Bytes(s), tensor.Bytes(d)
}

// simpleString is Triton's `simple_string`: like simple, on decimal integer strings.
type simpleString struct {
	cfg *inference.ModelConfig
}

func newSimpleString() *simpleString {
	cfg := baseConfig("simple_string", 8)
	bt := inference.DataType_TYPE_STRING
	cfg.Input = []*inference.ModelInput{input("INPUT0", bt, 16), input("INPUT1", bt, 16)}
	cfg.Output = []*inference.ModelOutput{output("OUTPUT0", bt, 16), output("OUTPUT1", bt, 16)}
	return &simpleString{cfg: cfg}
}

func (m *simpleString) Config() *inference.ModelConfig { return m.cfg }

func (m *simpleString) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	a, b := req.Input("INPUT0"), req.Input("INPUT1")
	av, err := parseInts(a, m.cfg.Name)
	if err != nil {
		return err
	}
	bv, err := parseInts(b, m.cfg.Name)
	if err != nil {
		return err
	}
	var sum, diff []byte
	for i := range av {
		sum = tensor.AppendBytes(sum, strconv.AppendInt(nil, int64(int32(av[i]+bv[i])), 10))
		diff = tensor.AppendBytes(diff, strconv.AppendInt(nil, int64(int32(av[i]-bv[i])), 10))
	}
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "OUTPUT0", Datatype: inference.DataType_TYPE_STRING, Shape: a.Shape, Data: sum},
		{Name: "OUTPUT1", Datatype: inference.DataType_TYPE_STRING, Shape: a.Shape, Data: diff},
	}})
}

func parseInts(t *engines.Tensor, model string) ([]int32, error) {
	elems, err := tensor.SplitBytes(t.Data)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("input '%s' for model '%s': %w", t.Name, model, err))
	}
	out := make([]int32, len(elems))
	for i, e := range elems {
		v, err := strconv.ParseInt(string(e), 10, 32)
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("input '%s' for model '%s': element %d (%q) is not a 32-bit decimal integer", t.Name, model, i, e))
		}
		out[i] = int32(v)
	}
	return out, nil
}
