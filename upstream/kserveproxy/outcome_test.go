package kserveproxy

import (
	"context"
	"errors"
	"testing"

	"github.com/infergate/infergate/store/breaker"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestOutcome: what a forwarded request tells the breaker about its endpoint. A failure to pass
// the answer on to the gateway's own client (a REST stream's reader gone, a broken gRPC stream)
// says nothing about the upstream, whatever error it carries.
func TestOutcome(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want breaker.Outcome
	}{
		{context.Background(), nil, breaker.Success},
		{context.Background(), status.Error(codes.Unavailable, "down"), breaker.Failure},
		{context.Background(), status.Error(codes.Internal, "boom"), breaker.Failure},
		{context.Background(), status.Error(codes.DeadlineExceeded, "slow"), breaker.Failure},
		{context.Background(), errors.New("not a status"), breaker.Failure},
		{context.Background(), status.Error(codes.ResourceExhausted, "full"), breaker.Throttled},
		{context.Background(), status.Error(codes.InvalidArgument, "bad input"), breaker.Success},
		{context.Background(), &clientGone{status.Error(codes.Unavailable, "client stream broke")}, breaker.Ignored},
		{context.Background(), &clientGone{errors.New("write: broken pipe")}, breaker.Ignored},
		{canceled, status.Error(codes.Unavailable, "down"), breaker.Ignored},
	} {
		if got := outcome(tc.ctx, tc.err); got != tc.want {
			t.Errorf("outcome(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if got := passThrough(&clientGone{errors.New("gone")}); got.Error() != "gone" {
		t.Errorf("passThrough keeps the client's error: %v", got)
	}
}
