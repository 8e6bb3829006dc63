package suite_test

import (
	"context"
	"encoding/binary"
	"regexp"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/infergate/infergate/conformance/suite"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/require"
)

// fakeLLM follows the LLM tensor contract (text_input -> text_output, finish_reason) the way a
// completions upstream behind the bridge does: it answers "echo: <prompt>". broken selects one
// deliberate violation.
type fakeLLM struct{ broken string }

func (m *fakeLLM) Config() *inference.ModelConfig {
	return &inference.ModelConfig{
		Name: "fake_llm", Platform: "test",
		Input: []*inference.ModelInput{
			{Name: "text_input", DataType: inference.DataType_TYPE_STRING, Dims: []int64{1}},
			{Name: "stream", DataType: inference.DataType_TYPE_BOOL, Dims: []int64{1}, Optional: true},
		},
		Output: []*inference.ModelOutput{
			{Name: "text_output", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
			{Name: "finish_reason", DataType: inference.DataType_TYPE_STRING, Dims: []int64{-1}},
		},
	}
}

func (m *fakeLLM) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	in := req.Input("text_input")
	if in == nil {
		return connect.NewError(connect.CodeInvalidArgument, nil)
	}
	prompt := in.Data[min(4, len(in.Data)):]
	reason := "stop"
	if m.broken == "finish_reason" {
		reason = "done"
	}
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "text_output", Datatype: inference.DataType_TYPE_STRING, Shape: []int64{1}, Data: framed("echo: " + string(prompt))},
		{Name: "finish_reason", Datatype: inference.DataType_TYPE_STRING, Shape: []int64{1}, Data: framed(reason)},
	}})
}

func framed(s string) []byte {
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(s))), s...)
}

// TestBridgeChecks runs the LLM and REST generate checks against a fake LLM model: they pass on a
// model that keeps the contract and bridge.completions fails on one whose finish_reason is not
// OpenAI's.
func TestBridgeChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		broken string
		failed []string
	}{
		{broken: "", failed: nil},
		{broken: "finish_reason", failed: []string{"bridge.completions"}},
	} {
		t.Run("broken="+tc.broken, func(t *testing.T) {
			t.Parallel()
			srv := gatewaytest.Start(t, gateway.Config{}, &fakeLLM{broken: tc.broken})
			rep, err := suite.Run(context.Background(), suite.Config{GRPCAddr: srv.Addr, HTTPURL: srv.URL, Infergate: true, Run: regexp.MustCompile(`^(bridge\.|rest\.generate)`)})
			require.NoError(t, err)
			var failed []string
			for _, res := range rep.Results {
				require.NotEqual(t, suite.Skip, res.Outcome, "%s skipped: %s", res.ID, res.Message)
				if res.Outcome == suite.Fail {
					failed = append(failed, res.ID)
				}
			}
			require.Len(t, rep.Results, 5)
			require.Equal(t, tc.failed, failed, strings.Join(rep.Models, ","))
		})
	}
}
