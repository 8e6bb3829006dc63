package gateway_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The baseline is the least a Go server can do for the same work: a bare grpc-go server with a
// hand-written ServiceDesc for inference.GRPCInferenceService, whose handlers decode the request,
// do `simple`'s arithmetic (or `identity_fp32`'s echo) and answer with the same response shape
// infergate sends. Benchmarks run it in the same process as infergate, as a sibling sub-benchmark.

// baselineService is the (empty) handler interface of baselineDesc; any value implements it.
type baselineService interface{}

var baselineDesc = grpc.ServiceDesc{
	ServiceName: "inference.GRPCInferenceService",
	HandlerType: (*baselineService)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "ModelInfer",
		Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			req := new(inference.ModelInferRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			return baselineInfer(req)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "ModelStreamInfer",
		ServerStreams: true,
		ClientStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			for {
				req := new(inference.ModelInferRequest)
				if err := stream.RecvMsg(req); err != nil {
					if errors.Is(err, io.EOF) {
						return nil
					}
					return err
				}
				out, err := baselineInfer(req)
				if err != nil {
					return err
				}
				out.Parameters = baselineFinal // as infergate marks non-decoupled stream responses
				if err := stream.SendMsg(&inference.ModelStreamInferResponse{InferResponse: out}); err != nil {
					return err
				}
			}
		},
	}},
	Metadata: "grpc_service.proto",
}

var baselineFinal = map[string]*inference.InferParameter{
	"triton_final_response": {ParameterChoice: &inference.InferParameter_BoolParam{BoolParam: true}},
}

// baselineInfer serves `simple` (INT32 sum and difference) and `identity_fp32` (echo).
func baselineInfer(req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	in, raw := req.GetInputs(), req.GetRawInputContents()
	switch req.GetModelName() {
	case "simple":
		if len(in) != 2 || len(raw) != 2 || len(raw[0]) != 64 || len(raw[1]) != 64 {
			return nil, status.Error(codes.InvalidArgument, "simple: want two raw INT32 [1,16] inputs")
		}
		buf := make([]byte, 128)
		sum, diff := buf[:64:64], buf[64:]
		a, b := raw[0], raw[1]
		for i := 0; i < 64; i += 4 {
			x, y := int32(binary.LittleEndian.Uint32(a[i:])), int32(binary.LittleEndian.Uint32(b[i:]))
			binary.LittleEndian.PutUint32(sum[i:], uint32(x+y))
			binary.LittleEndian.PutUint32(diff[i:], uint32(x-y))
		}
		shape := in[0].GetShape()
		return &inference.ModelInferResponse{
			ModelName: "simple", ModelVersion: "1", Id: req.GetId(),
			Outputs: []*inference.ModelInferResponse_InferOutputTensor{
				{Name: "OUTPUT0", Datatype: "INT32", Shape: shape},
				{Name: "OUTPUT1", Datatype: "INT32", Shape: shape},
			},
			RawOutputContents: [][]byte{sum, diff},
		}, nil
	case "identity_fp32":
		if len(in) != 1 || len(raw) != 1 {
			return nil, status.Error(codes.InvalidArgument, "identity_fp32: want one raw FP32 input")
		}
		return &inference.ModelInferResponse{
			ModelName: "identity_fp32", ModelVersion: "1", Id: req.GetId(),
			Outputs: []*inference.ModelInferResponse_InferOutputTensor{
				{Name: "OUTPUT0", Datatype: "FP32", Shape: in[0].GetShape()},
			},
			RawOutputContents: raw,
		}, nil
	}
	return nil, status.Errorf(codes.NotFound, "Request for unknown model: '%s' is not found", req.GetModelName())
}

// startBaseline serves baselineDesc on a loopback port until tb ends and returns its address.
func startBaseline(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(1<<30), grpc.MaxSendMsgSize(1<<30))
	srv.RegisterService(&baselineDesc, struct{}{})
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(srv.Stop)
	return ln.Addr().String()
}
