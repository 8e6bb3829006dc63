package suite_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/infergate/infergate/conformance/suite"
	"github.com/infergate/infergate/engines"
	"github.com/infergate/infergate/gen/inference"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/require"
)

// identityModel returns its input INPUT0 as OUTPUT0, for one datatype.
type identityModel struct{ cfg *inference.ModelConfig }

func newIdentity(dt inference.DataType) *identityModel {
	name := "identity_" + strings.ToLower(strings.TrimPrefix(dt.String(), "TYPE_"))
	return &identityModel{cfg: &inference.ModelConfig{
		Name: name, Platform: "test",
		Input:  []*inference.ModelInput{{Name: "INPUT0", DataType: dt, Dims: []int64{-1}}},
		Output: []*inference.ModelOutput{{Name: "OUTPUT0", DataType: dt, Dims: []int64{-1}}},
	}}
}

func (m *identityModel) Config() *inference.ModelConfig { return m.cfg }

func (m *identityModel) Execute(_ context.Context, req *engines.Request, send func(*engines.Response) error) error {
	out := req.Inputs[0]
	out.Name = "OUTPUT0"
	return send(&engines.Response{Outputs: []engines.Tensor{out}})
}

// TestInfergateEveryDatatype runs the inference, data and REST checks against infergate serving an
// identity model per datatype, so every datatype crosses infergate's gRPC and REST codecs.
func TestInfergateEveryDatatype(t *testing.T) {
	t.Parallel()
	var extra []engines.Model
	for dt := inference.DataType_TYPE_BOOL; dt <= inference.DataType_TYPE_BF16; dt++ {
		if dt != inference.DataType_TYPE_FP32 { // identity_fp32 is built in
			extra = append(extra, newIdentity(dt))
		}
	}
	srv := gatewaytest.Start(t, gateway.Config{}, extra...)
	rep, err := suite.Run(context.Background(), suite.Config{GRPCAddr: srv.Addr, HTTPURL: srv.URL, Run: regexpInferData})
	require.NoError(t, err)
	for _, res := range rep.Results {
		require.NotEqual(t, suite.Fail, res.Outcome, "%s: %s expected %s, got %s", res.ID, res.Message, res.Expect, res.Got)
	}
	typed, ok := rep.Result("infer.typed-contents")
	require.True(t, ok)
	for _, dt := range []string{"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64", "BYTES"} {
		require.Contains(t, typed.Message, dt, "typed contents must cover every datatype that has a typed field")
	}
	boolRes, _ := rep.Result("data.bool")
	require.Equal(t, suite.Pass, boolRes.Outcome, boolRes.Message)
}

var regexpInferData = regexp.MustCompile(`^(infer|data|rest)\.`)
