package engines

import "math"

// KServe v2 protocol facts both sides of it share: the gateway's KServe surface (surface/kserve)
// and its client of upstream Triton servers (upstream/kserveproxy).

// GRPCErrorHeader is Triton's request header (gRPC metadata) with which a client asks ModelStreamInfer
// to end the stream with a gRPC status on the first error, instead of reporting the error in an
// error_message response and carrying on.
const GRPCErrorHeader = "triton_grpc_error"

// DefaultMaxMessageBytes is the default limit on one request or response message: 2 GiB, as in
// Triton, rather than grpc-go's 4 MiB that breaks large tensors.
const DefaultMaxMessageBytes = math.MaxInt32
