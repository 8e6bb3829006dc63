package suite_test

import (
	"context"
	"maps"

	"net"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/infergate/infergate/conformance/suite"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/infergate/infergate/models/builtin"
	"github.com/infergate/infergate/surface/kserve"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// brokenServer is infergate's KServe service with one rule deliberately broken, served by a bare
// grpc-go server. It exists only to prove the suite notices.
type brokenServer struct {
	inference.GRPCInferenceServiceServer
	rule string
}

// Rules a brokenServer can break.
const (
	ruleUnknownModelCode = "unknown-model-code" // ModelMetadata on an unknown model answers INTERNAL
	ruleTypedOutputs     = "typed-outputs"      // ModelInfer answers typed contents instead of raw
	ruleNoFinalFlag      = "no-final-flag"      // stream responses lack triton_final_response
	ruleSmallMessages    = "4mib-limit"         // grpc-go's default 4 MiB receive limit
	ruleDropsID          = "drops-id"           // ModelInfer does not echo the request id
	ruleReadyUnknown     = "ready-unknown"      // ModelReady on an unknown model answers UNKNOWN
	ruleNoStats          = "stats-miscounts"    // ModelStatistics never counts inferences
)

func (b *brokenServer) ModelMetadata(ctx context.Context, req *inference.ModelMetadataRequest) (*inference.ModelMetadataResponse, error) {
	resp, err := b.GRPCInferenceServiceServer.ModelMetadata(ctx, req)
	if b.rule == ruleUnknownModelCode && req.GetVersion() == "" && connect.CodeOf(err) == connect.CodeNotFound {
		return nil, status.Error(codes.Internal, "model lookup failed")
	}
	return resp, err
}

func (b *brokenServer) ModelReady(ctx context.Context, req *inference.ModelReadyRequest) (*inference.ModelReadyResponse, error) {
	resp, err := b.GRPCInferenceServiceServer.ModelReady(ctx, req)
	if b.rule == ruleReadyUnknown && err == nil && !resp.GetReady() {
		return nil, status.Error(codes.Unknown, "no such model")
	}
	return resp, err
}

func (b *brokenServer) ModelInfer(ctx context.Context, req *inference.ModelInferRequest) (*inference.ModelInferResponse, error) {
	resp, err := b.GRPCInferenceServiceServer.ModelInfer(ctx, req)
	if err != nil {
		return resp, err
	}
	switch b.rule {
	case ruleTypedOutputs:
		for i, out := range resp.GetOutputs() {
			c, ok := tensor.ToContents(tensor.ParseDatatype(out.GetDatatype()), resp.RawOutputContents[i])
			if !ok {
				return nil, status.Errorf(codes.Internal, "output '%s' has no typed form", out.GetName())
			}
			out.Contents = c
		}
		resp.RawOutputContents = nil
	case ruleDropsID:
		resp.Id = ""
	}
	return resp, nil
}

func (b *brokenServer) ModelStatistics(ctx context.Context, req *inference.ModelStatisticsRequest) (*inference.ModelStatisticsResponse, error) {
	resp, err := b.GRPCInferenceServiceServer.ModelStatistics(ctx, req)
	if b.rule == ruleNoStats && err == nil {
		for _, s := range resp.GetModelStats() {
			s.InferenceCount, s.ExecutionCount, s.InferenceStats = 0, 0, &inference.InferStatistics{}
		}
	}
	return resp, err
}

func (b *brokenServer) ModelStreamInfer(stream grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]) error {
	if b.rule == ruleNoFinalFlag {
		return b.GRPCInferenceServiceServer.ModelStreamInfer(noFinalFlag{stream})
	}
	return b.GRPCInferenceServiceServer.ModelStreamInfer(stream)
}

type noFinalFlag struct {
	grpc.BidiStreamingServer[inference.ModelInferRequest, inference.ModelStreamInferResponse]
}

func (s noFinalFlag) Send(r *inference.ModelStreamInferResponse) error {
	if resp := r.GetInferResponse(); resp != nil {
		// The service shares one parameter map between responses: copy before editing.
		params := maps.Clone(resp.GetParameters())
		delete(params, "triton_final_response")
		resp.Parameters = params
	}
	return s.BidiStreamingServer.Send(r)
}

// startBroken serves the built-in models with rule broken and returns the address.
func startBroken(t *testing.T, rule string) string {
	reg := engines.NewRegistry()
	require.NoError(t, builtin.Register(reg))
	svc := kserve.NewService(reg)
	opts := svc.ServerOptions()
	if rule == ruleSmallMessages {
		opts = append(opts, grpc.MaxRecvMsgSize(4<<20))
	}
	srv := grpc.NewServer(opts...)
	inference.RegisterGRPCInferenceServiceServer(srv, &brokenServer{GRPCInferenceServiceServer: svc.GRPCServer(), rule: rule})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// TestBrokenServer proves the suite can fail: against a server that breaks one rule, exactly the
// checks about that rule change outcome, to FAIL where the rule is the v2 text's or Triton's and
// to WARN where it is only recommended; every other check keeps its outcome.
func TestBrokenServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite once per broken rule")
	}
	t.Parallel()
	baseline := runSuite(t, startBroken(t, ""))
	require.Empty(t, failures(baseline), "the unbroken server must pass")
	const fail, warn = suite.Fail, suite.Warn
	for _, tc := range []struct {
		rule    string
		changed map[string]suite.Outcome
	}{
		{ruleUnknownModelCode, map[string]suite.Outcome{"metadata.model-unknown": fail}},
		{ruleTypedOutputs, map[string]suite.Outcome{"infer.raw-outputs": warn}},
		{ruleNoFinalFlag, map[string]suite.Outcome{"stream.pipelined": fail, "decoupled.repeat": fail, "decoupled.empty-final": fail}},
		{ruleSmallMessages, map[string]suite.Outcome{"transport.large-5mib": warn, "transport.large-64mib": warn}},
		{ruleDropsID, map[string]suite.Outcome{"infer.id": fail, "transport.concurrent-200": fail}},
		{ruleReadyUnknown, map[string]suite.Outcome{"metadata.model-ready-unknown": fail}},
		{ruleNoStats, map[string]suite.Outcome{"config.statistics": fail}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			t.Parallel()
			rep := runSuite(t, startBroken(t, tc.rule))
			got := map[string]suite.Outcome{}
			for _, res := range rep.Results {
				if base, _ := baseline.Result(res.ID); base.Outcome != res.Outcome {
					got[res.ID] = res.Outcome
				}
			}
			require.Equal(t, tc.changed, got, "changed checks:\n%s", describe(rep, slices.Collect(maps.Keys(got))))
		})
	}
}

func runSuite(t *testing.T, addr string) *suite.Report {
	rep, err := suite.Run(context.Background(), suite.Config{GRPCAddr: addr})
	require.NoError(t, err)
	return rep
}

func failures(rep *suite.Report) []string {
	var ids []string
	for _, res := range rep.Results {
		if res.Outcome == suite.Fail {
			ids = append(ids, res.ID)
		}
	}
	return ids
}

func describe(rep *suite.Report, ids []string) string {
	var b strings.Builder
	for _, id := range ids {
		res, _ := rep.Result(id)
		b.WriteString(id + ": " + res.Message + " expected " + res.Expect + ", got " + res.Got + "\n")
	}
	return b.String()
}
