package typed_test

import (
	"context"
	"fmt"

	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	tensortestv1 "github.com/infergate/infergate/gen/infergate/tensortest/v1"
	"github.com/infergate/infergate/gen/infergate/tensortest/v1/tensortestv1infergate"
	"github.com/infergate/infergate/lib/tensor"
)

// simple implements tensortestv1infergate.SimpleServiceModel: the generated code has already
// checked the request against the model's config and viewed its INT32 bytes as []int32.
type simple struct{}

func (simple) Simple(_ context.Context, req *tensortestv1.SimpleRequest) (*tensortestv1.SimpleResponse, error) {
	res := &tensortestv1.SimpleResponse{Output0: make([]int32, len(req.Input0)), Output1: make([]int32, len(req.Input0))}
	for i := range req.Input0 {
		res.Output0[i] = req.Input0[i] + req.Input1[i]
		res.Output1[i] = req.Input0[i] - req.Input1[i]
	}
	return res, nil
}

// A model defined in a tensor-annotated .proto (here schema/infergate/tensortest/v1, model
// "simple_generated": INT32 [-1, 16] in, sum and difference out) is served by registering the
// generated code with an engines.Registry. Every surface then serves it; this example runs one
// request through the registry itself, as the KServe surface does after decoding: Resolve,
// Validate, Execute.
func Example() {
	reg := engines.NewRegistry()
	if err := tensortestv1infergate.RegisterSimpleService(reg, simple{}); err != nil {
		panic(err)
	}

	a, b := make([]int32, 16), make([]int32, 16)
	for i := range a {
		a[i], b[i] = int32(i), 1
	}
	req := &engines.Request{Inputs: []engines.Tensor{
		{Name: "INPUT0", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1, 16}, Data: tensor.Bytes(a)},
		{Name: "INPUT1", Datatype: inference.DataType_TYPE_INT32, Shape: []int64{1, 16}, Data: tensor.Bytes(b)},
	}}
	e, err := reg.Resolve("simple_generated", "") // "": the latest ready version
	if err != nil {
		panic(err)
	}
	if err := e.Validate(req); err != nil { // Triton's checks and messages
		panic(err)
	}
	err = e.Execute(context.Background(), req, func(res *engines.Response) error {
		for _, out := range res.Outputs {
			fmt.Println(out.Name, tensor.Name(out.Datatype), out.Shape, tensor.View[int32](out.Data))
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	// Output:
	// OUTPUT0 INT32 [1 16] [1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16]
	// OUTPUT1 INT32 [1 16] [-1 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14]
}
