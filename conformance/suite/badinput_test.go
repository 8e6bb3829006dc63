package suite_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/infergate/infergate/conformance/internal/fixture"
	"github.com/infergate/infergate/conformance/suite"
	"github.com/stretchr/testify/require"
)

// TestBadServers runs the whole suite against servers that hang, reset connections or answer
// garbage: the run ends with a report of every check, each failure says what went wrong, and no
// check panics. want names checks whose failure message must contain a phrase.
func TestBadServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *fixture.Server
		run   *regexp.Regexp // nil: every check but the 64 MiB one
		want  map[string]string
	}{
		{"hangs", fixture.Hanging, nil, map[string]string{"health.server-live": "no answer within", "rest.health": "no answer within"}},
		// Every inference check meets the hang and waits out its limit: only some of them run.
		{"hangs-on-infer", fixture.HangingInfer, regexp.MustCompile(`^(health\.discovery|infer\.(basic|select-output)|rest\.infer-json|transport\.concurrent-200|data\.zero-size)$`),
			map[string]string{"infer.basic": "no answer within", "rest.infer-json": "no answer within", "transport.concurrent-200": "no answer within"}},
		{"resets", fixture.Resetting, nil, map[string]string{"health.server-live": "UNAVAILABLE", "rest.health": "GET /v2/health/live: an answer"}},
		{"garbles", fixture.Garbled, nil, map[string]string{"infer.basic": "INTERNAL", "rest.server-metadata": "a JSON body"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := tc.start(t)
			run := tc.run
			if run == nil {
				run = allBut("transport.large-64mib")
			}
			// A short limit keeps the hanging runs fast; it bounds each check, so the run ends.
			rep, err := suite.Run(context.Background(), suite.Config{GRPCAddr: srv.GRPCAddr, HTTPURL: srv.HTTPURL, Models: srv.Models,
				Timeout: 200 * time.Millisecond, Run: run})
			require.NoError(t, err)
			n := 0
			for _, c := range suite.Checks() {
				if run.MatchString(c.ID) {
					n++
				}
			}
			require.Len(t, rep.Results, n, "every check reported")
			var table strings.Builder
			require.NoError(t, rep.WriteTable(&table, false))
			t.Log("\n" + table.String())
			require.Positive(t, rep.Summary.Failed)
			for _, res := range rep.Results {
				require.NotContains(t, res.Message, "panicked", res.ID)
				if res.Outcome == suite.Fail {
					require.NotEmpty(t, res.Message+res.Expect+res.Got, "%s failed without saying why", res.ID)
				}
			}
			for id, phrase := range tc.want {
				res, ok := rep.Result(id)
				require.True(t, ok, id)
				require.Equal(t, suite.Fail, res.Outcome, "%s: %s", id, res.Message)
				require.Contains(t, res.Message+" "+res.Expect+" "+res.Got, phrase, id)
			}
		})
	}
}
