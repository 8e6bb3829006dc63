package kserve

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// GRPCServer returns the service for grpc-go's native transport, which serves gRPC clients
// faster than net/http's HTTP/2 server can. Register it with ServerOptions' interceptors, which
// give errors their gRPC status.
func (s *Service) GRPCServer() inference.GRPCInferenceServiceServer { return grpcService{s} }

// grpcService adapts Service to grpc-go: the unary methods are shared as they are; only the
// stream needs its own binding.
type grpcService struct{ *Service }

func (g grpcService) ModelStreamInfer(stream grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	ctx := stream.Context()
	failFast := false
	if v := metadata.ValueFromIncomingContext(ctx, GRPCErrorHeader); len(v) > 0 {
		failFast = v[0] == "true"
	}
	return g.serveStream(ctx, grpcStream{stream, g.codec}, failFast)
}

type grpcStream struct {
	grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]
	codec *tensorCodec
}

func (s grpcStream) Receive() (*inference.ModelInferRequest, error) {
	req, err := s.Recv()
	// A stream's requests are not pooled: their tensors may be read after the next one arrives.
	// Claiming only lets the codec forget them; the buffer becomes ordinary garbage.
	s.codec.claimRequest(req)
	return req, err
}

// ServerOptions are the grpc-go options the service needs: the zero-copy tensor codec, Triton's
// message size limits, and interceptors that turn the service's errors into gRPC statuses.
func (s *Service) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(s.codec),
		experimental.BufferPool(s.frames),
		grpc.MaxRecvMsgSize(s.maxBytes),
		grpc.MaxSendMsgSize(s.maxBytes),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			held := s.codec.claimRequest(req)
			resp, err := h(ctx, req)
			if err != nil {
				s.codec.releaseRequest(held, nil)
				setErrorTrailer(ctx, err)
				return nil, grpcStatus(err)
			}
			s.codec.releaseRequest(held, resp)
			return resp, nil
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := h(srv, ss)
			setErrorTrailer(ss.Context(), err)
			return grpcStatus(err)
		}),
	}
}

// setErrorTrailer sends the metadata a *connect.Error carries (the guard's retry-after) as gRPC
// trailers, as connect-go does for Connect and gRPC-Web clients.
func setErrorTrailer(ctx context.Context, err error) {
	var ce *connect.Error
	if !errors.As(err, &ce) || len(ce.Meta()) == 0 {
		return
	}
	md := metadata.MD{}
	for k, vv := range ce.Meta() {
		md.Append(k, vv...)
	}
	_ = grpc.SetTrailer(ctx, md)
}

// grpcStatus converts an error from the service to a grpc-go status error with the same code and
// message.
func grpcStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return status.Error(codes.Code(ce.Code()), ce.Message())
	}
	if st := status.FromContextError(err); st.Code() != codes.Unknown {
		return st.Err()
	}
	return status.Error(codes.Internal, err.Error())
}
