package kserve

import (
	"context"
	"errors"
	"slices"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// RegisterGRPC registers the service on a grpc-go server (with ServerOptions' codec and
// interceptors). ModelInfer gets a handler of its own, which claims the pooled buffer a large
// request was decoded into right after decoding, whatever happens next (the end of the call
// failing to arrive, a second message, an interceptor refusing the call), so no buffer outlives
// its call.
func (s *Service) RegisterGRPC(r grpc.ServiceRegistrar) {
	desc := inference.GRPCInferenceService_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "ModelInfer" {
			desc.Methods[i].Handler = s.modelInferHandler
		}
	}
	r.RegisterService(&desc, s.GRPCServer())
}

// modelInferHandler is the generated ModelInfer handler, with the request's buffer claimed
// between decoding and the interceptors, and handed to the response (or the pool) at the end.
func (s *Service) modelInferHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (resp any, err error) {
	in := new(inference.ModelInferRequest)
	err = dec(in)
	held := s.codec.claimRequest(in)
	defer func() {
		if err != nil {
			resp = nil
		}
		s.codec.releaseRequest(held, resp)
	}()
	if err != nil {
		return nil, err
	}
	handler := func(ctx context.Context, req any) (any, error) {
		return srv.(inference.GRPCInferenceServiceServer).ModelInfer(ctx, req.(*inference.ModelInferRequest))
	}
	if interceptor == nil {
		return handler(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: inference.GRPCInferenceService_ModelInfer_FullMethodName}, handler)
}

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
	if v := metadata.ValueFromIncomingContext(ctx, engines.GRPCErrorHeader); len(v) > 0 {
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

// Codec is the native transport's codec (zero-copy tensors), for a server that wraps it.
func (s *Service) Codec() encoding.CodecV2 { return s.codec }

// ServerOptions are the grpc-go options the service needs: the zero-copy tensor codec, Triton's
// message size limits, interceptors that turn the service's errors into gRPC statuses, and with a
// Tracer a span per call.
func (s *Service) ServerOptions() []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(s.codec),
		experimental.BufferPool(s.frames),
		grpc.MaxRecvMsgSize(s.maxBytes),
		grpc.MaxSendMsgSize(s.maxBytes),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if err != nil {
				setErrorTrailer(ctx, err)
				return nil, grpcStatus(err)
			}
			return resp, nil
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := h(srv, ss)
			setErrorTrailer(ss.Context(), err)
			return grpcStatus(err)
		}),
	}
	if s.tracer != nil {
		// Inside the status conversion above: a span sees the service's own error and message.
		opts = append(opts, grpc.ChainUnaryInterceptor(s.tracer.GRPCUnary()), grpc.ChainStreamInterceptor(s.tracer.GRPCStream()))
	}
	return opts
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
