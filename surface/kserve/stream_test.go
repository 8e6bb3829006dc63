package kserve_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func repeatRequest(id string, in []int32, delayMS uint32) *inference.ModelInferRequest {
	delay := make([]uint32, len(in))
	for i := range delay {
		delay[i] = delayMS
	}
	return &inference.ModelInferRequest{ModelName: "repeat_int32", Id: id,
		Inputs: []*inference.ModelInferRequest_InferInputTensor{
			rawInput("IN", "INT32", []int64{int64(len(in))}),
			rawInput("DELAY", "UINT32", []int64{int64(len(in))}),
			rawInput("WAIT", "UINT32", []int64{1}),
		},
		RawInputContents: [][]byte{tensor.Bytes(in), tensor.Bytes(delay), tensor.Bytes([]uint32{0})},
	}
}

func final(r *inference.ModelInferResponse) (value, present bool) {
	p, ok := r.GetParameters()["triton_final_response"]
	return p.GetBoolParam(), ok
}

func TestStreamPipelinedInOrder(t *testing.T) {
	srv := start(t)
	for _, c := range streamClients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			s := openStream(context.Background(), t, c)
			for i := range 10 {
				require.NoError(t, s.Send(simpleRequest(fmt.Sprint("r", i))))
			}
			require.NoError(t, s.CloseSend())
			got, err := recvAll(t, s)
			require.NoError(t, err)
			require.Len(t, got, 10)
			for i, m := range got {
				assert.Empty(t, m.ErrorMessage)
				assert.Equal(t, fmt.Sprint("r", i), m.InferResponse.Id)
				v, ok := final(m.InferResponse)
				assert.True(t, ok && v, "every non-decoupled response is final")
				assert.Equal(t, seq(16, func(i int) int32 { return int32(i) + 1 }), int32s(m.InferResponse.RawOutputContents[0]))
			}
		})
	}
}

func TestStreamErrorInTheMiddleKeepsStreamOpen(t *testing.T) {
	srv := start(t)
	for _, c := range streamClients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			s := openStream(context.Background(), t, c)
			bad := simpleRequest("bad")
			bad.ModelName = "nope"
			invalid := simpleRequest("invalid")
			invalid.Inputs[0].Datatype = "FP32"
			for _, r := range []*inference.ModelInferRequest{simpleRequest("a"), bad, invalid, simpleRequest("b")} {
				require.NoError(t, s.Send(r))
			}
			require.NoError(t, s.CloseSend())
			got, err := recvAll(t, s)
			require.NoError(t, err)
			require.Len(t, got, 4)
			assert.Equal(t, "a", got[0].InferResponse.Id)
			assert.Equal(t, "Request for unknown model: 'nope' is not found", got[1].ErrorMessage)
			assert.Equal(t, "bad", got[1].InferResponse.Id)
			assert.Equal(t, "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'", got[2].ErrorMessage)
			assert.Equal(t, "invalid", got[2].InferResponse.Id)
			assert.Empty(t, got[3].ErrorMessage)
			assert.Equal(t, "b", got[3].InferResponse.Id)
		})
	}
}

func TestStreamTritonGRPCErrorEndsStream(t *testing.T) {
	srv := start(t)
	for _, c := range streamClients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			s := openStream(context.Background(), t, c, "triton_grpc_error", "true")
			bad := simpleRequest("bad")
			bad.ModelName = "nope"
			require.NoError(t, s.Send(simpleRequest("a")))
			require.NoError(t, s.Send(bad))
			// Without fail-fast the stream would stay open (this side never closes): bound the wait.
			got, err := recvAllWithin(t, s, 10*time.Second)
			require.Len(t, got, 1)
			assert.Equal(t, "a", got[0].InferResponse.Id)
			requireStatus(t, err, connect.CodeNotFound, "Request for unknown model: 'nope' is not found")
		})
	}
}

func TestStreamDecoupledInterleavesByID(t *testing.T) {
	srv := start(t)
	for _, c := range streamClients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			s := openStream(context.Background(), t, c)
			require.NoError(t, s.Send(repeatRequest("x", []int32{100, 101, 102, 103}, 20)))
			require.NoError(t, s.Send(repeatRequest("y", []int32{200, 201, 202, 203}, 20)))
			require.NoError(t, s.CloseSend())
			got, err := recvAll(t, s)
			require.NoError(t, err)
			require.Len(t, got, 8)
			byID := map[string][]int32{}
			var order []string
			for _, m := range got {
				require.Empty(t, m.ErrorMessage)
				r := m.InferResponse
				v, ok := final(r)
				assert.True(t, ok, "triton_final_response is on every response")
				assert.False(t, v, "repeat_int32 ends with a flags-only final, so data responses are not final")
				out := int32s(r.RawOutputContents[0])[0]
				idx := tensor.View[uint32](r.RawOutputContents[1])[0]
				assert.Equal(t, uint32(len(byID[r.Id])), idx)
				byID[r.Id] = append(byID[r.Id], out)
				order = append(order, r.Id)
			}
			assert.Equal(t, []int32{100, 101, 102, 103}, byID["x"])
			assert.Equal(t, []int32{200, 201, 202, 203}, byID["y"])
			assert.NotEqual(t, []string{"x", "x", "x", "x", "y", "y", "y", "y"}, order, "the two requests ran concurrently")
		})
	}
}

func TestStreamEmptyFinalResponse(t *testing.T) {
	srv := start(t)
	c := streamClients(t, srv)[0]
	s := openStream(context.Background(), t, c)
	empty := repeatRequest("e", nil, 0)
	empty.Parameters = map[string]*inference.InferParameter{"triton_enable_empty_final_response": boolParam(true)}
	require.NoError(t, s.Send(empty))
	require.NoError(t, s.Send(repeatRequest("silent", nil, 0))) // no flag: zero responses
	sq := &inference.ModelInferRequest{ModelName: "square_int32", Id: "sq",
		Parameters:       map[string]*inference.InferParameter{"triton_enable_empty_final_response": boolParam(true)},
		Inputs:           []*inference.ModelInferRequest_InferInputTensor{rawInput("IN", "INT32", []int64{1})},
		RawInputContents: [][]byte{tensor.Bytes([]int32{3})},
	}
	require.NoError(t, s.Send(sq))
	require.NoError(t, s.CloseSend())
	got, err := recvAll(t, s)
	require.NoError(t, err)
	var e, square []*inference.ModelInferResponse
	for _, m := range got {
		require.Empty(t, m.ErrorMessage)
		switch m.InferResponse.Id {
		case "e":
			e = append(e, m.InferResponse)
		case "sq":
			square = append(square, m.InferResponse)
		default:
			t.Fatalf("unexpected response for %q", m.InferResponse.Id)
		}
	}
	require.Len(t, e, 1)
	v, _ := final(e[0])
	assert.True(t, v)
	assert.Empty(t, e[0].Outputs)
	assert.Equal(t, "repeat_int32", e[0].ModelName)
	require.Len(t, square, 4, "three data responses then the empty final")
	for _, r := range square[:3] {
		assert.Equal(t, []int32{3}, int32s(r.RawOutputContents[0]))
	}
	v, _ = final(square[3])
	assert.True(t, v)
}

func TestStreamDecoupledErrorReported(t *testing.T) {
	srv := start(t)
	s := openStream(context.Background(), t, streamClients(t, srv)[0])
	bad := repeatRequest("d", []int32{1, 2}, 0)
	bad.Inputs[1].Shape = []int64{1}
	bad.RawInputContents[1] = tensor.Bytes([]uint32{0})
	require.NoError(t, s.Send(bad))
	require.NoError(t, s.CloseSend())
	got, err := recvAll(t, s)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "d", got[0].InferResponse.Id)
	assert.Equal(t, "model 'repeat_int32' expects DELAY to have one element per IN element: IN has 2, DELAY has 1", got[0].ErrorMessage)
}

func TestStreamCancelStopsDecoupledModel(t *testing.T) {
	srv := start(t)
	for _, c := range streamClients(t, srv) {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stats := &srv.Registry.Lookup("repeat_int32").Stats
			failed := stats.Fail.Count()
			s := openStream(ctx, t, c)
			in := make([]int32, 1000)
			require.NoError(t, s.Send(repeatRequest("long", in, 10))) // 10 s if never cancelled
			first, err := s.Recv()
			require.NoError(t, err)
			assert.Equal(t, "long", first.InferResponse.Id)
			cancel()
			_, err = recvAll(t, s)
			require.Error(t, err)
			assert.Equal(t, connect.CodeCanceled, codeOf(err), "%v", err)
			// The model's request is failed (not finished after 10 s) soon after the cancel.
			// Uncancelled, the request would run for 10 s; it fails well before.
			require.Eventually(t, func() bool { return stats.Fail.Count() > failed }, 5*time.Second, 5*time.Millisecond)
		})
	}
}

func TestStreamManyDecoupledRequestsInFlight(t *testing.T) {
	srv := start(t)
	s := openStream(context.Background(), t, streamClients(t, srv)[0])
	const n = 300 // more than one stream may run at once: the rest wait their turn
	for i := range n {
		require.NoError(t, s.Send(repeatRequest(fmt.Sprint("m", i), []int32{int32(i)}, 20)))
	}
	require.NoError(t, s.CloseSend())
	got, err := recvAllWithin(t, s, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, n)
	seen := map[string]bool{}
	for _, m := range got {
		require.Empty(t, m.ErrorMessage)
		seen[m.InferResponse.Id] = true
	}
	assert.Len(t, seen, n)
}
