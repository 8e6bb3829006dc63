package builtin

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	builtinv1 "github.com/infergate/infergate/gen/infergate/builtin/v1"
)

// builtins implements the models of schema/infergate/builtin/v1/builtin.proto: their configs and
// the conversion between KServe tensors and these messages are generated (builtinv1infergate);
// only the computations are here. Requests arrive validated against the configs (datatypes,
// shapes, batch sizes), and must not be kept past the method's return.
type builtins struct{}

// Simple is Triton's `simple`: sum and difference of two INT32 tensors of [batch, 16], wrapping.
func (builtins) Simple(_ context.Context, req *builtinv1.SimpleRequest) (*builtinv1.SimpleResponse, error) {
	sum, diff := sumDiff(req.Input0, req.Input1, func(v int32) int32 { return v })
	return &builtinv1.SimpleResponse{Output0: sum, Output1: diff}, nil
}

// SimpleInt8 is Triton's `simple_int8`. The fields hold INT8 values in int32s; the results are
// narrowed explicitly so that they wrap as INT8 arithmetic does (the generated encoder would
// reject an out-of-range value instead).
func (builtins) SimpleInt8(_ context.Context, req *builtinv1.SimpleInt8Request) (*builtinv1.SimpleInt8Response, error) {
	sum, diff := sumDiff(req.Input0, req.Input1, func(v int32) int32 { return int32(int8(v)) })
	return &builtinv1.SimpleInt8Response{Output0: sum, Output1: diff}, nil
}

// sumDiff returns a+b and a-b elementwise, each passed through wrap, in one allocation.
func sumDiff(a, b []int32, wrap func(int32) int32) (sum, diff []int32) {
	out := make([]int32, 2*len(a))
	sum, diff = out[:len(a)], out[len(a):]
	for i := range a {
		sum[i] = wrap(a[i] + b[i])
		diff[i] = wrap(a[i] - b[i])
	}
	return sum, diff
}

// SimpleString is Triton's `simple_string`: simple on decimal integer strings.
func (builtins) SimpleString(_ context.Context, req *builtinv1.SimpleStringRequest) (*builtinv1.SimpleStringResponse, error) {
	a, err := parseInts(req.Input0, "INPUT0")
	if err != nil {
		return nil, err
	}
	b, err := parseInts(req.Input1, "INPUT1")
	if err != nil {
		return nil, err
	}
	resp := &builtinv1.SimpleStringResponse{Output0: make([][]byte, len(a)), Output1: make([][]byte, len(a))}
	for i := range a {
		resp.Output0[i] = strconv.AppendInt(nil, int64(a[i]+b[i]), 10)
		resp.Output1[i] = strconv.AppendInt(nil, int64(a[i]-b[i]), 10)
	}
	return resp, nil
}

func parseInts(elems [][]byte, input string) ([]int32, error) {
	out := make([]int32, len(elems))
	for i, e := range elems {
		v, err := strconv.ParseInt(string(e), 10, 32)
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument,
				fmt.Errorf("input '%s' for model 'simple_string': element %d (%q) is not a 32-bit decimal integer", input, i, e))
		}
		out[i] = int32(v)
	}
	return out, nil
}

// SimpleIdentity is Triton's `simple_identity`: BYTES [batch, n] returned as sent.
func (builtins) SimpleIdentity(_ context.Context, req *builtinv1.SimpleIdentityRequest) (*builtinv1.SimpleIdentityResponse, error) {
	return &builtinv1.SimpleIdentityResponse{Output0: req.Input0, Output0Shape: req.Input0Shape}, nil
}

// IdentityFp32 is a rank-1 FP32 identity of any length. Input and output both alias the
// request's bytes, so even a 64 MiB tensor is never copied by the model.
func (builtins) IdentityFp32(_ context.Context, req *builtinv1.IdentityFp32Request) (*builtinv1.IdentityFp32Response, error) {
	return &builtinv1.IdentityFp32Response{Output0: req.Input0}, nil
}

// SimpleSequence is Triton's `simple_sequence`. The registry's sequence handling fills START and
// READY; the model computes OUTPUT = (INPUT + START) * READY.
func (builtins) SimpleSequence(_ context.Context, req *builtinv1.SimpleSequenceRequest) (*builtinv1.SimpleSequenceResponse, error) {
	return &builtinv1.SimpleSequenceResponse{Output: sequenceOutput(req.Input, first(req.Start), 0, 0, first(req.Ready))}, nil
}

// sequenceOutput is OUTPUT = ((INPUT + START) + END * CORRID) * READY, Triton's sequence examples.
func sequenceOutput(in []int32, start, end, corrID, ready int64) []int32 {
	out := make([]int32, len(in))
	for i, v := range in {
		out[i] = int32((int64(v) + start + end*corrID) * ready)
	}
	return out
}

// first is a control input's value: its first element, 0 when absent.
func first(v []int32) int64 {
	if len(v) == 0 {
		return 0
	}
	return int64(v[0])
}

// RepeatInt32 is Triton's decoupled `repeat_int32`: for each element i of IN it waits DELAY[i]
// milliseconds and sends one response with OUT = IN[i] and IDX = i. Like Triton's Python backend
// it then ends with a flags-only final (the registry sends it), so an empty IN yields no data
// responses at all.
func (builtins) RepeatInt32(ctx context.Context, req *builtinv1.RepeatInt32Request, send func(*builtinv1.RepeatInt32Response) error) error {
	if len(req.Delay) != len(req.In) {
		return connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("model 'repeat_int32' expects DELAY to have one element per IN element: IN has %d, DELAY has %d", len(req.In), len(req.Delay)))
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, v := range req.In {
		if req.Delay[i] > 0 {
			timer.Reset(time.Duration(req.Delay[i]) * time.Millisecond)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		}
		if err := send(&builtinv1.RepeatInt32Response{Out: []int32{v}, Idx: []uint32{uint32(i)}}); err != nil {
			return err
		}
	}
	return nil
}

// SquareInt32 is Triton's decoupled `square_int32`: for IN = [n] it sends n responses, each OUT = [n].
func (builtins) SquareInt32(ctx context.Context, req *builtinv1.SquareInt32Request, send func(*builtinv1.SquareInt32Response) error) error {
	n := req.In[0]
	if n < 0 {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("model 'square_int32' needs IN >= 0, got %d", n))
	}
	resp := &builtinv1.SquareInt32Response{Out: []int32{n}} // never changed, so every response can share it
	for range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := send(resp); err != nil {
			return err
		}
	}
	return nil
}
