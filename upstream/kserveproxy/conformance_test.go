package kserveproxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/conformance/suite"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/lib/tensor"
	"github.com/stretchr/testify/require"
)

// TestConformanceThroughProxy runs the whole conformance suite against a front whose every model
// is an upstream's (the built-ins and an LLM-shaped model for the bridge and generate checks): the
// proxied models must behave as the upstream's own do. No check is excluded.
func TestConformanceThroughProxy(t *testing.T) {
	up := startUpstream(t, llm{})
	e := ep("triton", up.Addr, 0)
	// A health check slowed past its timeout by a loaded machine would take the only endpoint
	// out of rotation in the middle of a check that has nothing to do with health.
	e.CheckTimeout = 30 * time.Second
	f := startFront(t, fast(e))
	// 64 MiB through two gateways under the race detector on a loaded machine can take longer
	// than a check's default 30 s.
	rep, err := suite.Run(context.Background(), suite.Config{GRPCAddr: f.Addr, HTTPURL: f.URL, Timeout: 2 * time.Minute, Infergate: true})
	require.NoError(t, err)
	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table, false))
	t.Log("\n" + table.String())
	for _, res := range rep.Results {
		t.Run(res.ID, func(t *testing.T) {
			switch res.Outcome {
			case suite.Warn, suite.Fail: // infergate holds itself to the recommendations too
				t.Errorf("%s: %s", res.Title, strings.TrimSpace(res.Message+" expected "+res.Expect+", got "+res.Got))
			case suite.Skip:
				for _, ext := range rep.Extensions {
					if strings.Contains(res.Message, "'"+ext+"' extension") {
						t.Errorf("skipped although the front advertises %s: %s", ext, res.Message)
					}
				}
			}
		})
	}
	require.Zero(t, rep.Summary.Failed, rep.Summary.String())
}

// llm follows the LLM tensor contract (text_input -> text_output, finish_reason) the way a
// completions model behind Triton's vLLM backend does, answering "echo: <prompt>".
type llm struct{}

func (llm) Config() *inference.ModelConfig {
	return &inference.ModelConfig{
		Name: "echo_llm", Platform: "test", Backend: "test",
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

func (llm) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	prompts, err := tensor.SplitBytes(req.Input("text_input").Data)
	if err != nil {
		return err
	}
	return send(&engines.Response{Outputs: []engines.Tensor{
		{Name: "text_output", Datatype: inference.DataType_TYPE_STRING, Shape: []int64{1}, Data: tensor.JoinBytes([]string{"echo: " + string(prompts[0])})},
		{Name: "finish_reason", Datatype: inference.DataType_TYPE_STRING, Shape: []int64{1}, Data: tensor.JoinBytes([]string{"stop"})},
	}})
}
