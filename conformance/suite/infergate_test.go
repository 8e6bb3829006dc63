package suite_test

import (
	"context"
	"strings"
	"testing"

	"github.com/infergate/infergate/conformance/suite"
	"github.com/infergate/infergate/surface/gateway"
	"github.com/infergate/infergate/surface/gateway/gatewaytest"
	"github.com/stretchr/testify/require"
)

// TestInfergate runs the whole suite against an infergate started in-process, as `go run
// ./conformance -infergate` would against `go run ./runtime`: nothing may fail or warn (infergate
// holds itself to the recommended rules and its own conventions too), and nothing may skip for
// want of an extension infergate advertises.
func TestInfergate(t *testing.T) {
	t.Parallel()
	srv := gatewaytest.Start(t, gateway.Config{})
	rep, err := suite.Run(context.Background(), suite.Config{GRPCAddr: srv.Addr, HTTPURL: srv.URL, Infergate: true})
	require.NoError(t, err)
	var table strings.Builder
	require.NoError(t, rep.WriteTable(&table, false))
	t.Log("\n" + table.String())
	for _, res := range rep.Results {
		t.Run(res.ID, func(t *testing.T) {
			switch res.Outcome {
			case suite.Fail:
				t.Errorf("%s: %s", res.Title, strings.TrimSpace(res.Message+" expected "+res.Expect+", got "+res.Got))
			case suite.Skip:
				for _, ext := range rep.Extensions {
					if strings.Contains(res.Message, "'"+ext+"' extension") {
						t.Errorf("skipped although infergate advertises %s: %s", ext, res.Message)
					}
				}
			}
		})
	}
	require.Zero(t, rep.Summary.Failed, rep.Summary.String())
	require.Zero(t, rep.Summary.Warned, rep.Summary.String())
}
